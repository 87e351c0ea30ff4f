# Workload W4, Rust: W1 and W2 with two publish-time plugins on the topic, a filter that reads
# one header and passes the message, and a transform that adds a header (bench/plugins/
# w4-filter-rust and w4-transform-rust, crates written with sdk/rust and its feature inbox,
# built by bench/plugins/build.sh into bench/bin/ with Debian's cargo). Only plugin blocks
# belong here: the plain side of W4 runs with the defaults. bench/run.sh W4 runs one language
# per bench/w4-<lang>.hcl; compare bench/w4-go.hcl.
plugin "w4-filter-rust" {
  path   = "bin/w4-filter-rust.wasm"
  topics = ["bench.>"]
}

plugin "w4-transform-rust" {
  path   = "bin/w4-transform-rust.wasm"
  topics = ["bench.>"]
}
