#!/usr/bin/env bash
# Builds the AssemblyScript conformance plugin into OUT (an absolute path) with the
# assemblyscript compiler pinned in package-lock.json (`npm ci` in this folder installs it).
set -euo pipefail
out=${1:?usage: build.sh OUT.wasm (an absolute path)}
cd "$(dirname "$0")"
command -v node >/dev/null || { echo "build.sh: missing tool: node (Debian: apt-get install nodejs npm)" >&2; exit 3; }
if [ ! -x node_modules/.bin/asc ]; then
  echo "build.sh: missing tool: asc, the AssemblyScript compiler (npm ci in $(pwd))" >&2
  exit 3
fi
node_modules/.bin/asc index.ts -o "$out" -O3 --runtime incremental --use 'abort=~lib/tinybroker/index/abort'
