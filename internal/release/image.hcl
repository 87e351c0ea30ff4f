# tinybroker's configuration in its container image (/etc/tinybroker/tinybroker.hcl).
# Every other setting is at its default: examples/config/tinybroker.hcl lists them all.
#
# In a container, loopback is the container's own, so both listeners are on every interface,
# and nothing authenticates their clients: anyone who reaches the published ports may publish,
# read every topic, ack, reload, purge groups and replay dead letters. That is for trying
# tinybroker out, and for networks you trust entirely (the broker says INSECURE at every
# start). Otherwise mount a config of your own over this file, with users and TLS
# (README.md, "Securing tinybroker").

# gRPC, the broker's API.
listen   = "0.0.0.0:7878"
insecure = true

# The ops HTTP listener: /metrics, /healthz and /readyz, the dashboard at /, /debug/pprof/.
http {
  listen       = "0.0.0.0:7879"
  allow_remote = true
}

# Compiled plugins are kept here across restarts; the image's user (65532) owns it.
plugin_cache_dir = "/var/cache/tinybroker"
