# Workload W4, Zig: W1 and W2 with two publish-time plugins on the topic, a filter that reads
# one header and passes the message, and a transform that adds a header (bench/plugins/
# w4-filter-zig and w4-transform-zig, written with sdk/zig with its inbox option, built by
# bench/plugins/build.sh into bench/bin/ with Zig 0.11.0). Only plugin blocks belong here: the
# plain side of W4 runs with the defaults. bench/run.sh W4 runs one language per
# bench/w4-<lang>.hcl; compare bench/w4-go.hcl.
plugin "w4-filter-zig" {
  path   = "bin/w4-filter-zig.wasm"
  topics = ["bench.>"]
}

plugin "w4-transform-zig" {
  path   = "bin/w4-transform-zig.wasm"
  topics = ["bench.>"]
}
