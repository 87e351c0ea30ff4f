#!/usr/bin/env bash
# Builds the hand-written WAT conformance plugin into $1 (sdk/conformance/SPEC.md).
set -euo pipefail
cd "$(dirname "$0")"
out=${1:?usage: build.sh OUT.wasm}
. ../need.sh
need wat2wasm "Debian: apt-get install wabt"
wat2wasm conformance.wat -o "$out"
