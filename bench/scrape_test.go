package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestScrape(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("tinybroker_published_messages_total 1\n"))
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	summary := scrape(ctx, srv.URL+"/metrics", 5*time.Millisecond)
	for hits.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	s := summary()
	if !strings.Contains(s, "0 failed") || !strings.Contains(s, "(38 bytes the last)") || strings.Contains(s, ": 0 scrapes") {
		t.Errorf("summary %q", s)
	}
}
