# Workload W4, Go: W1 and W2 with two publish-time plugins on the topic, a filter that reads one
# header and passes the message, and a transform that adds a header (bench/plugins/w4-filter
# and w4-transform, Go guests built by bench/plugins/build.sh into bench/bin/). Only plugin
# blocks belong here: the plain side of W4 runs with the defaults. bench/run.sh W4 runs one
# language per bench/w4-<lang>.hcl.
plugin "w4-filter" {
  path   = "bin/w4-filter.wasm"
  topics = ["bench.>"]
}

plugin "w4-transform" {
  path   = "bin/w4-transform.wasm"
  topics = ["bench.>"]
}
