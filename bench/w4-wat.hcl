# Workload W4, hand-written WebAssembly text: W1 and W2 with two publish-time plugins on the
# topic, a filter that reads one header and passes the message, and a transform that adds a
# header (bench/plugins/w4-filter-wat and w4-transform-wat, on the inbox and batches with no
# SDK and no host call, built by bench/plugins/build.sh into bench/bin/ with wat2wasm). Only
# plugin blocks belong here: the plain side of W4 runs with the defaults. bench/run.sh W4 runs
# one language per bench/w4-<lang>.hcl; compare bench/w4-go.hcl.
plugin "w4-filter-wat" {
  path   = "bin/w4-filter-wat.wasm"
  topics = ["bench.>"]
}

plugin "w4-transform-wat" {
  path   = "bin/w4-transform-wat.wasm"
  topics = ["bench.>"]
}
