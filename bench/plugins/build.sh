#!/usr/bin/env bash
# Builds every plugin under bench/plugins/ into bench/bin/<dir>.wasm, by what its directory holds:
#   main.go  a Go guest: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
#            -tags tinybroker_inbox
#   *.c      a C guest: clang --target=wasm32 -nostdlib -O2 -DTB_INBOX -I sdk/c -Wl,--no-entry,
#            with sdk/c/tinybroker.c (skipped if clang or wasm-ld is missing)
#   *.wat    a WAT guest: wat2wasm (skipped if it is missing)
# Both SDKs are built with the inbox, their fastest mode: the broker writes each message into
# the plugin's memory, and gives a publish frame's messages in one call (docs/ABI.md, "The
# inbox" and "Batches").
#   ./build.sh                 # every plugin
#   ./build.sh w4-filter ...   # a selection, by directory name
#   TB_BENCH_BIN=DIR ./build.sh  # into DIR instead (the SDK's tests build W4's plugins so)
# A plugin that cannot be built loses its old .wasm, so that run.sh skips its language rather
# than measuring a stale build. Messages go to stderr; exits 1 if any build failed (a missing
# tool is not a failure).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${TB_BENCH_BIN:-$here/../bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
sdk=$(cd "$here/../../sdk/c" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for d in "$here"/*/; do names+=("$(basename "$d")"); done
fi
have() { command -v "$1" >/dev/null 2>&1; }
failed=0
for name in "${names[@]}"; do
  dir=$here/$name
  wasm=$out/$name.wasm
  if [ ! -d "$dir" ]; then echo "build.sh: no plugin directory $dir" >&2; failed=1; continue; fi
  rm -f "$wasm"
  shopt -s nullglob
  cs=("$dir"/*.c)
  wats=("$dir"/*.wat)
  shopt -u nullglob
  if [ -f "$dir/main.go" ]; then
    (cd "$here/../.." && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -tags tinybroker_inbox -o "$wasm" "./bench/plugins/$name") ||
      { echo "build.sh: $name: go build failed" >&2; failed=1; continue; }
  elif [ ${#cs[@]} -gt 0 ]; then
    if ! have clang || ! have wasm-ld; then
      echo "build.sh: $name: skipped: C plugins need clang and wasm-ld (Debian: clang lld)" >&2
      continue
    fi
    clang --target=wasm32 -nostdlib -O2 -DTB_INBOX -I "$dir" -I "$sdk" -Wl,--no-entry -o "$wasm" "${cs[@]}" "$sdk/tinybroker.c" ||
      { echo "build.sh: $name: clang failed" >&2; rm -f "$wasm"; failed=1; continue; }
  elif [ ${#wats[@]} -eq 1 ]; then
    if ! have wat2wasm; then
      echo "build.sh: $name: skipped: WAT plugins need wat2wasm (Debian: wabt)" >&2
      continue
    fi
    wat2wasm "${wats[0]}" -o "$wasm" || { echo "build.sh: $name: wat2wasm failed" >&2; rm -f "$wasm"; failed=1; continue; }
  else
    echo "build.sh: $name: nothing to build (want main.go, *.c or one *.wat)" >&2
    failed=1
    continue
  fi
  echo "build.sh: built $wasm" >&2
done
exit "$failed"
