//go:build unix

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// A plugin path naming a FIFO or /dev/zero stops the start at once (a FIFO used to hang it,
// deaf to SIGTERM; /dev/zero to exhaust memory), naming the config file's line and column.
func TestServeRefusesPluginFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wasm")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	cfg := filepath.Join(dir, "tb.hcl")
	for _, c := range []struct{ path, want string }{
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", "is a character device, not a regular file"},
	} {
		writeConfig(t, cfg, "plugin \"p\" {\n  path = \""+c.path+"\"\n}\n")
		done := make(chan error, 1)
		var logs brokertest.Log
		go func() { done <- serve(context.Background(), []string{"--config", cfg}, &logs, nil) }()
		err := brokertest.Receive(t, done, "serve with plugin path "+c.path+" to return")
		if err == nil || !strings.Contains(err.Error(), cfg+":4,10-") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve with plugin path %s = %v; want %s:4,10-... and %q", c.path, err, cfg, c.want)
		}
	}
}

// A reload to a bad plugin file, under load, is refused and the running chain stays: nothing
// published meanwhile is lost.
func TestReloadRefusesBadFileUnderLoad(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wasm")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	cfg := filepath.Join(dir, "tb.hcl")
	good := "plugin \"filter\" {\n  path = \"" + fixturePath(t, "good") + "\"\n  topics = [\"orders.>\"]\n  hooks = [\"on_publish\"]\n}\n"
	writeConfig(t, cfg, good)
	c, stopServe := serveAndDial(t, "--config", cfg)
	defer stopServe()

	// A group whose member left: what is published now waits in its queue.
	open := &pb.OpenSubscription{SubscriptionId: "jobs", ConsumerGroup: "jobs", TopicPatterns: []string{"jobs.>"},
		Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED, MaxInFlight: 1000}
	member := func() (pb.Broker_SubscribeClient, context.CancelFunc) {
		sctx, scancel := context.WithCancel(context.Background())
		s, err := c.Subscribe(sctx)
		if err == nil {
			err = s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: open}})
		}
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil {
			scancel()
			t.Fatalf("member: %v", err)
		}
		return s, scancel
	}
	_, leave := member()
	leave()
	brokertest.Eventually(t, "the member to leave", func() bool {
		st, err := c.Stats(context.Background(), &pb.StatsRequest{})
		return err == nil && len(st.GetGroups()) == 1 && st.GetGroups()[0].GetMembers() == 0
	})

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var published int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Publish(context.Background(), &pb.PublishRequest{Topic: fmt.Sprint("jobs.", i)}); err != nil {
				t.Errorf("publish during reloads: %v", err)
				return
			}
			published++
		}
	}()
	for _, bad := range []struct{ path, want string }{
		{"/dev/zero", "is a character device"},
		{fifo, "is a named pipe (FIFO)"},
	} {
		writeConfig(t, cfg, "plugin \"other\" {\n  path = \""+bad.path+"\"\n}\n")
		_, err := c.Reload(context.Background(), &pb.ReloadRequest{})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), bad.want) ||
			!strings.Contains(status.Convert(err).Message(), cfg+":4,10-") {
			t.Fatalf("reload to %s: %v", bad.path, err)
		}
	}
	close(stop)
	wg.Wait()
	st, err := c.Stats(context.Background(), &pb.StatsRequest{})
	if err != nil || len(st.GetPlugins()) != 1 || st.GetPlugins()[0].GetName() != "filter" {
		t.Fatalf("after refused reloads: %v %v", st.GetPlugins(), err)
	}
	if _, err := c.Publish(context.Background(), &pb.PublishRequest{Topic: "orders.1", Headers: map[string]string{"tenant": "evil"}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the running plugin no longer runs: %v", err)
	}
	if published == 0 {
		t.Fatal("nothing published during the reloads")
	}
	s, stopMember := member()
	defer stopMember()
	got := 0
	for got < published {
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("member after %d of %d: %v", got, published, err)
		}
		var ids []string
		for _, m := range resp.GetMessages().GetMessages() {
			ids = append(ids, m.GetSystemId())
		}
		got += len(ids)
		if err := s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: ids}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got != published {
		t.Fatalf("the group delivered %d messages, %d were published", got, published)
	}
}
