#!/usr/bin/env bash
# Builds the C conformance plugin into $1 (sdk/conformance/SPEC.md), with the SDK in sdk/c
# and the build line docs/plugins/c.md gives, warnings as errors, with the inbox (-DTB_INBOX):
# the suite runs it on the inbox and, with its export hidden, on host calls.
set -euo pipefail
cd "$(dirname "$0")"
out=${1:?usage: build.sh OUT.wasm}
for tool in clang wasm-ld; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "build.sh: missing tool: $tool (Debian: apt-get install clang lld)" >&2
    exit 3
  fi
done
sdk=../../../sdk/c
clang --target=wasm32 -nostdlib -O2 -Wall -Wextra -Werror -DTB_INBOX -I "$sdk" -Wl,--no-entry \
  -o "$out" conformance.c "$sdk/tinybroker.c"
