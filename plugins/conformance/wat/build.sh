#!/usr/bin/env bash
# Builds the hand-written WAT conformance plugin into $1 (plugins/conformance/SPEC.md).
set -euo pipefail
cd "$(dirname "$0")"
out=${1:?usage: build.sh OUT.wasm}
if ! command -v wat2wasm >/dev/null 2>&1; then
  echo "build.sh: missing tool: wat2wasm (Debian: apt-get install wabt)" >&2
  exit 3
fi
wat2wasm conformance.wat -o "$out"
