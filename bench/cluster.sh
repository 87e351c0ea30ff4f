#!/usr/bin/env bash
# W1 and W2 of the shared benchmark on a three-node tinybroker JetStream cluster (three
# `tinybroker serve` processes, engine "jetstream" with replicas 3, as examples/cluster) against
# a three-node NATS cluster (three nats-server processes, built from the module cache at the
# version tinybroker embeds), in one run (issue 25). Each round runs, per workload, a fresh
# tinybroker cluster then a fresh NATS cluster, so that the machine's drift hits both alike;
# the medians and the median of the per-round ratios come at the end.
#   bench/cluster.sh [ROUNDS] [W1|W2 ...]             # default: 3 rounds of W1 W2
#   RUN_FLAGS="-n 100000" bench/cluster.sh 3 W2        # flags for both benchmark clients
#   STORAGE=memory bench/cluster.sh                    # both sides' streams in memory (default file)
#   REPLICAS=1 bench/cluster.sh                        # both sides' streams on one node (default 3)
# Every client (publisher, subscribers, members) connects to node 1 on both sides. The NATS
# side's clients are the NATS peer's (`natspeer run`, $NATS_RUN's directory, default
# ../shared/bench/peers/nats beside the tree or beside the main checkout of a worktree), built
# from a copy whose W2 work-queue stream has the replicas and storage of tinybroker's: W1 is
# `W1 nats-core`, W2 `W2 nats-js` (replicated, explicit acks) and `W2 nats-core` (a queue
# group without acks or storage: an upper bound).
set -euo pipefail
rounds=${1:-3}; shift $(( $# < 1 ? $# : 1 ))
workloads=("$@"); [ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2)
storage=${STORAGE:-file}; replicas=${REPLICAS:-3}
case $storage in file) peer_storage=FileStorage ;; memory) peer_storage=MemoryStorage ;;
  *) echo "STORAGE=$storage: use file or memory" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
