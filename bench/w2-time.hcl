# W2 with issue 28's back-off policy on every group: a list with jitter
# (none reached in a fault-free run). The A/B of their cost, one binary:
#   B_SERVE_FLAGS='--config bench/w2-time.hcl' bench/ab.sh . . 3 W2
groups {
  redelivery_backoff = ["1s", "5s", "30s", "2m"]
  redelivery_jitter  = 0.2
}
