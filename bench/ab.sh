#!/usr/bin/env bash
# A/B comparison of two commits on the same workloads, in one run: builds tinybroker at each
# commit, then for each round and workload starts a fresh `tinybroker serve` of A, then of B
# (alternating, so that the machine's drift hits both), and drives both with the same bench
# client (B's). Prints every repetition's line and, per workload, the medians and B ÷ A.
#   bench/ab.sh A_REV B_REV [ROUNDS] [WORKLOAD ...]     # e.g. bench/ab.sh HEAD~3 HEAD 3 W1 W2
# B_REV may be "." for the working tree. RUN_FLAGS are passed to every `tinybroker bench`,
# A_RUN_FLAGS and B_RUN_FLAGS to one side's only: W2 with ordering keys against W2 without,
# one binary: B_RUN_FLAGS='-keys 10000 -ordering key' bench/ab.sh . . 3 W2
# SECURE=b (or a, or ab) serves that side over TLS with a user and its token, and its bench
# client connects so: `SECURE=b bench/ab.sh . . 3 W1 W2` is the cost of TLS + a token, as a
# ratio to plaintext, in one run (throwaway certificates from `tinybroker certs`).
# A_SERVE_FLAGS and B_SERVE_FLAGS are passed to each side's `tinybroker serve`; a side whose
# serve has an HTTP listener (--http-listen 127.0.0.1:0) is scraped at /metrics every
# SCRAPE_EVERY (1s) during its runs, as Prometheus would. The cost of metrics, one binary:
#   B_SERVE_FLAGS='--http-listen 127.0.0.1:0' bench/ab.sh . . 5 W1 W2
set -euo pipefail
a=${1:?A_REV}; b=${2:?B_REV}; rounds=${3:-3}; shift $(( $# < 3 ? $# : 3 ))
workloads=("$@"); [ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2)
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; git -C "$root" worktree prune' EXIT

build() { # rev out
  if [ "$1" = . ]; then (cd "$root" && go build -buildvcs=false -o "$2" ./cmd/tinybroker); return; fi
  git -C "$root" worktree add -q --detach "$tmp/src-$(basename "$2")" "$1"
  (cd "$tmp/src-$(basename "$2")" && go build -buildvcs=false -o "$2" ./cmd/tinybroker)
}
build "$a" "$tmp/a"; build "$b" "$tmp/b"

serve_a=() serve_b=() bench_a=() bench_b=()
if [ -n "${SECURE:-}" ]; then
  (cd "$root" && go run ./cmd/tinybroker certs init --dir "$tmp" && go run ./cmd/tinybroker certs server --dir "$tmp") >/dev/null
  echo "bench:bench-token" >"$tmp/token"
  cat >"$tmp/secure.hcl" <<EOF
tls {
  cert_file = "server.pem"
  key_file  = "server-key.pem"
}
user "bench" {
  token_hash = "$(echo bench-token | "$tmp/b" passwd)"
  admin      = true
  publish {
    allow = [">"]
  }
  subscribe {
    allow = [">"]
  }
  groups {
    allow = [">"]
  }
}
EOF
  sflags=(--config "$tmp/secure.hcl"); bflags=(-tls-ca "$tmp/ca.pem" -token-file "$tmp/token")
  case $SECURE in *a*) serve_a=("${sflags[@]}"); bench_a=("${bflags[@]}");; esac
  case $SECURE in *b*) serve_b=("${sflags[@]}"); bench_b=("${bflags[@]}");; esac
fi

run() { # side workload -> the bench's result lines
  local log="$tmp/serve.log" pid addr="" serve bench http="" scrape=() extra=A_SERVE_FLAGS runextra=A_RUN_FLAGS
  if [ "$1" = a ]; then serve=("${serve_a[@]}"); bench=("${bench_a[@]}"); else serve=("${serve_b[@]}"); bench=("${bench_b[@]}"); fi
  [ "$1" = b ] && extra=B_SERVE_FLAGS runextra=B_RUN_FLAGS
  # shellcheck disable=SC2086
  "$tmp/$1" serve "${serve[@]}" --listen 127.0.0.1:0 ${!extra:-} 2>"$log" & pid=$!
  for _ in $(seq 100); do
    addr=$(grep 'msg=listening\|: listening:' "$log" | grep -o 'addr=[0-9.:]*' | head -1 | cut -d= -f2) && [ -n "$addr" ] && break
    sleep 0.1
  done
  if [[ "${!extra:-}" == *--http-listen* ]]; then # its line follows the gRPC one
    for _ in $(seq 50); do grep -q 'http listening' "$log" && break; sleep 0.1; done
  fi
  http=$(grep 'http listening' "$log" | grep -o 'addr=[0-9.:]*' | head -1 | cut -d= -f2 || true)
  [ -z "$http" ] || scrape=(-scrape "http://$http/metrics" -scrape-every "${SCRAPE_EVERY:-1s}")
  "$tmp/b" bench -addr "$addr" -server-pid "$pid" -w "$2" -reps 1 "${bench[@]}" "${scrape[@]}" ${RUN_FLAGS:-} ${!runextra:-} 2>"$tmp/bench.err" | grep -v '^#' || true
  grep '^# scraper' "$tmp/bench.err" >&2 || true
  if ! kill "$pid" 2>/dev/null; then # it ended by itself: say why
    echo "# $1 $2: the broker exited during the run; its log ends:" >&2; tail -5 "$log" | sed 's/^/#   /' >&2
  fi
  wait "$pid" 2>/dev/null || true
}

for w in "${workloads[@]}"; do
  for r in $(seq "$rounds"); do
    for side in a b; do
      run "$side" "$w" | grep -iv median | sed "s/^/$side $w round$r /" | tee -a "$tmp/results"
    done
  done
done
echo "# medians of each workload's first figure (a field named *_per_s= or *_us=), B / A"
median() { # side workload
  awk -v s="$1" -v w="$2" '$1==s && $2==w { for (i = 4; i <= NF; i++) if ($i ~ /(_per_s|_us)=/) { split($i, kv, "="); print kv[2]; break } }' "$tmp/results" |
    sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
for w in "${workloads[@]}"; do
  ma=$(median a "$w"); mb=$(median b "$w")
  echo "$w A $ma B $mb ratio $(awk -v a="$ma" -v b="$mb" 'BEGIN {if (a > 0) printf "%.3f", b/a}')"
done
