#!/usr/bin/env bash
# W1 and W2 of the shared benchmark against one embedded JetStream node of tinybroker (file
# storage, a fresh data directory per run), beside the NATS peer's core and JetStream figures,
# in one run (issue 13). Each round runs, per workload, tinybroker then the NATS peer, so that
# the machine's drift hits both alike; the medians and ratios come at the end.
#   bench/jetstream.sh [ROUNDS] [W1|W2 ...]          # default: 3 rounds of W1 W2
#   RUN_FLAGS="-n 100000" bench/jetstream.sh 3 W2     # flags for both benchmark clients
#   MEMORY=1 bench/jetstream.sh                       # also the memory engine, as a third side
#   STORAGE=memory bench/jetstream.sh                 # the engine's storage = "memory" (default "file")
#   PEER_STORAGE=file bench/jetstream.sh 3 W2         # the peer's W2 stream in files (default memory)
# The NATS peer is $NATS_RUN's directory (default ../shared/bench/peers/nats beside the tree,
# or beside the main checkout of a worktree).
# Its W2 JetStream figure ("nats-js") keeps the stream in memory (work-queue retention);
# tinybroker's is in files unless STORAGE=memory: STORAGE=memory (memory against memory) and
# PEER_STORAGE=file (files against files) are the like-for-like comparisons.
set -euo pipefail
rounds=${1:-3}; shift $(( $# < 1 ? $# : 1 ))
workloads=("$@"); [ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2)
root=$(cd "$(dirname "$0")/.." && pwd)
# In a git worktree, the peer is beside the main checkout.
common=$(cd "$root" && cd "$(git rev-parse --git-common-dir)/.." && pwd)
peer=$root/../shared/bench/peers/nats
[ -d "$peer" ] || peer=$common/../shared/bench/peers/nats
peer=$(dirname "${NATS_RUN:-$peer/run.sh}")
tmp=$(mktemp -d)
pid=""
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

(cd "$root" && go build -buildvcs=false -o "$tmp/tinybroker" ./cmd/tinybroker)
if [ "${PEER_STORAGE:-memory}" = file ]; then
  # The peer keeps its W2 stream in memory; for file against file, a copy of it is built with
  # the stream in files (and room for them), nothing else changed.
  cp -r "$peer" "$tmp/peer"
  sed -i 's/jetstream\.MemoryStorage/jetstream.FileStorage/' "$tmp/peer/workloads.go"
  sed -i 's/JetStreamMaxStore: 64 << 20/JetStreamMaxStore: 4 << 30/' "$tmp/peer/main.go"
  grep -q 'jetstream.FileStorage' "$tmp/peer/workloads.go" && grep -q 'JetStreamMaxStore: 4 << 30' "$tmp/peer/main.go" ||
    { echo "PEER_STORAGE=file: the peer's source changed; its storage could not be set" >&2; exit 1; }
  peer=$tmp/peer
fi
(cd "$peer" && go build -buildvcs=false -o "$tmp/natspeer" .)

tb() { # engine workload -> the bench's result line
  local log="$tmp/serve.log" addr="" cfg=()
  if [ "$1" = jetstream ]; then
    rm -rf "$tmp/data"
    printf 'engine "jetstream" {\n  data_dir = "%s"\n  storage  = "%s"\n}\n' "$tmp/data" "${STORAGE:-file}" >"$tmp/js.hcl"
    cfg=(--config "$tmp/js.hcl")
  fi
  "$tmp/tinybroker" serve "${cfg[@]}" --listen 127.0.0.1:0 2>"$log" & pid=$!
  for _ in $(seq 200); do
    addr=$(grep -o 'listening.*addr=[0-9.:]*' "$log" | grep -o 'addr=[0-9.:]*' | head -1 | cut -d= -f2) && [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { cat "$log" >&2; echo "tinybroker ($1) did not start" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$tmp/tinybroker" bench -addr "$addr" -server-pid "$pid" -w "$2" -reps 1 ${RUN_FLAGS:-} </dev/null 2>"$tmp/bench.err" | grep -v '^#' | grep -iv median || { tail -3 "$tmp/bench.err"; tail -5 "$log"; } >&2
  kill "$pid" 2>/dev/null || { echo "# tinybroker ($1) exited during $2:" >&2; tail -5 "$log" >&2; }
  wait "$pid" 2>/dev/null || true
  pid=""
}

nats() { # workload -> the peer's result line
  local log="$tmp/nats.log" url=""
  "$tmp/natspeer" serve -addr 127.0.0.1:0 -js >"$log" 2>&1 & pid=$!
  for _ in $(seq 100); do
    url=$(awk '/^listening/ {print $2}' "$log") && [ -n "$url" ] && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  "$tmp/natspeer" run -url "$url" -server-pid "$pid" -w "$1" -reps 1 ${RUN_FLAGS:-} </dev/null 2>"$tmp/nats.err" | grep -iv median ||
    { echo "# the NATS peer's $1 failed:"; tail -3 "$tmp/nats.err"; } >&2
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}

sides() { # workload -> "label command..." per side
  case $1 in
    W1) echo "tb-jetstream tb jetstream W1"; echo "nats-core nats W1" ;;
    W2) echo "tb-jetstream tb jetstream W2"; echo "nats-js nats W2js"; echo "nats-core nats W2core" ;;
  esac
  [ -z "${MEMORY:-}" ] || echo "tb-memory tb memory $1"
}

echo "# $(date -u '+%Y-%m-%dT%H:%M:%SZ') $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), storage ${STORAGE:-file}"
# shellcheck source=bench/rounds.sh
. "$root/bench/rounds.sh"
run_rounds
summarize tb-jetstream "tinybroker (JetStream engine) / peer"
