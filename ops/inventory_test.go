package ops_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tinybroker/tinybroker/ops"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// GET /api/server says what runs, since when and whether it is ready, with the server's
// connections; GET /api/streams pages over the open streams and their subscriptions, as
// `tinybroker streams ls` does over gRPC; a bad page is refused with 400.
func TestServerAndStreams(t *testing.T) {
	s := start(t, stackOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, r, err := s.openStream(t, ctx, &pb.OpenSubscription{SubscriptionId: "fan", TopicPatterns: []string{"a.>"}, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT}); err != nil || r.GetSubscribed() == nil {
		t.Fatalf("open: %v %v", r, err)
	}
	s.join(t, "workers", &pb.OpenSubscription{TopicPatterns: []string{"jobs.*"}})

	get := func(path string, v any) int {
		t.Helper()
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil && resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	var info ops.ServerInfo
	if code := get("/api/server", &info); code != http.StatusOK || info.Version == "" || info.Go == "" || !info.Ready ||
		info.Streams != 2 || info.Server == nil || info.Server.Connections < 1 || info.UptimeSec < 0 {
		t.Fatalf("/api/server: %d %+v", code, info)
	}
	var page ops.StreamsPage
	if code := get("/api/streams?limit=1", &page); code != http.StatusOK || page.Total != 2 || len(page.Streams) != 1 {
		t.Fatalf("/api/streams?limit=1: %d %+v", code, page)
	}
	var rest ops.StreamsPage
	get("/api/streams?offset=1", &rest)
	if len(rest.Streams) != 1 || rest.Offset != 1 {
		t.Fatalf("/api/streams?offset=1: %+v", rest)
	}
	subs := map[string]ops.StreamSubscriptionJSON{}
	for _, st := range append(page.Streams, rest.Streams...) {
		for _, sub := range st.Subscriptions {
			subs[sub.ID] = sub
		}
	}
	if f, w := subs["fan"], subs["workers"]; f.Mode != "fanout" || f.Patterns[0] != "a.>" || w.Mode != "balanced" || w.Group != "workers" || w.MemberID == "" {
		t.Fatalf("subscriptions: %+v", subs)
	}
	if code := get("/api/streams?limit=x", nil); code != http.StatusBadRequest {
		t.Fatalf("a bad limit: %d, want 400", code)
	}
	var past ops.StreamsPage
	if get("/api/streams?offset=9", &past); past.Total != 2 || len(past.Streams) != 0 {
		t.Fatalf("past the end: %+v", past)
	}
}
