# tinybroker served to a network: TLS, users with tokens or client certificates, what each
# may publish, read and join, and what each may hold. README.md, "Securing tinybroker", walks
# through it; RATIONALE.md, "Security", says what it protects and what it does not.
#
# Try it from the repository's root (the tokens below are examples: make your own with
# `tinybroker passwd` and never reuse these). Secrets go in .secrets/, which git ignores:
#   make build
#   .bin/tinybroker certs init --dir .secrets && .bin/tinybroker certs server --dir .secrets
#   .bin/tinybroker serve --config examples/config/secure.hcl
#   echo 'alice:alice-example-token' > .secrets/alice.token
#   .bin/tinybroker pub --tls-ca .secrets/ca.pem --token-file .secrets/alice.token orders.created '{"id": 42}'

listen = "0.0.0.0:7878" # every address: allowed because users are declared

tls {
  cert_file = "../../.secrets/server.pem"     # relative to this file; re-read on SIGHUP or Reload
  key_file  = "../../.secrets/server-key.pem"
  # client_ca_file      = "../../.secrets/ca.pem"  # accept client certificates signed by this CA
  # require_client_cert = true                     # mTLS: refuse connections without one
}

# A service that takes orders and reads what becomes of them.
user "alice" {
  token_hash = "$2a$10$SHGSOn6NTNJLgKOrOfES.OQvtpo02tM53LwyFhN9UjDwluMgGzwre" # alice-example-token
  publish {
    allow = ["orders.>"]
    deny  = ["orders.internal.>"] # deny overrides allow
  }
  subscribe {
    allow = ["orders.*", "dlq.billing"]
  }
  groups {
    allow = ["billing"] # the consumer groups (subscription_id) alice may join and ack in
  }
  limits {
    max_connections   = 16
    max_streams       = 64
    max_subscriptions = 256
    max_groups        = 4
    max_queued_bytes  = "256MiB" # what the groups alice created hold, in all
  }
}

# A reader of the European orders, identified by its token or by a client certificate
# (with client_ca_file above; tinybroker certs client --dir .secrets --user bob makes it).
user "bob" {
  token_hash  = "$2a$10$NJQDx15sP8YmWyXUu4Nd4.sVhxyMx0vqTlO6snSinRaLRkR.NfmQG" # bob-example-token
  certificate = "CN=bob"
  subscribe {
    allow = ["orders.eu.*"]
  }
  limits {
    max_subscriptions = 16
  }
}

# Operations: Stats and Reload, nothing else.
user "ops" {
  token_hash = "$2a$10$jK/V/mBXrKq.pvhY83P8auOKwCdxSg6QcXsZygSSzbQfq7YxwIrbC" # ops-example-token
  admin      = true
}

group "billing" {
  topics = ["orders.*"]
}
