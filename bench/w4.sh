#!/usr/bin/env bash
# Workload W4 (plugin cost), kept for the commands that name it: the same as `./run.sh W4`,
# which builds the plugins (plugins/build.sh) and, for each bench/w4-<lang>.hcl, compares W1
# and W2 on a fresh plain server and a fresh server with that file's plugins.
#   ./w4.sh                 # W1 W2, every language
#   ./w4.sh W1              # W1 only
#   W4_LANGS=go RUN_FLAGS="-n 200000" ./w4.sh
set -euo pipefail
if [ $# -gt 0 ]; then
  RUN_FLAGS="${RUN_FLAGS:-} -w4-workloads $(IFS=,; echo "$*")"
  export RUN_FLAGS
fi
exec "$(dirname "$0")/run.sh" W4
