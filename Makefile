# tinybroker — see README.md. Every target works from a fresh clone with Go installed;
# `generate` and `check` also need protoc (Debian: protobuf-compiler libprotobuf-dev), for
# the Python client's stubs Debian's python3-grpc-tools, and for the TypeScript client's Node.js
# 20 and npm; `test-clients` python3-grpcio, python3-protobuf, Node.js 20 and npm.
GO       ?= go
BIN      := $(CURDIR)/.bin
PROTOC   ?= protoc
# Pinned generator versions: `make generate` must reproduce the committed code exactly.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# Pinned linters (make lint): staticcheck, and deadcode from golang.org/x/tools.
STATICCHECK_VERSION := v0.8.2
DEADCODE_VERSION    := v0.52.0
# The Go SDK's guest packages, which build only for GOOS=wasip1 (lint's second pass).
GUEST_PKGS := ./sdk/go/plugin ./sdk/go/plugin/onack ./sdk/go/plugin/onpublish ./sdk/go/plugin/onredeliver ./sdk/go/plugin/ontick \
	./sdk/go/plugin/internal/bridge ./sdk/go/plugin/internal/e2e/nohandle ./sdk/go/plugin/internal/e2e/sdkcheck \
	./examples/plugins/... ./bench/plugins/...
PROTO_INCLUDE ?= /usr/include
# The interpreter with Debian's python3-grpc-tools, python3-grpcio and python3-protobuf.
PYTHON ?= /usr/bin/python3
# npm of Node.js 20 or later: the TypeScript client's packages and its generator (sdk/typescript).
NPM ?= npm
TS_MODULES := sdk/typescript/node_modules/.package-lock.json
# The version and commit stamped into the binary (tinybroker version, tinybroker_build_info),
# from git when there is a checkout; a build without them says "devel".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
TESTFLAGS ?=

.PHONY: run run-plugins build release test test-clients test-short fuzz chaos chaos-cluster generate tools lint check bench bench-peers bench-cluster bench-w4 bench-w6 wasm-fixtures screenshots

run: ## start the broker on its embedded in-memory default (127.0.0.1:7878)
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/tinybroker serve

run-plugins: plugins ## start the broker with the example plugins (examples/config/plugins.hcl)
	$(GO) run ./cmd/tinybroker serve --config examples/config/plugins.hcl

build:
	$(GO) build ./...
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/tinybroker ./cmd/tinybroker

test: ## the whole suite, under the race detector; then the engines' lock order, checked
	$(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) ./...
	$(GO) test -tags lockrank -count=1 -timeout 10m $(TESTFLAGS) ./broker/...

# The client conformance scenarios (internal/clientconf) against a real broker, for the Go,
# Python and TypeScript clients, each through its driver program; seconds, and not part of
# `make test`, which skips them (the -clients flag). PYTHON is passed on as TB_PYTHON; the
# TypeScript client's packages come from npm, pinned by its lockfile; the harness compiles it.
test-clients: $(TS_MODULES) ## the client conformance harness: the scenarios every client library passes
	TB_PYTHON=$(PYTHON) $(GO) test -count=1 -timeout 10m $(TESTFLAGS) ./internal/clientconf -args -clients

# Every `func FuzzXxx` of every _test.go file in the repository, FUZZTIME each: a new fuzz
# target runs without being listed here. CI runs it with FUZZTIME=10s. Go 1.26's fuzzing
# coordinator can fail a run with a bare "context deadline exceeded" as -fuzztime ends
# (golang/go#75804, fixed in Go 1.27): such a run that wrote no failing input under
# testdata/fuzz is reported and not counted as a failure; any other failure is.
FUZZTIME ?= 60s
fuzz: ## every fuzz target in the repository, FUZZTIME (60s) each
	@set -e; out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	for f in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort); do \
		d=$$(dirname "$$f"); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
			echo "fuzz: ./$$d $$t for $(FUZZTIME)"; \
			before=$$(ls "$$d/testdata/fuzz/$$t" 2>/dev/null | wc -l); \
			if $(GO) test "./$$d" -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) >"$$out" 2>&1; then tail -1 "$$out"; continue; fi; \
			after=$$(ls "$$d/testdata/fuzz/$$t" 2>/dev/null | wc -l); \
			if grep -q 'context deadline exceeded' "$$out" && [ "$$before" = "$$after" ]; then \
				echo "fuzz: $$t: Go's coordinator ended with 'context deadline exceeded' and no failing input (golang/go#75804): not a finding"; continue; fi; \
			cat "$$out"; exit 1; \
		done; \
	done

