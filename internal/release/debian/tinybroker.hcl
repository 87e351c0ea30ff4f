# tinybroker's configuration for its systemd service (tinybroker.service), installed by the
# Debian package. It is a conffile: your changes are kept when the package is upgraded.
# Every setting, at its default, is listed in /usr/share/doc/tinybroker/examples/tinybroker.hcl.
#
# Check a change as the service's user before applying it:
#   sudo -u tinybroker tinybroker serve --check --config /etc/tinybroker/tinybroker.hcl
# then `sudo systemctl reload tinybroker` (TLS files, users and plugins) or `restart` (the rest).
#
# The service can write only to /var/lib/tinybroker (StateDirectory) and /var/cache/tinybroker
# (CacheDirectory); everything else is read-only to it. Plugins' .wasm files may live anywhere
# it can read, such as /etc/tinybroker/plugins (relative paths are relative to this file).

# The gRPC listener: this machine only. Use ":7878" (and a tls block and users, README.md,
# "Securing tinybroker") to serve other machines.
listen = "127.0.0.1:7878"

# journald timestamps each line; "json" suits a log collector.
log_level  = "info"
log_format = "text"

# Compiled plugins are kept here, so that a restart does not compile them again.
plugin_cache_dir = "/var/cache/tinybroker"

# The ops HTTP listener (Prometheus metrics at /metrics, the dashboard at /): off until
# uncommented.
# http {
#   listen = "127.0.0.1:7879"
# }

# Durable messages: the JetStream engine keeps its files in the service's state directory.
# engine "jetstream" {
#   data_dir = "/var/lib/tinybroker/jetstream"
#   replicas = 1
# }
