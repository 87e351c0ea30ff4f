#!/usr/bin/env bash
# Workload W4 (plugin cost): runs W1 and W2 without plugins and with the two publish-time
# plugins of w4.hcl (a Go filter that reads a header, a Go transform that adds one), one after
# the other on this machine, and prints each figure and the ratio plugins ÷ plain.
#   ./w4.sh                 # W1 W2
#   RUN_FLAGS="-n 200000" ./w4.sh W1
set -euo pipefail
cd "$(dirname "$0")"
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2)
for p in plugins/*/; do
  name=$(basename "$p")
  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "bin/$name.wasm" "./$p"
done
plain=$(mktemp)
with=$(mktemp)
trap 'rm -f "$plain" "$with"' EXIT
for w in "${workloads[@]}"; do
  ./run.sh "$w" | grep ' median ' >>"$plain"
  TB_CONFIG=w4.hcl ./run.sh "$w" | grep ' median ' >>"$with"
done
echo "== W4: plugins (w4.hcl: Go filter + Go transform) ÷ plain, $(date -u '+%Y-%m-%d %H:%M UTC'), nproc $(nproc)"
for w in "${workloads[@]}"; do
  key=delivered_msgs_per_s
  [ "$w" = W2 ] && key=acked_msgs_per_s
  a=$(grep "^$w " "$plain" | tr ' ' '\n' | awk -F= -v k="$key" '$1==k {print $2}')
  b=$(grep "^$w " "$with" | tr ' ' '\n' | awk -F= -v k="$key" '$1==k {print $2}')
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "W4 $w FAILED (plain: ${a:-none}, plugins: ${b:-none})"
    continue
  fi
  awk -v w="$w" -v k="$key" -v a="$a" -v b="$b" 'BEGIN { printf "W4 %s %s plain=%.0f plugins=%.0f ratio=%.2f\n", w, k, a, b, b/a }'
done
