# W7 (bench/README.md) on the JetStream engine: one embedded node, memory storage, full
# groups dropping their oldest as in w7.hcl. Its files go to bench/bin (ignored by git);
# remove bench/bin/w7-jetstream between runs for a fresh node.
engine "jetstream" {
  data_dir = "bin/w7-jetstream"
  storage  = "memory"
}

groups {
  overflow = "drop_oldest"
}
