#!/usr/bin/env bash
# Runs tinybroker's benchmark (run.sh) and the NATS peer's (shared/bench/peers/nats/run.sh) on
# this machine, alternating workload by workload, and prints their median figures side by side.
# W4 (plugin cost) and W6 (many streams) have no NATS counterpart: they run tinybroker alone and
# their rows hold tinybroker's figures against the targets (W4: plugins ÷ plain ≥ 0.80 per
# plugin language; W6: p99 < 5 ms, with the broker's memory per stream and CPU).
#   ./compare.sh                       # W1 W2 W3 W4 W5 W6
#   ./compare.sh W1 W2 W3              # a selection
#   W5_SUBS="1000 10000" ./compare.sh W5
#   RUN_FLAGS="-n 100000 -reps 5" ./compare.sh W1    # passed to both sides
#   TB_CONFIG=fanout-buffer.hcl ./compare.sh W1       # tinybroker's server config (see run.sh)
# The NATS peer is looked up beside the repository, in ../shared/bench/peers/nats; set
# NATS_RUN=/path/to/run.sh to use another. Both sides' progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/.." && pwd))
nats_run=${NATS_RUN:-$top/../shared/bench/peers/nats/run.sh}
if [ ! -f "$nats_run" ]; then
  echo "compare.sh: the NATS peer is missing: no $nats_run" >&2
  echo "  It lives in shared/bench/peers/nats, in a checkout of shared/ beside the repository;" >&2
  echo "  clone it there, or set NATS_RUN=/path/to/peers/nats/run.sh." >&2
  exit 1
fi
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2 W3 W4 W5 W6)
for w in "${workloads[@]}"; do
  case "$w" in
    W1 | W2 | W3 | W4 | W5 | W6) ;;
    *) echo "compare.sh: unknown workload $w; use W1 to W6" >&2; exit 1 ;;
  esac
done

tb_out=$(mktemp)
nats_out=$(mktemp)
trap 'rm -f "$tb_out" "$nats_out"' EXIT
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
load0=$(cut -d' ' -f1-3 /proc/loadavg)
# One workload (one W5 size) at a time, tinybroker then NATS, so that whatever else the
# machine does at the time weighs on both sides alike.
steps=()
for w in "${workloads[@]}"; do
  if [ "$w" = W5 ]; then
    for k in ${W5_SUBS:-1000 10000 100000}; do steps+=("W5 $k"); done
  else
    steps+=("$w")
  fi
done
for step in "${steps[@]}"; do
  w=${step%% *}
  subs=${step#"$w"}
  nats_w=$w
  [ "$w" != W2 ] || nats_w="W2js W2core"
  echo "== $step: tinybroker (bench/run.sh)" >&2
  W5_SUBS=$subs "$here/run.sh" "$w" >>"$tb_out" || echo "== run.sh $step failed (exit $?)" >>"$tb_out"
  [ "$w" != W4 ] && [ "$w" != W6 ] || continue # no NATS counterpart
  echo "== $step: NATS ($nats_run)" >&2
  # shellcheck disable=SC2086  # nats_w is split on purpose
  W5_SUBS=$subs "$nats_run" $nats_w >>"$nats_out" || echo "== NATS run.sh $step failed (exit $?)" >>"$nats_out"
done

# fig FILE PREFIX NAME prints figure NAME of the median line of PREFIX, or nothing.
fig() {
  awk -v p="$2 reps=" -v f="$3=" 'index($0, p) == 1 && / median / {
    for (i = 1; i <= NF; i++) if (index($i, f) == 1) { print substr($i, length(f) + 1); exit }
  }' "$1"
}
ratio() { # figures that are missing or FAILED give "-"
  if [[ $1 =~ ^[0-9.]+$ && $2 =~ ^[0-9.]+$ ]]; then awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "-"; else printf "%.2f", a / b }'; else echo "-"; fi
}
# row LABEL FIGURE TB_PREFIX NATS_PREFIX NATS_FIGURE BETTER
row() {
  local t n
  t=$(fig "$tb_out" "$3" "$2")
  n=$(fig "$nats_out" "$4" "$5")
  if [ -z "$t" ]; then
    if grep -q "^$3 FAILED" "$tb_out"; then t=FAILED; else t=-; fi
  fi
  [ -n "$n" ] || n=-
  printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "$1" "$2" "$t" "${4#* }" "$n" "$(ratio "$t" "$n")" "$6"
}
# met VALUE OP TARGET prints "met" or "NOT met" (OP: ge or lt), or "-" for a missing value.
met() {
  if [[ ! $1 =~ ^[0-9.]+$ ]]; then echo "-"; return; fi
  awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == "ge") ? v >= t : v < t; print ok ? "met" : "NOT met" }'
}
# w4rows prints, for each language and workload of W4, plugins and plain msgs/s (in the
# tinybroker and NATS columns: NATS has no part in W4) and their ratio against the target.
w4rows() {
  local line lang wl plain plugins r target
  { grep -E '^W4 tinybroker lang=[^ ]+ (skipped|FAILED)' "$tb_out" || true; } | while read -r line; do
    lang=$(sed 's/.*lang=\([^ ]*\).*/\1/' <<<"$line")
    printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "W4 $lang" "-" "-" "-" "-" "-" "${line#W4 tinybroker lang=$lang }"
  done
  { grep -E '^W4 tinybroker lang=[^ ]+ workload=W[12] reps=[0-9]+ median ' "$tb_out" || true; } | while read -r line; do
    lang=$(sed 's/.*lang=\([^ ]*\).*/\1/' <<<"$line")
    wl=$(sed 's/.*workload=\([^ ]*\).*/\1/' <<<"$line")
    plain=$(fig "$tb_out" "W4 tinybroker lang=$lang workload=$wl" plain)
    plugins=$(fig "$tb_out" "W4 tinybroker lang=$lang workload=$wl" plugins)
    r=$(fig "$tb_out" "W4 tinybroker lang=$lang workload=$wl" ratio)
    target=$(fig "$tb_out" "W4 tinybroker lang=$lang workload=$wl" target)
    printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "W4 $lang $wl" "msgs/s with plugins" "$plugins" "tinybroker plain" "$plain" "$r" \
      "higher; target plugins/plain >= $target: $(met "$r" ge "$target")"
  done
}
# w6rows prints W6's figures: p99 against the 5 ms target, the broker's memory and CPU, losses.
w6rows() {
  local k p t f v better
  if grep -q '^W6 tinybroker FAILED' "$tb_out"; then
    printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' W6 - FAILED - - - "$(grep -m1 '^W6 tinybroker FAILED' "$tb_out" | cut -d' ' -f4-)"
  fi
  for k in $(sed -n 's/^W6 tinybroker streams=\([0-9]*\) reps=[0-9]* median .*/\1/p' "$tb_out"); do
    p="W6 tinybroker streams=$k"
    t=$(fig "$tb_out" "$p" target_p99_us)
    for f in p50_us p99_us p999_us; do
      better=lower
      v=$(fig "$tb_out" "$p" "$f")
      [ "$f" != p99_us ] || better="lower; target < ${t:-5000} µs: $(met "$v" lt "${t:-5000}")"
      printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "W6 $k" "$f" "${v:--}" "(no NATS peer)" - - "$better"
    done
    for f in server_rss_kb rss_per_stream_b server_cpu_pct client_cpu_pct; do
      v=$(fig "$tb_out" "$p" "$f")
      printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "W6 $k" "$f" "${v:--}" "(no NATS peer)" - - lower
    done
    for f in lost duplicated; do
      v=$(fig "$tb_out" "$p" "$f")
      printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "W6 $k" "$f" "${v:--}" "(no NATS peer)" - - "0 (sum)"
    done
  done
}

