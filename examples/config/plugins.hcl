# tinybroker with the example plugins of examples/plugins, in chain order.
# Run from the repository's root: make run-plugins (it builds the plugins first).
# Paths are relative to this file. Every other setting takes its default
# (see tinybroker.hcl beside this file).

# Drops messages on orders.> whose tenant header is not acme or globex.
plugin "tenant-filter" {
  path   = "../plugins/bin/tenant-filter.wasm"
  topics = ["orders.>"]
  config = { allow = "acme,globex" }
  failure_policy = "fail_closed" # a policy filter: refuse rather than let through
  call_timeout   = "100ms"
}

# orders.X with header priority=high goes to orders.priority.X.
plugin "content-router" {
  path   = "../plugins/bin/content-router.wasm"
  topics = ["orders.*"]
}

# Blanks card numbers and CVCs in JSON payloads on payments.>.
plugin "redact" {
  path   = "../plugins/bin/redact.wasm"
  topics = ["payments.>"]
  config = { fields = "card_number,cvc" }
}

# Exponential backoff between redeliveries, then the dead-letter topic after 5 attempts.
plugin "retry-backoff" {
  path   = "../plugins/bin/retry-backoff.wasm"
  config = { base = "100ms", max_delay = "30s", max_attempts = "5" }
}

# A record of every ack on audit.acks.
plugin "audit" {
  path = "../plugins/bin/audit.wasm"
}
