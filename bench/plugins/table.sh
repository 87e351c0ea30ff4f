#!/usr/bin/env bash
# Prints BENCHMARKS.md's per-language plugin table from one run: for each W4 filter built in
# bench/bin (w4-filter-<lang>.wasm; Go's is w4-filter.wasm), its module size, compile time
# (cold, and cached on disk), instantiate time, CPU ns per message alone (one tb_v1_on_publish
# call) and in frames of 128 (tb_v1_on_publish_batch where the SDK has it), and host calls
# per message; then the host call's cost, and wazero's floor under it (the same calls into
# the cheapest api.GoFunction there is, the benchmark's own). Each figure is the median of
# COUNT alternating repetitions: the test binary of ./plugins runs
# `-test.bench 'PluginFile|HostCall'` over every file COUNT times in turn, so that a noisy
# moment of a shared machine spreads over all of them.
#   ./table.sh            # builds the filters first (build.sh), COUNT=3
#   COUNT=5 NOBUILD=1 ./table.sh
# Run it on a quiet machine: the figures are CPU time. W4's ratios come from ../run.sh W4.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$root/bench/bin
count=${COUNT:-3}
if [ -z "${NOBUILD:-}" ]; then
  names=()
  for d in "$here"/w4-filter*/; do names+=("$(basename "$d")"); done
  bash "$here/build.sh" "${names[@]}" || echo "table.sh: some filters did not build; they are left out" >&2
fi
files=()
for f in "$bin"/w4-filter*.wasm; do [ -f "$f" ] && files+=("$f"); done
[ ${#files[@]} -gt 0 ] || { echo "table.sh: no filter in $bin (run build.sh)" >&2; exit 1; }
list=$(IFS=:; echo "${files[*]}")
out=$(mktemp)
testbin=$(mktemp)
trap 'rm -f "$out" "$testbin"' EXIT
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$root" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
(cd "$root" && go test -c -o "$testbin" ./plugins)
for _ in $(seq "$count"); do
  (cd "$root/plugins" && TB_BENCH_WASM=$list "$testbin" -test.run '^$' -test.bench 'PluginFile|HostCall')
done | tee "$out" >&2
awk '
function med(key,   n, i, j, t, a) {
  n = cnt[key]; if (n == 0) return "";
  for (i = 1; i <= n; i++) a[i] = val[key, i];
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
  return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function put(key, v) { cnt[key]++; val[key, cnt[key]] = v }
function dur(ns) { return ns >= 1e6 ? sprintf("%.1f ms", ns / 1e6) : sprintf("%.0f µs", ns / 1e3) }
/^Benchmark(PluginFile|HostCall|HostCallFloor)\// {
  split($1, part, "/"); sub(/-[0-9]+$/, "", part[3]); sub(/-[0-9]+$/, "", part[2])
  name = part[2]; sub_ = part[3]
  if (part[1] == "BenchmarkHostCall") { sub_ = name; name = "hostcall" }
  else if (part[1] == "BenchmarkHostCallFloor") { sub_ = name; name = "floor" }
  else if (!(name in seen)) { seen[name] = 1; order[++names] = name }
  for (i = 3; i < NF; i += 2) put(name SUBSEP sub_ SUBSEP $(i + 1), $i)
}
END {
  print "| plugin | module | compile cold | compile cached | instantiate | alone (CPU ns) | in frames of 128 (CPU ns/msg) | batched | host calls/msg |"
  print "|--------|-------:|-------------:|---------------:|------------:|------:|------:|------:|------:|"
  for (k = 1; k <= names; k++) {
    n = order[k]
    printf "| %s | %d B | %s | %s | %s | %.0f | %.0f | %.2f | %g |\n", n,
      med(n SUBSEP "compile-cold" SUBSEP "module-bytes"), dur(med(n SUBSEP "compile-cold" SUBSEP "ns/op")),
      dur(med(n SUBSEP "compile-cached" SUBSEP "ns/op")), dur(med(n SUBSEP "instantiate" SUBSEP "ns/op")),
      med(n SUBSEP "on_publish" SUBSEP "cpu-ns/op"), med(n SUBSEP "frame" SUBSEP "cpu-ns/msg"),
      med(n SUBSEP "frame" SUBSEP "batched"), med(n SUBSEP "on_publish" SUBSEP "hostcalls/op")
  }
  none = med("hostcall" SUBSEP "none" SUBSEP "cpu-ns/op"); c = med("hostcall" SUBSEP "count" SUBSEP "cpu-ns/op")
  h = med("hostcall" SUBSEP "header" SUBSEP "cpu-ns/op")
  if (c != "") printf "\nHost call (BenchmarkHostCall, (count − none) ÷ 100, CPU): %.1f ns a no-op call (v1_msg_header_count), %.1f ns reading a header (v1_msg_header)\n", (c - none) / 100, (h - none) / 100
  fn = med("floor" SUBSEP "none" SUBSEP "cpu-ns/op"); fc = med("floor" SUBSEP "count" SUBSEP "cpu-ns/op")
  if (fc != "") printf "wazero\x27s floor (BenchmarkHostCallFloor, the same loop into the cheapest api.GoFunction, not the broker\x27s): %.1f ns a call\n", (fc - fn) / 100
}' "$out"
