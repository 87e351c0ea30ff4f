# tinybroker's configuration in its container image (/etc/tinybroker/tinybroker.hcl).
# Every other setting is at its default: examples/config/tinybroker.hcl lists them all.
#
# In a container, loopback is the container's own, so both listeners are on every interface.
# No user is declared here, and the broker does not serve a non-loopback address without
# users: mount a config of your own over this file, with this file's settings and your users
# (and TLS) added (README.md, "Securing tinybroker"). Until then the broker refuses to start,
# saying so. To try tinybroker out on your own machine, without authentication, run the image
# with `serve --config /etc/tinybroker/try.hcl` instead.

# gRPC, the broker's API.
listen = "0.0.0.0:7878"

# The ops HTTP listener: /metrics, /healthz and /readyz, the dashboard at /, /debug/pprof/.
# Declared users authenticate its requests (admins may use it).
http {
  listen = "0.0.0.0:7879"
}

# Compiled plugins are kept here across restarts; the image's user (65532) owns it.
plugin_cache_dir = "/var/cache/tinybroker"
