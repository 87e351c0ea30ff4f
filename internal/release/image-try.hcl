# tinybroker's configuration for trying it out in its container image
# (/etc/tinybroker/try.hcl): `podman run -p 127.0.0.1:7878:7878 IMAGE serve --config
# /etc/tinybroker/try.hcl`.
#
# Nothing authenticates clients: anyone who reaches the published ports may publish, read
# every topic, ack, reload, purge groups and replay dead letters, and the broker says INSECURE
# at every start. Publish the ports on 127.0.0.1 only. For anything else use the image's
# default config (/etc/tinybroker/tinybroker.hcl) with users of your own.

listen   = "0.0.0.0:7878"
insecure = true

http {
  listen       = "0.0.0.0:7879"
  allow_remote = true
}

plugin_cache_dir = "/var/cache/tinybroker"
