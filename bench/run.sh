#!/usr/bin/env bash
# Runs tinybroker's side of the broker benchmark (shared/bench/WORKLOADS.md) and prints the
# result lines on stdout, in the same format as the NATS peer's run.sh.
#   ./run.sh                  # W1 W2 W3 W5 with the default sizes
#   ./run.sh W1 W2            # a selection (W4 and W6 print a "skipped" line)
#   RUN_FLAGS="-n 100000 -reps 5" ./run.sh W1      # extra flags for every `tinybroker bench`
#   W5_SUBS="1000 10000" ./run.sh W5               # W5 subscription counts
#   TB_CONFIG=fanout-buffer.hcl ./run.sh W1         # serve with a config file (default: none)
# Every workload (and every W5 subscription count) gets a fresh `tinybroker serve` process on a
# free loopback port, stopped by its PID afterwards. Progress and warm-ups go to stderr.
set -euo pipefail
if [ -n "${TB_CONFIG:-}" ] && [ -f "$TB_CONFIG" ]; then # relative to where we were called from
  TB_CONFIG="$(cd "$(dirname "$TB_CONFIG")" && pwd)/$(basename "$TB_CONFIG")"
fi
cd "$(dirname "$0")"
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2 W3 W5)

go build -buildvcs=false -o bin/tinybroker ../cmd/tinybroker
serve_flags=(--listen 127.0.0.1:0 --log-level info)
if [ -n "${TB_CONFIG:-}" ]; then
  [ -f "$TB_CONFIG" ] || { echo "TB_CONFIG=$TB_CONFIG: no such file (relative paths start in bench/)" >&2; exit 1; }
  serve_flags+=(--config "$TB_CONFIG")
  echo "== server config: $TB_CONFIG" >&2
fi

jobs=()
for w in "${workloads[@]}"; do
  if [ "$w" = W5 ]; then
    for k in ${W5_SUBS:-1000 10000 100000}; do jobs+=("W5 -subs $k"); done
  else
    jobs+=("$w")
  fi
done

results=$(mktemp)
srvlog=$(mktemp)
errlog=$(mktemp)
srv_pid=""
stop_server() {
  if [ -n "$srv_pid" ]; then
    kill -TERM "$srv_pid" 2>/dev/null || true
    wait "$srv_pid" 2>/dev/null || true
    srv_pid=""
  fi
}
trap 'stop_server; rm -f "$results" "$srvlog" "$errlog"' EXIT

t0=$SECONDS
for job in "${jobs[@]}"; do
  w=${job%% *}
  if [ "$w" = W4 ] || [ "$w" = W6 ]; then # not implemented: no server needed for the "skipped" line
    bin/tinybroker bench -w "$w" | tee -a "$results" >&2
    continue
  fi
  # The server logs `listening: addr=HOST:PORT` at info level once it is bound.
  bin/tinybroker serve "${serve_flags[@]}" >"$srvlog" 2>&1 &
  srv_pid=$!
  addr=""
  for _ in $(seq 100); do
    addr=$(sed -n 's/.*listening.* addr=\([^ ]*\).*/\1/p' "$srvlog" | head -n 1)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  if [ -z "$addr" ]; then cat "$srvlog" >&2; echo "server did not start" >&2; exit 1; fi
  echo "== $job against $addr (server pid $srv_pid)" >&2
  label="$w tinybroker"
  [ "$w" != W5 ] || label="W5 tinybroker subs=${job##* }"
  # Result lines go to $results, progress and errors to $errlog; both also to stderr.
  # shellcheck disable=SC2086  # $job and RUN_FLAGS are split on purpose
  if ! { bin/tinybroker bench --addr "$addr" --server-pid "$srv_pid" -w $job ${RUN_FLAGS:-} 2>&1 >&3 3>&- |
    tee "$errlog" >&2 3>&-; } 3>&1 | tee -a "$results" >&2; then
    echo "$label FAILED: $(grep '^tinybroker:' "$errlog" | tail -n 1)" >>"$results"
  fi
  stop_server
  # Warnings of the server (e.g. a slow consumer disconnected) belong with the results.
  grep -v -e '\[INFO\]' "$srvlog" >&2 || true
done

echo "== results: ${workloads[*]} in $((SECONDS - t0)) s"
cat "$results"
