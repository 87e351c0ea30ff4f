# tinybroker configuration. Every setting is optional and shown here at its default;
# delete what you don't change. Durations are Go duration strings ("500ms", "10s", "1m30s").
# Run: tinybroker serve --config tinybroker.hcl

# Address the gRPC server listens on, host:port. ":7878" listens on every interface.
listen = "127.0.0.1:7878"

# Log verbosity: trace, debug, info, warn or error.
log_level = "info"

# Log format: "text" for people, "json" for log collectors.
log_format = "text"

# On SIGINT/SIGTERM, how long to wait for clients to finish before closing them.
shutdown_grace = "10s"

# The server pings a client that has been idle this long...
keepalive_time = "30s"
# ...and drops it if the ping is not answered within this long.
keepalive_timeout = "10s"

# Largest message payload accepted, in bytes (1 MiB).
max_message_bytes = 1048576

# Largest total size of a message's header keys and values, in bytes (64 KiB).
max_header_bytes = 65536

# Most headers one message may have (1,024): each costs a map entry to hold and a field to
# encode per subscriber, so tens of thousands of tiny ones made a message cost milliseconds.
max_headers = 1024

# What the broker holds for later (group queues, in-flight and delayed messages, fanout
# buffers), counted in bytes as the messages really cost, headers included.
memory {
  # The budget; consumer groups together may use 3/4 of it. Default: a quarter of the Go memory
  # limit (GOMEMLIMIT), which serve sets to 3/4 of the machine's memory unless it is set.
  # A whole number of bytes or a size such as "4GiB".
  # max_bytes = "4GiB"
  # Where the plugins deployed through the admin API (tinybroker plugin deploy) are kept:
  # modules by hash, and the set. Default: none, so a restart forgets them (the JetStream
  # engine keeps them in NATS). Relative to this file.
  # state_dir = "/var/lib/tinybroker"
}

# Balanced consumer groups.
groups {
  # Messages a group holds for its members before overflow applies.
  max_queued = 100000

  # Bytes one group may hold (queued, in flight and delayed). Default: 1/8 of memory.max_bytes.
  # max_queued_bytes = "512MiB"

  # What a full group does with a publish: "reject" does not take it, "drop_oldest" takes it
  # and drops the group's oldest queued message. Either way only this group is affected: the
  # publish still reaches every other subscription; a publisher whose message every target
  # refused gets RESOURCE_EXHAUSTED.
  overflow = "reject"

  # Default ack deadline: an unacked message is redelivered after this long.
  ack_deadline = "30s"

  # Longest ack_deadline a group member may ask for (never under ack_deadline); a member
  # that needs longer touches its messages. On JetStream the group waits this long at most
  # (rounded up to a doubling of 5s) before redelivering what a crashed node held.
  max_ack_deadline = "12h"

  # Largest max_in_flight a group member may ask for.
  max_in_flight_cap = 65536

  # Remove a group that has had no member this long, with the messages it holds. "none": a
  # group lives as long as the broker (an abandoned group then fills up to its bounds and
  # refuses, or drops, for itself). Declared groups never expire.
  expire_after = "none"

  # Dead letters each group keeps for the admin API (tinybroker dlq ls|replay|purge), besides
  # publishing them to its dead-letter topic: at most this many messages and bytes per group,
  # counted against the memory budget; past either, the group drops its oldest. Default
  # bytes: 64 MiB, at most 1/16 of memory.max_bytes.
  dead_letters_max = 10000
  # dead_letters_max_bytes = "64MiB"

  # The redelivery back-off: a message taken back from a member for another attempt (a nack,
  # however short its delay, a passed ack deadline, a plugin's redelivery) waits at least
  # redelivery_delay_min × 2^(attempt-1), at most redelivery_delay_max; a longer nack delay is
  # honoured. A message whose member left goes to the others at once. "none": no back-off
  # (a consumer that nacks at once then loops as fast as the broker can deliver).
  redelivery_delay_min = "100ms"
  redelivery_delay_max = "10s"
  # Or an explicit list instead of the doubling (as JetStream's consumer BackOff): attempt n
  # waits entry n, the last entry repeats; 1 to 32 entries. Not beside a min or max.
  # redelivery_backoff = ["1s", "5s", "30s"]
  # Jitter: each back-off shortened by up to this fraction (0 to under 1), drawn per message
  # and attempt, so that messages that failed together do not all come back together.
  # redelivery_jitter = 0.2

  # The largest max_deliveries a group may have; larger ones are refused (INVALID_ARGUMENT at
  # subscribe, an error here for a declared group). 0, unlimited, is always allowed.
  max_deliveries_cap = 1000

  # Message expiry: a group never delivers a message more than max_age after its publish (nor
  # past the message's own ttl, PublishRequest.ttl, if shorter). on_expire: "dead_letter" (to
  # the dead-letter topic with reason "expired") or "drop" (counted). Default: no max_age.
  # max_age   = "24h"
  # on_expire = "dead_letter"
}

