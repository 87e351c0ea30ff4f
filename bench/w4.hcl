# Workload W4: W1 and W2 with two publish-time plugins on the topic, a filter that reads one
# header and passes the message, and a transform that adds a header (Go guests, built by
# bench/run.sh into bench/bin/). Used by TB_CONFIG=w4.hcl bench/run.sh W1 W2.
plugin "w4-filter" {
  path   = "bin/w4-filter.wasm"
  topics = ["bench.>"]
}

plugin "w4-transform" {
  path   = "bin/w4-transform.wasm"
  topics = ["bench.>"]
}
