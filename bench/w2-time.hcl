# W2 with issue 28's time settings on every group: a back-off list with jitter, and a max age
# (none of them reached in a fault-free run: what they cost when on). The A/B, one binary:
#   B_SERVE_FLAGS='--config bench/w2-time.hcl' bench/ab.sh . . 3 W2
groups {
  redelivery_backoff = ["1s", "5s", "30s", "2m"]
  redelivery_jitter  = 0.2
  max_age            = "1h"
}