# The hostile-client scenarios of issue 8 at full size, each against a fresh `tinybroker serve`
# process (RELIABILITY.md); 3-5 minutes on 2 cores. Not part of `make test`. CHAOSFLAGS
# passes flags to the harness, e.g. CHAOSFLAGS='-run groups -scale 0.1' (`.bin/chaos -h`).
CHAOSFLAGS ?=
chaos: ## hostile clients against a real server: memory budget, canary latency, no crash
	$(GO) build -o $(BIN)/tinybroker ./cmd/tinybroker
	$(GO) build -o $(BIN)/chaos ./chaos
	$(BIN)/chaos -bin $(BIN)/tinybroker $(CHAOSFLAGS)

# Issue 25's fault suite: the three nodes of examples/cluster, 200,000 confirmed messages at
# 2,000/s through them, a balanced group with members on two nodes and members coming and
# going, kill -9 of a node every ~10 s (the publisher's first node included) and one 20 s
# SIGSTOP (chaos/cluster). Uses ports 7881-7883 and 6221-6223. Not part of `make test`;
# CHAOSCLUSTERFLAGS passes flags, e.g. CHAOSCLUSTERFLAGS='-scale 0.1'.
CHAOSCLUSTERFLAGS ?=
# The clients beyond Go whose members join the chaos cluster's group (chaos/cluster/drivers.go).
CHAOSCLUSTERCLIENTS ?= python,typescript
chaos-cluster: $(TS_MODULES) ## kill -9 and SIGSTOP in a three-node cluster: nothing confirmed lost or stored twice
	$(GO) build -o $(BIN)/tinybroker ./cmd/tinybroker
	cd sdk/typescript && $(NPM) run --silent build
	TB_PYTHON=$(PYTHON) $(GO) run ./chaos/cluster -bin $(BIN)/tinybroker -clients "$(CHAOSCLUSTERCLIENTS)" $(CHAOSCLUSTERFLAGS)

tools:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	GOBIN=$(BIN) $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)

# staticcheck on the host's build and, for the Go SDK's guest code, on GOOS=wasip1; then
# deadcode -test, whose findings must each match a line of .lint/deadcode.allow (which says why).
lint: tools ## staticcheck (host and wasip1) and deadcode, pinned versions
	$(BIN)/staticcheck ./...
	$(BIN)/staticcheck -tags lockrank ./broker/... ./server/...
	GOOS=wasip1 GOARCH=wasm $(BIN)/staticcheck $(GUEST_PKGS)
	@allow=$$(mktemp); trap 'rm -f "$$allow"' EXIT; grep -v '^#' .lint/deadcode.allow >"$$allow"; \
	out=$$($(BIN)/deadcode -test ./... | grep -v -E -f "$$allow"); \
	if [ -n "$$out" ]; then echo "$$out"; echo "deadcode: unreachable functions above: remove them, or add a line that says why to .lint/deadcode.allow"; exit 1; fi

# The TypeScript client's packages, as its lockfile pins them: npm ci (which starts from an empty
# node_modules) runs again only when the lockfile changed since, npm's own copy of it telling.
$(TS_MODULES): sdk/typescript/package-lock.json
	cd sdk/typescript && $(NPM) ci --no-audit --no-fund --loglevel=error

