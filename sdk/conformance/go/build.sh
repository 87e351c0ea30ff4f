#!/usr/bin/env bash
# Builds the Go conformance plugin into $1 (sdk/conformance/SPEC.md), with the SDK in
# sdk/go/plugin, as its README says.
set -euo pipefail
cd "$(dirname "$0")"
out=${1:?usage: build.sh OUT.wasm}
. ../need.sh
need go "https://go.dev/dl, Go 1.26"
# With the inbox (the SDK's default): the suite runs the plugin on it and, with its
# export hidden, on host calls.
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$out" .
