# Workload W4, C: W1 and W2 with two publish-time plugins on the topic, a filter that reads one
# header and passes the message, and a transform that adds a header (bench/plugins/w4-filter-c
# and w4-transform-c, C guests written against sdk/c/tinybroker.h, built by
# bench/plugins/build.sh into bench/bin/ with clang and wasm-ld). Only plugin blocks belong
# here: the plain side of W4 runs with the defaults. bench/run.sh W4 runs one language per
# bench/w4-<lang>.hcl; compare bench/w4-go.hcl.
plugin "w4-filter-c" {
  path   = "bin/w4-filter-c.wasm"
  topics = ["bench.>"]
}

plugin "w4-transform-c" {
  path   = "bin/w4-transform-c.wasm"
  topics = ["bench.>"]
}
