# W7 (bench/README.md): a full consumer group drops its oldest message rather than refuse a
# publish; in a group with fair_by, the oldest of the tenant that holds the most (the flood),
# so the quiet keys are never refused for the flood's backlog.
groups {
  overflow = "drop_oldest"
}
