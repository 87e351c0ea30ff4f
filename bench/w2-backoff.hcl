# W2 with issue 28's back-off policy alone on every group: a back-off list with jitter (not
# reached in a fault-free run: what having it costs). bench/w2-time.hcl adds a max age. The
# A/B, one binary:
#   B_SERVE_FLAGS='--config bench/w2-backoff.hcl' bench/ab.sh . . 5 W2
groups {
  redelivery_backoff = ["1s", "5s", "30s", "2m"]
  redelivery_jitter  = 0.2
}