rev=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$here" status --porcelain 2>/dev/null)" ] || rev="$rev (uncommitted changes)"
echo
echo "== raw result lines"
cat "$tb_out" "$nats_out"
echo
echo "== tinybroker vs NATS, medians; ratio = tinybroker / NATS"
echo "started $started; nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); $(go version | cut -d' ' -f3)"
echo "load average (1/5/15 min) at start $load0, at end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tinybroker $rev; server config ${TB_CONFIG:-defaults}; RUN_FLAGS '${RUN_FLAGS:-}'"
printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' workload figure tinybroker peer NATS ratio better
case " ${workloads[*]} " in
  *" W4 "* | *" W6 "*) echo "(W4 and W6 have no NATS peer: W4's ratio is tinybroker with plugins / tinybroker plain; W6 lists tinybroker's figures)" ;;
esac
for w in "${workloads[@]}"; do
  case "$w" in
    W1) row W1 delivered_msgs_per_s "W1 tinybroker" "W1 nats-core" delivered_msgs_per_s higher ;;
    W2)
      row W2 acked_msgs_per_s "W2 tinybroker" "W2 nats-js" acked_msgs_per_s higher
      row W2 redelivered "W2 tinybroker" "W2 nats-js" redelivered "0 (sum)"
      row W2 acked_msgs_per_s "W2 tinybroker" "W2 nats-core" delivered_msgs_per_s "higher (NATS: no acks)"
      ;;
    W3)
      for f in p50_us p99_us p999_us; do row W3 "$f" "W3 tinybroker" "W3 nats-core" "$f" lower; done
      ;;
    W5)
      for k in ${W5_SUBS:-1000 10000 100000}; do
        row "W5 $k" msgs_per_s "W5 tinybroker subs=$k" "W5 nats-core subs=$k" msgs_per_s higher
        row "W5 $k" rss_per_sub_b "W5 tinybroker subs=$k" "W5 nats-core subs=$k" rss_per_sub_b lower
        row "W5 $k" sub_setup_ms "W5 tinybroker subs=$k" "W5 nats-core subs=$k" sub_setup_ms lower
      done
      # The targets: the largest size's rate against the smallest's, and memory per
      # subscription at the largest size.
      read -r -a sizes <<<"${W5_SUBS:-1000 10000 100000}"
      lo=${sizes[0]} hi=${sizes[${#sizes[@]}-1]}
      if [ "$lo" != "$hi" ]; then
        st=$(ratio "$(fig "$tb_out" "W5 tinybroker subs=$hi" msgs_per_s)" "$(fig "$tb_out" "W5 tinybroker subs=$lo" msgs_per_s)")
        sn=$(ratio "$(fig "$nats_out" "W5 nats-core subs=$hi" msgs_per_s)" "$(fig "$nats_out" "W5 nats-core subs=$lo" msgs_per_s)")
        printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "W5 scale" "msgs/s $hi / $lo" "$st" "nats-core" "$sn" - \
          "higher; target >= 0.80: $(met "$st" ge 0.8)"
      fi
      m=$(fig "$tb_out" "W5 tinybroker subs=$hi" rss_per_sub_b)
      printf '%-12s %-22s %14s %-22s %14s %8s  %s\n' "W5 $hi" "rss_per_sub_b" "${m:--}" "(target)" 1024 - \
        "lower; target <= 1 KB: $(met "$m" lt 1025)"
      ;;
    W4) w4rows ;;
    W6) w6rows ;;
  esac
done
