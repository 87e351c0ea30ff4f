# Sourced by bench/jetstream.sh and bench/cluster.sh: the rounds of a comparison and its
# summary. The script sets rounds, workloads (an array) and tmp, and defines sides, which
# prints for a workload one line "label command args" per side, tinybroker's first.

# run_rounds runs every workload's sides, round after round (the sides of a round back to
# back), printing each result line prefixed with "label workload roundN" and keeping it in
# $tmp/results.
run_rounds() {
  local r w label cmd args
  for r in $(seq "$rounds"); do
    for w in "${workloads[@]}"; do
      while read -r label cmd args; do
        # shellcheck disable=SC2086
        $cmd $args | sed "s/^/$label $w round$r /" | tee -a "$tmp/results"
      done < <(sides "$w")
    done
  done
  echo "# $(date -u '+%Y-%m-%dT%H:%M:%SZ') load average $(cut -d' ' -f1-3 /proc/loadavg)"
  touch "$tmp/results"
}

median() { # label workload -> median of the first *_per_s figure
  awk -v s="$1" -v w="$2" '$1==s && $2==w { for (i = 4; i <= NF; i++) if ($i ~ /_per_s=/) { split($i, kv, "="); print kv[2]; break } }' "$tmp/results" |
    sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print 0}'
}

# round_ratios base label workload -> the median over rounds of base / label, each round's
# runs having been back to back
round_ratios() {
  awk -v b="$1" -v s="$2" -v w="$3" '$2==w && ($1==s || $1==b) { for (i = 4; i <= NF; i++) if ($i ~ /_per_s=/) { split($i, kv, "="); v[$1, $3] = kv[2]; r[$3] = 1; break } }
    END { for (k in r) if (v[s, k] > 0 && v[b, k] > 0) printf "%.3f\n", v[b, k] / v[s, k] }' "$tmp/results" |
    sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'
}

# summarize base title: per workload, base's median, each other side's, their ratio and the
# median of the per-round ratios.
summarize() {
  local base=$1 w t m label
  echo "# medians, $2, and the median of the per-round ratios"
  for w in "${workloads[@]}"; do
    t=$(median "$base" "$w")
    while read -r label _; do
      [ "$label" = "$base" ] && continue
      m=$(median "$label" "$w")
      echo "$w $base $t $label $m ratio $(awk -v a="$m" -v b="$t" 'BEGIN {if (a > 0) printf "%.3f", b/a}') round_ratio $(round_ratios "$base" "$label" "$w")"
    done < <(sides "$w")
  done
}
