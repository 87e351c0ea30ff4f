# Node 2 of a three-node tinybroker cluster on one machine (README.md, "Running a
# cluster"). Every node is a full gateway: clients may use 127.0.0.1:7881, :7882 or :7883.
listen = "127.0.0.1:7882"

engine "jetstream" {
  data_dir    = "data/node2"   # relative to this file
  server_name = "node2"
  replicas    = 3               # every message of a consumer group is kept on all three nodes
  cluster {
    name   = "tinybroker"
    listen = "127.0.0.1:6222"
    routes = ["127.0.0.1:6221", "127.0.0.1:6222", "127.0.0.1:6223"]
  }
}
