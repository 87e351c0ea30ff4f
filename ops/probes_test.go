package ops_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// /healthz answers while the process serves, /readyz while the engine does, both without the
// token the other routes need (an orchestrator's probe has none); once the engine shuts down
// /readyz answers 503 with the reason.
func TestProbes(t *testing.T) {
	s := start(t, stackOptions{httpAuth: func(*http.Request) error { return status.Error(codes.Unauthenticated, "no token") }})
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if code, _ := get("/metrics"); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401 (the probes alone are open)", code)
	}
	if err := s.b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Fatalf("/readyz after the engine's shutdown: %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz after the engine's shutdown: %d", code)
	}
}