generate: tools $(TS_MODULES)
	PATH="$(BIN):$$PATH" $(PROTOC) -I proto -I $(PROTO_INCLUDE) \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		proto/tinybroker/v1/broker.proto proto/tinybroker/admin/v1/admin.proto
	$(GO) run ./internal/abi/gen
	@# The Python client's messages from Debian's protoc (grpc_tools bundles an older one), its
	@# service stub from grpc_tools: protoc has no gRPC plugin for Python.
	$(PROTOC) -I proto -I $(PROTO_INCLUDE) --python_out=sdk/python --pyi_out=sdk/python proto/tinybroker/v1/broker.proto
	$(PYTHON) -m grpc_tools.protoc -I proto -I $(PROTO_INCLUDE) --grpc_python_out=sdk/python proto/tinybroker/v1/broker.proto
	@# The TypeScript client's messages, from protoc-gen-es as pinned by sdk/typescript's lockfile;
	@# its gRPC calls are written by hand on @grpc/grpc-js (RATIONALE.md).
	cd sdk/typescript && PROTOC=$(PROTOC) PROTO_INCLUDE=$(PROTO_INCLUDE) $(NPM) run --silent generate

check: generate ## build, vet, lint, gofmt, go mod tidy, regenerate; fails on any diff
	$(GO) build ./...
	$(GO) vet ./...
	$(GO) vet -tags lockrank ./broker/... ./server/...
	$(MAKE) lint
	@# The broker where int has 32 bits, and on the other systems Go targets (chaos/ is Unix-only).
	GOARCH=386 $(GO) build ./...
	GOOS=windows $(GO) build ./cmd/... ./server/... ./plugins/... ./sdk/...
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: run gofmt -w on the files above"; exit 1; }
	$(GO) mod tidy
	@git diff --exit-code -- . ':!*.log' || { echo "make check: the tree changed (stale generated code, go.mod/go.sum or formatting); commit the result"; exit 1; }

release: ## archives for linux, macOS and Windows on amd64 and arm64, .debs and an OCI image for linux, stamped, with SHA256SUMS, in dist/
	$(GO) run ./internal/release -version $(VERSION) -commit $(COMMIT) -out dist

bench: ## tinybroker's side of the benchmark workloads W1-W6 (bench/README.md)
	bash bench/run.sh

bench-peers: ## tinybroker and the NATS peer, workload by workload, with ratios and targets
	bash bench/compare.sh

bench-cluster: ## W1 and W2 on three tinybroker JetStream nodes against three NATS nodes (bench/cluster.sh)
	bash bench/cluster.sh

bench-w4: ## plugin cost: W1 and W2 plain and with the plugins of each bench/w4-<lang>.hcl
	bash bench/run.sh W4

bench-w6: ## 10,000 fanout streams at 1 msg/s each: latency, broker RSS and CPU
	bash bench/run.sh W6

# The dashboard's screenshots in docs/dashboard, taken by its browser test (ops/dashboard_test.go)
# after 40 seconds of traffic; needs chromium (Debian: apt-get install chromium).
screenshots: ## screenshots of the web dashboard (ops/) into docs/dashboard
	$(GO) test ./ops -run '^TestDashboard$$' -count=1 -timeout 5m -args -screenshots $(CURDIR)/docs/dashboard

wasm-fixtures: ## rebuild the hand-written WAT plugin fixtures (needs wat2wasm, Debian: wabt)
	for f in plugins/testdata/*.wat; do wat2wasm "$$f" -o "$${f%.wat}.wasm"; done
	for f in plugins/internal/meter/testdata/*.wat; do wat2wasm --debug-names "$$f" -o "$${f%.wat}.wasm"; done
	for f in cmd/tinybroker/testdata/*.wat; do wat2wasm "$$f" -o "$${f%.wat}.wasm"; done

include examples/plugins/plugins.mk
