# W1 with room for every message: `TB_CONFIG=fanout-buffer.hcl ./run.sh W1`.
#
# The broker confirms a publish once it is queued for each subscriber, so nothing slows a
# publisher down to the pace of its fanout subscribers. W1's publisher outruns the four
# subscriber streams, and with the default buffer (65,536 messages) the first subscriber to
# fall that far behind is disconnected as a slow consumer. With this buffer all 500,000
# messages fit, and W1 measures how fast the broker delivers them.
fanout {
  buffer_messages = 1048576
  buffer_bytes    = 1073741824
}
