#!/usr/bin/env bash
# Builds the Rust conformance plugin into OUT (an absolute path) with Debian's toolchain
# (apt-get install rustc cargo libstd-rust-dev-wasm32).
set -euo pipefail
out=${1:?usage: build.sh OUT.wasm (an absolute path)}
cd "$(dirname "$0")"
for tool in /usr/bin/cargo /usr/bin/rustc; do
  [ -x "$tool" ] || { echo "build.sh: missing tool: $tool (Debian: apt-get install rustc cargo libstd-rust-dev-wasm32)" >&2; exit 3; }
done
if [ ! -d "$(/usr/bin/rustc --print sysroot)/lib/rustlib/wasm32-unknown-unknown" ]; then
  echo "build.sh: missing tool: the wasm32-unknown-unknown std of /usr/bin/rustc (Debian: apt-get install libstd-rust-dev-wasm32)" >&2
  exit 3
fi
RUSTC=/usr/bin/rustc /usr/bin/cargo build --quiet --offline --release --target wasm32-unknown-unknown
cp target/wasm32-unknown-unknown/release/conformance.wasm "$out"
