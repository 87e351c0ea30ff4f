package plugins

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// The W4 plugins in C (bench/plugins/w4-*-c), written with the C SDK (sdk/c) and built on its
// inbox, with batches, as bench/plugins/build.sh builds them.

// cGuests are the C plugins built so far, by folder.
var cGuests struct {
	mu   sync.Mutex
	wasm map[string][]byte
}

// cGuest builds the C plugin in dir (every *.c in it) with clang, once per test binary, the
// way bench/plugins are built. It skips the test when clang or wasm-ld is missing.
func cGuest(tb testing.TB, dir string) []byte {
	tb.Helper()
	for _, tool := range []string{"clang", "wasm-ld"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("%s not installed (Debian: apt-get install clang lld): C plugins are not built", tool)
		}
	}
	cGuests.mu.Lock()
	defer cGuests.mu.Unlock()
	if bin, ok := cGuests.wasm[dir]; ok {
		return bin
	}
	srcs, _ := filepath.Glob(filepath.Join(dir, "*.c"))
	if len(srcs) == 0 {
		tb.Fatalf("no C source in %s", dir)
	}
	out := filepath.Join(tb.TempDir(), "plugin.wasm")
	args := append([]string{"--target=wasm32", "-nostdlib", "-O2", "-Wall", "-Werror", "-DTB_INBOX",
		"-I", "../sdk/c", "-Wl,--no-entry", "-o", out}, append(srcs, "../sdk/c/tinybroker.c")...)
	if msg, err := exec.Command("clang", args...).CombinedOutput(); err != nil {
		tb.Fatalf("clang %v: %v\n%s", args, err, msg)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	if cGuests.wasm == nil {
		cGuests.wasm = map[string][]byte{}
	}
	cGuests.wasm[dir] = bin
	return bin
}

func w4CSpecs(tb testing.TB) []Spec {
	return []Spec{
		{Name: "w4-filter-c", Wasm: cGuest(tb, "../bench/plugins/w4-filter-c"), Topics: []string{"bench.>"}},
		{Name: "w4-transform-c", Wasm: cGuest(tb, "../bench/plugins/w4-transform-c"), Topics: []string{"bench.>"}},
	}
}

// The C filter passes a message unless its tenant is "blocked"; the C transform adds x-w4: 1.
func TestW4PluginsInC(t *testing.T) {
	c := load(t, newHost(t), w4CSpecs(t)...)
	for _, tc := range []struct {
		name    string
		topic   string
		headers map[string]string
		drop    bool
		want    map[string]string
	}{
		{"no header", "bench.w1", nil, false, map[string]string{"x-w4": "1"}},
		{"other tenant", "bench.w2", map[string]string{"tenant": "acme"}, false, map[string]string{"tenant": "acme", "x-w4": "1"}},
		{"longer tenant", "bench.w2", map[string]string{"tenant": "blocked2"}, false, map[string]string{"tenant": "blocked2", "x-w4": "1"}},
		{"blocked tenant", "bench.w1", map[string]string{"tenant": "blocked"}, true, map[string]string{"tenant": "blocked"}},
		{"other topic", "orders.1", nil, false, nil},
	} {
		d := broker.Draft{Topic: tc.topic, Payload: []byte("p"), Headers: broker.MakeHeaders(tc.headers)}
		v, err := c.OnPublish(&d)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if v.Drop != tc.drop || tc.drop && v.Reason != "blocked tenant" {
			t.Errorf("%s: verdict %+v, want drop=%v", tc.name, v, tc.drop)
		}
		if len(d.Headers) != len(tc.want) {
			t.Errorf("%s: headers %v, want %v", tc.name, d.Headers, tc.want)
		}
		for k, want := range tc.want {
			if got, _ := d.Headers.Get(k); got != want {
				t.Errorf("%s: headers %v, want %v", tc.name, d.Headers, tc.want)
			}
		}
		if d.Topic != tc.topic || string(d.Payload) != "p" {
			t.Errorf("%s: message changed to %+v", tc.name, d)
		}
	}
	for _, st := range c.Stats() {
		if st.Failures != 0 {
			t.Errorf("%+v", st)
		}
	}
}