common=$(cd "$root" && cd "$(git rev-parse --git-common-dir)/.." && pwd)
peer=$root/../shared/bench/peers/nats
[ -d "$peer" ] || peer=$common/../shared/bench/peers/nats
peer=$(dirname "${NATS_RUN:-$peer/run.sh}")
tmp=$(mktemp -d)
pids=()
stop_all() {
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT

(cd "$root" && go build -buildvcs=false -o "$tmp/tinybroker" ./cmd/tinybroker)
# The NATS server tinybroker embeds, as a program of its own.
(cd "$root" && go build -buildvcs=false -o "$tmp/nats-server" github.com/nats-io/nats-server/v2)
# The peer's W2 stream, with tinybroker's replicas and storage; nothing else changed.
cp -r "$peer" "$tmp/peer"
sed -i "s/Storage: jetstream.MemoryStorage})/Storage: jetstream.$peer_storage, Replicas: $replicas})/" "$tmp/peer/workloads.go"
grep -q "Storage: jetstream.$peer_storage, Replicas: $replicas})" "$tmp/peer/workloads.go" ||
  { echo "the NATS peer's source changed: its W2 stream's replicas could not be set" >&2; exit 1; }
(cd "$tmp/peer" && go build -buildvcs=false -o "$tmp/natspeer" .)

used=" "
port() { # sets p to a loopback port nothing listens on, below the ephemeral range, not handed out before
  while :; do
    p=$((20000 + RANDOM % 12768))
    [[ $used == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    used+="$p "; return
  done
}

ready() { # url... -> waits up to 60 s for each to answer 200
  for u in "$@"; do
    for _ in $(seq 600); do curl -sf -o /dev/null "$u" && continue 2; sleep 0.1; done
    echo "$u did not answer 200 within 60 s" >&2; return 1
  done
}

tb() { # workload -> the bench's result line, on a fresh three-node cluster
  local routes=() list="" i p addr readyz=()
  rm -rf "$tmp/tb"; mkdir -p "$tmp/tb"
  for i in 1 2 3; do port; routes+=("127.0.0.1:$p"); done
  list=$(printf '"%s", ' "${routes[@]}"); list=${list%, }
  for i in 1 2 3; do
    printf 'engine "jetstream" {\n  data_dir = "%s"\n  server_name = "node%s"\n  storage = "%s"\n  replicas = %s\n  cluster {\n    name = "bench"\n    listen = "%s"\n    routes = [%s]\n  }\n}\n' \
      "$tmp/tb/data$i" "$i" "$storage" "$replicas" "${routes[$((i - 1))]}" "$list" >"$tmp/tb/node$i.hcl"
    "$tmp/tinybroker" serve --config "$tmp/tb/node$i.hcl" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 2>"$tmp/tb/node$i.log" &
    pids+=($!)
  done
  for i in 1 2 3; do
    addr=""
    for _ in $(seq 600); do # a node listens once its engine started, or its first attempt failed
      addr=$(grep -o 'http listening.*addr=[0-9.:]*' "$tmp/tb/node$i.log" | grep -o 'addr=[0-9.:]*' | head -1 | cut -d= -f2) && [ -n "$addr" ] && break
      sleep 0.1
    done
    [ -n "$addr" ] || { tail -5 "$tmp/tb/node$i.log" >&2; echo "tinybroker node $i did not start" >&2; stop_all; return 0; }
    readyz+=("http://$addr/readyz")
  done
  ready "${readyz[@]}" || { stop_all; return 0; }
  addr=$(grep -o 'listening.*addr=[0-9.:]*' "$tmp/tb/node1.log" | grep -o 'addr=[0-9.:]*' | head -1 | cut -d= -f2)
  # shellcheck disable=SC2086
  "$tmp/tinybroker" bench -addr "$addr" -server-pid "${pids[0]}" -w "$1" -reps 1 ${RUN_FLAGS:-} </dev/null 2>"$tmp/bench.err" | grep -v '^#' | grep -iv median ||
    { tail -3 "$tmp/bench.err"; tail -5 "$tmp/tb/node1.log"; } >&2
  stop_all
}

nats() { # workload -> the peer's result line, on a fresh three-node NATS cluster
  local routes=() clients=() monitors=() list i p healthz=()
  rm -rf "$tmp/nats"; mkdir -p "$tmp/nats"
  for i in 1 2 3; do
    port; routes+=("nats://127.0.0.1:$p"); port; clients+=("$p"); port; monitors+=("$p")
  done
  list=$(IFS=,; echo "${routes[*]}")
  for i in 1 2 3; do
    "$tmp/nats-server" -a 127.0.0.1 -p "${clients[$((i - 1))]}" -m "${monitors[$((i - 1))]}" -n "node$i" -js -sd "$tmp/nats/data$i" \
      --cluster_name bench --cluster "${routes[$((i - 1))]}" --routes "$list" >"$tmp/nats/node$i.log" 2>&1 &
    pids+=($!)
    healthz+=("http://127.0.0.1:${monitors[$((i - 1))]}/healthz") # 200 once JetStream has its meta leader
  done
  ready "${healthz[@]}" || { tail -5 "$tmp/nats/node1.log" >&2; stop_all; return 0; }
  # shellcheck disable=SC2086
  "$tmp/natspeer" run -url "nats://127.0.0.1:${clients[0]}" -server-pid "${pids[0]}" -w "$1" -reps 1 ${RUN_FLAGS:-} </dev/null 2>"$tmp/nats.err" | grep -iv median ||
    { echo "# the NATS peer's $1 failed:"; tail -3 "$tmp/nats.err"; } >&2
  stop_all
}

sides() { # workload -> "label command args" per side
  case $1 in
    W1) echo "tb-cluster tb W1"; echo "nats-core nats W1" ;;
    W2) echo "tb-cluster tb W2"; echo "nats-js nats W2js"; echo "nats-core nats W2core" ;;
  esac
}

echo "# $(date -u '+%Y-%m-%dT%H:%M:%SZ') $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), three nodes a side, storage $storage, replicas $replicas, $("$tmp/nats-server" --version)"
# shellcheck source=bench/rounds.sh
. "$root/bench/rounds.sh"
run_rounds
summarize tb-cluster "tinybroker (three-node JetStream cluster) / NATS (three-node cluster)"