# Consumer groups declared up front: they exist from start-up, so what is published before
# their first member connects (after a restart, say) is queued for them. Members must match
# the declaration. Any number; read at start.
# group "resizers" {
#   topics            = ["jobs.thumb.*"]   # required
#   subscription_id   = "resizers"         # default: the group's name
#   max_deliveries    = 5                  # default: unlimited; at most groups.max_deliveries_cap
#   dead_letter_topic = "dlq.resizers"     # default: dlq.<subscription_id>
#   max_queued        = 100000             # these default to the groups block's
#   max_queued_bytes  = "512MiB"
#   overflow          = "reject"
#   dead_letters_max  = 10000
#   redelivery_delay_min = "1s"
#   redelivery_delay_max = "1m"
#   redelivery_jitter = 0.2                # or redelivery_backoff = ["1s", "5s", "30s"]
#   max_age           = "1h"
#   on_expire         = "drop"
#   ordering          = "key"              # "key": one message of a key at a time, keys in
#                                          # parallel; "group": one at a time; default "none"
#   fair_by           = "header:tenant"    # "key" or "header:<name>": tenants take turns;
#                                          # default: none (FIFO)
# }

# Fanout subscriptions: every subscriber gets every message.
fanout {
  # Messages buffered per subscriber.
  buffer_messages = 262144

  # Bytes buffered per subscriber (64 MiB), counted as the messages cost (headers and
  # overheads included); at least max_message_bytes.
  buffer_bytes = 67108864

  # A publish that finds a subscriber's buffer over half full waits up to this long for it to
  # drain to a quarter, so publishers go at the pace of subscribers that are slow but alive.
  # A subscriber that does not drain in time is not waited for again until it has. "none":
  # never wait (the buffer limits and slow_consumer apply at once).
  publisher_wait = "1s"

  # What happens to a subscriber whose buffer is full: "disconnect" ends its subscription,
  # "drop" skips the message for that subscriber.
  slow_consumer = "disconnect"
}

# Limits on what one client can make the broker hold, each refused with a status that names
# it (RATIONALE.md, "Limits"). The defaults are far above what a normal deployment uses.
limits {
  # Client connections open at once; further ones are answered RESOURCE_EXHAUSTED and closed.
  max_connections = 4096

  # Streams (calls in progress) on one connection at once; gRPC clients wait for one to end.
  max_streams_per_connection = 4096

  # A new connection that has not completed its HTTP/2 handshake in this long is closed.
  handshake_timeout = "10s"

  # Messages in one PublishStream frame. (A frame's bytes are bounded by the receive limit,
  # max_message_bytes + 2 * max_header_bytes + 256 KiB, as is every client frame.)
  max_publish_batch = 4096

  # Subscriptions one Subscribe stream carries at once.
  max_subscriptions_per_stream = 65536

  # topic_patterns of one subscription.
  max_patterns_per_subscription = 1024

  # Consumer groups in all.
  max_groups = 10000

  # Largest plugin .wasm file read (64 MiB); only regular files are read.
  max_plugin_bytes = 67108864
}

# The ops HTTP listener: Prometheus metrics at /metrics, the web dashboard at /, the Go
# profiler at /debug/pprof/ (README.md, "Operating tinybroker"). Off unless this block is
# present (or serve gets --http-listen); uncomment it to turn it on.
# http {
#   # host:port. With users (admins may use it; README.md, "Securing tinybroker") any
#   # address; without, nothing authenticates it, so it must be a loopback address...
#   listen = "127.0.0.1:7879"
#   # ...unless this is set.
#   allow_remote = false
#   # Groups with metrics of their own (by subscription_id, in order); the others are
#   # summed under group="_other", so that 10,000 groups do not make 150,000 series.
#   metrics_max_groups = 1000
# }

# Where compiled plugins are kept, so that a restart does not compile them again: with
# memory.state_dir, the only thing the broker writes to disk. Default: the user's cache folder, ~/.cache/tinybroker/wazero
# ($XDG_CACHE_HOME/tinybroker/wazero). "none" keeps them nowhere: every start compiles.
# plugin_cache_dir = "/var/cache/tinybroker"

# The message engine: "memory" (the default: everything in this process's memory) or
# "jetstream" (NATS JetStream: durable, and clustered; README.md, "Running a cluster", and
# RATIONALE.md, "The JetStream engine"). Uncomment to use JetStream.
# engine "jetstream" {
#   # An embedded NATS server keeps its files here (relative to this file)...
#   data_dir = "data"
#   # ...or use an existing NATS cluster instead (with credentials, tls_ca_file,
#   # tls_cert_file, tls_key_file as needed).
#   # url = "nats://127.0.0.1:4222"
#   # Copies of the stream and consumers: 1, or 3 in a cluster of three or more.
#   replicas = 1
#   # cluster { name = "tinybroker", listen = "0.0.0.0:6222", routes = ["n1:6222", "n2:6222", "n3:6222"] }
# }