// W4's chain in C: the C filter (reads a header, passes) and the C transform (adds a header).
// Compare BenchmarkOnPublishW4Chain, the same plugins in Go.
func BenchmarkOnPublishC(b *testing.B) {
	benchmarkW4Chain(b, load(b, newHost(b), w4CSpecs(b)...))
}

// Every host function sdk/c/tinybroker.h declares has the import name and signature of ABI v1:
// a plugin that calls them all loads (the host checks each import), and runs.
func TestCHeaderMatchesABI(t *testing.T) {
	dir := t.TempDir()
	src := `#include "` + mustAbs(t, "../sdk/c/tinybroker.h") + `"
TB_ABI_V1
static char buf[256];
TB_EXPORT(tb_v1_init) int32_t tb_v1_init(void) { return tb_config(buf, sizeof buf) < 0; }
TB_EXPORT(tb_v1_on_publish) int64_t tb_v1_on_publish(void) {
	int32_t n = 0;
	tb_log(TB_DEBUG, TB_STR("all"));
	n += (int32_t)tb_now() & 1;
	n += tb_config_get(TB_STR("k"), buf, sizeof buf);
	n += tb_msg_topic(buf, sizeof buf) + tb_msg_payload(buf, sizeof buf);
	n += tb_msg_header(TB_STR("h"), buf, sizeof buf) + tb_msg_header_count();
	n += tb_msg_header_name(0, buf, sizeof buf) + tb_msg_id(buf, sizeof buf);
	n += tb_msg_set_payload(TB_STR("new")) + tb_msg_set_header(TB_STR("h"), TB_STR("v"));
	n += tb_msg_del_header(TB_STR("gone")) + tb_msg_set_topic(TB_STR("c.out"));
	n += tb_event_subscription(buf, sizeof buf) + tb_event_group(buf, sizeof buf);
	n += tb_event_attempt() + (int32_t)tb_event_in_flight_ns() + tb_event_reason(buf, sizeof buf);
	int32_t h = tb_emit(TB_STR("c.emitted"), TB_STR("e"));
	n += tb_emit_header(h, TB_STR("from"), TB_STR("c"));
	n += tb_msg_key(buf, sizeof buf) + tb_emit_key(h, TB_STR("raw"));
	if (!tb_eq(tb_key(), TB_S("pub")) || tb_set_key(TB_S("tenant-1")) != TB_OK || tb_emit_set_key(h, TB_S("ek")) != TB_OK)
		return TB_REJECT(9);
	tb_set_reason(TB_STR("all"));
	return n == -12345 ? TB_REJECT(7) : TB_PASS;
}
TB_EXPORT(tb_v1_on_ack) int64_t tb_v1_on_ack(void) { return 0; }
TB_EXPORT(tb_v1_on_redeliver) int64_t tb_v1_on_redeliver(void) { return TB_DELAY(5) == TB_FORGET ? TB_DEAD_LETTER : TB_REDELIVER; }
`
	if err := os.WriteFile(filepath.Join(dir, "all.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c := load(t, newHost(t), Spec{Name: "all", Wasm: cGuest(t, dir)})
	d := broker.Draft{Topic: "c.in", Payload: []byte("old"), Headers: broker.MakeHeaders(map[string]string{"gone": "x"}), Key: "pub"}
	v, err := c.OnPublish(&d)
	if err != nil || v.Drop || len(v.Emit) != 1 || v.Emit[0].Headers.Map()["from"] != "c" || v.Emit[0].Key != "ek" || d.Key != "tenant-1" {
		t.Fatalf("verdict %+v %v", v, err)
	}
	if d.Topic != "c.out" || string(d.Payload) != "new" || d.Headers.Map()["h"] != "v" || len(d.Headers) != 1 {
		t.Fatalf("message %+v", d)
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
