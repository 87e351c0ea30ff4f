package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEngineDefaultMemory(t *testing.T) {
	for _, src := range []string{"", "engine \"memory\" {}\n"} {
		c, err := Parse([]byte(src), "t.hcl")
		if err != nil || c.Engine != EngineMemory {
			t.Fatalf("%q: engine %q, %v", src, c.Engine, err)
		}
	}
}

func TestEngineJetStream(t *testing.T) {
	src := `engine "jetstream" {
  data_dir = "data"
  replicas = 3
  storage = "memory"
  max_bytes = "2GiB"
  server_name = "n1"
  cluster {
    name   = "c"
    listen = "127.0.0.1:6222"
    routes = ["127.0.0.1:6223", "nats://127.0.0.1:6224"]
  }
}
`
	c := mustParse(t, src, filepath.Join("etc", "t.hcl"))
	j := c.JetStream
	if c.Engine != EngineJetStream || j.DataDir != filepath.Join("etc", "data") || j.Replicas != 3 || !j.MemoryStorage || j.MaxBytes != 2<<30 || j.ServerName != "n1" ||
		j.ClusterName != "c" || j.ClusterListen != "127.0.0.1:6222" || !slices.Equal(j.Routes, []string{"127.0.0.1:6223", "nats://127.0.0.1:6224"}) {
		t.Fatalf("parsed %+v", j)
	}
	c, err := Parse([]byte("engine \"jetstream\" {\n  url = \"nats://127.0.0.1:4222\"\n  credentials = \"/x.creds\"\n}\n"), "t.hcl")
	if err != nil || c.JetStream.URL != "nats://127.0.0.1:4222" || c.JetStream.Replicas != 1 || c.JetStream.MemoryStorage || c.JetStream.MaxBytes != 0 || c.JetStream.Credentials != "/x.creds" {
		t.Fatalf("url: %+v %v", c.JetStream, err)
	}
}

// A declared group's replicas reach its GroupConfig; 1 is allowed everywhere.
func TestGroupReplicas(t *testing.T) {
	c, err := Parse([]byte("engine \"jetstream\" {\n  url = \"nats://x:4222\"\n}\ngroup \"g\" {\n  topics = [\"a.>\"]\n  replicas = 3\n}\ngroup \"h\" {\n  topics = [\"b.>\"]\n  replicas = 1\n}\n"), "t.hcl")
	if err != nil || len(c.Groups) != 2 || c.Groups[0].Replicas != 3 || c.Groups[1].Replicas != 1 {
		t.Fatalf("%+v %v", c.Groups, err)
	}
	if _, err := Parse([]byte("group \"h\" {\n  topics = [\"b.>\"]\n  replicas = 1\n}\n"), "t.hcl"); err != nil {
		t.Fatalf("replicas = 1 on the memory engine: %v", err)
	}
}

func TestEngineErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"unknown engine", "engine \"kafka\" {}\n", []string{"t.hcl:1,8-15", "Unknown engine", `"jetstream"`}},
		{"no data_dir or url", "engine \"jetstream\" {\n}\n", []string{"t.hcl:1,1-19", "Missing data_dir"}},
		{"both", "engine \"jetstream\" {\n  data_dir = \"d\"\n  url = \"nats://x:4222\"\n}\n", []string{"t.hcl:3,9-", "Both url and data_dir"}},
		{"replicas without cluster", "engine \"jetstream\" {\n  data_dir = \"d\"\n  replicas = 3\n}\n", []string{"t.hcl:3,14-15", "Replicas without a cluster"}},
		{"bad route", "engine \"jetstream\" {\n  data_dir = \"d\"\n  cluster {\n    listen = \"127.0.0.1:6222\"\n    routes = [\"nohost\"]\n  }\n}\n",
			[]string{"t.hcl:5,15-", "not host:port"}},
		{"cluster with url", "engine \"jetstream\" {\n  url = \"nats://x:4222\"\n  cluster {\n    listen = \"127.0.0.1:6222\"\n  }\n}\n",
			[]string{"t.hcl:4,14-", "Setting of the embedded server with url"}},
		{"unknown setting", "engine \"jetstream\" {\n  data_dri = \"d\"\n}\n", []string{"t.hcl:2,3-11", "Unsupported argument", `"data_dir"`}},
		{"two engines", "engine \"memory\" {}\nengine \"jetstream\" {\n  data_dir = \"d\"\n}\n", []string{"t.hcl:2,", "Duplicate engine block"}},
		{"bad storage", "engine \"jetstream\" {\n  data_dir = \"d\"\n  storage = \"disk\"\n}\n", []string{"t.hcl:3,13-19", "Invalid storage", `"file" or "memory"`}},
		{"storage not a string", "engine \"jetstream\" {\n  data_dir = \"d\"\n  storage = 1\n}\n", []string{"t.hcl:3,13-14", "storage"}},
		{"bad max_bytes", "engine \"jetstream\" {\n  data_dir = \"d\"\n  max_bytes = \"lots\"\n}\n", []string{"t.hcl:3,15-21", "max_bytes"}},
		{"zero max_bytes", "engine \"jetstream\" {\n  data_dir = \"d\"\n  max_bytes = 0\n}\n", []string{"t.hcl:3,15-16", "max_bytes"}},
		{"bad stream", "engine \"jetstream\" {\n  data_dir = \"d\"\n  stream = \"a.b\"\n}\n", []string{"t.hcl:3,", "Invalid stream"}},
		{"group replicas on the memory engine", "group \"g\" {\n  topics = [\"a.>\"]\n  replicas = 3\n}\n",
			[]string{"t.hcl:3,14-15", "Invalid group replicas", "memory engine keeps one copy"}},
		{"group replicas without a cluster", "engine \"jetstream\" {\n  data_dir = \"d\"\n}\ngroup \"g\" {\n  topics = [\"a.>\"]\n  replicas = 3\n}\n",
			[]string{"t.hcl:6,14-15", "Invalid group replicas", "needs a cluster"}},
		{"group replicas over 5", "engine \"jetstream\" {\n  url = \"nats://x:4222\"\n}\ngroup \"g\" {\n  topics = [\"a.>\"]\n  replicas = 7\n}\n",
			[]string{"t.hcl:6,14-15", "1 to 5 copies"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src), "t.hcl")
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			checkEveryLineHasPosition(t, err.Error(), "t.hcl")
		})
	}
}

// The cluster example's three files parse, each its own node of one cluster.
func TestClusterExample(t *testing.T) {
	for i, name := range []string{"node1", "node2", "node3"} {
		c, err := Load(filepath.Join("..", "..", "..", "examples", "cluster", name+".hcl"))
		if err != nil {
			t.Fatal(err)
		}
		if c.Engine != EngineJetStream || c.JetStream.ServerName != name || c.JetStream.Replicas != 3 || len(c.JetStream.Routes) != 3 ||
			c.JetStream.ClusterListen != c.JetStream.Routes[i] {
			t.Fatalf("%s: %+v", name, c.JetStream)
		}
	}
}
