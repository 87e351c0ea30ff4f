# Workload W4, AssemblyScript: W1 and W2 with two publish-time plugins on the topic, a filter
# that reads one header and passes the message, and a transform that adds a header
# (bench/plugins/w4-filter-as and w4-transform-as, written with sdk/assemblyscript on its inbox
# and batches, built by bench/plugins/build.sh into bench/bin/ with asc). Only plugin blocks
# belong here: the plain side of W4 runs with the defaults. bench/run.sh W4 runs one language
# per bench/w4-<lang>.hcl; compare bench/w4-go.hcl.
plugin "w4-filter-as" {
  path   = "bin/w4-filter-as.wasm"
  topics = ["bench.>"]
}

plugin "w4-transform-as" {
  path   = "bin/w4-transform-as.wasm"
  topics = ["bench.>"]
}
