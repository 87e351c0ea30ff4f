#!/usr/bin/env bash
# W1 and W2 (shared/bench/WORKLOADS.md) with each client library as publisher and consumers,
# in one run, each against a fresh `tinybroker serve` (issue 31): the Go client
# (clients/goclient), the Python client (clients/w12.py, Debian's python3-grpcio) and the
# TypeScript client (clients/w12.mjs, Node.js), each in one process of its own.
#   ./clients.sh                       # N=50000, every client, W1 and W2
#   N=20000 CLIENTS="go python" ./clients.sh
# Each figure is the median of REPS (3) repetitions after one warm-up; a line per median:
#   client=python workload=W1 delivered_msgs_per_s=... redelivered=0 client_cpu_pct=...
# client_cpu_pct is the client process's CPU time over the run, % of one core: near 100 for a
# client bound to one core (Python's GIL, Node's event loop), the broker is not the limit then;
# server_cpu_pct is the broker's over the repetitions (the gaps between them included).
set -euo pipefail
cd "$(dirname "$0")"
N=${N:-50000}
REPS=${REPS:-3}
CLIENTS=${CLIENTS:-go python typescript}
PYTHON=${PYTHON:-/usr/bin/python3}

go build -buildvcs=false -o bin/tinybroker ../cmd/tinybroker
go build -buildvcs=false -o bin/goclient ./clients/goclient
tmpdir=$(mktemp -d)
srv_pid=""
trap '[ -z "$srv_pid" ] || kill -TERM "$srv_pid" 2>/dev/null || true; rm -rf "$tmpdir"' EXIT

start_server() {
  bin/tinybroker serve --listen 127.0.0.1:0 --log-level info >"$tmpdir/serve.log" 2>&1 &
  srv_pid=$!
  for _ in $(seq 300); do
    srv_addr=$(sed -n 's/.*listening.* addr=\([^ ]*\).*/\1/p' "$tmpdir/serve.log" | head -n 1)
    [ -n "$srv_addr" ] && return 0
    sleep 0.1
  done
  cat "$tmpdir/serve.log" >&2
  exit 1
}

# srv_ticks is the broker's CPU time so far, in clock ticks (user and system).
srv_ticks() { awk '{print $14 + $15}' "/proc/$srv_pid/stat"; }

client_cmd() {
  case "$1" in
    go) echo "bin/goclient" ;;
    python) echo "env PYTHONPATH=$PWD/../sdk/python $PYTHON clients/w12.py" ;;
    typescript) echo "node clients/w12.mjs" ;;
  esac
}

for c in $CLIENTS; do
  if [ "$c" = typescript ]; then
    (cd ../sdk/typescript && npm ci --no-audit --no-fund --loglevel=error >&2 && npm run build >&2)
  fi
  for w in W1 W2; do
    start_server
    cmd=$(client_cmd "$c")
    echo "== $c $w N=$N against $srv_addr" >&2
    $cmd "$w" "$srv_addr" "$N" >/dev/null # warm-up
    t0=$(date +%s.%N); c0=$(srv_ticks)
    for _ in $(seq "$REPS"); do $cmd "$w" "$srv_addr" "$N"; done >"$tmpdir/reps"
    t1=$(date +%s.%N); c1=$(srv_ticks)
    cat "$tmpdir/reps" >&2
    python3 - "$tmpdir/reps" "$t0" "$t1" "$c0" "$c1" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
reps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t0, t1, c0, c1, hz = (float(x) for x in sys.argv[2:7])
server = round(100 * (c1 - c0) / hz / (t1 - t0))
fig = next(k for k in reps[0] if k.endswith("_per_s"))
print(f"client={reps[0]['client']} workload={reps[0]['workload']} {fig}={int(statistics.median(r[fig] for r in reps))} "
      f"redelivered={sum(r['redelivered'] for r in reps)} client_cpu_pct={int(statistics.median(r['client_cpu_pct'] for r in reps))} "
      f"server_cpu_pct={server} "
      f"reps={len(reps)}")
PY
    kill -TERM "$srv_pid"; wait "$srv_pid" 2>/dev/null || true; srv_pid=""
  done
done
