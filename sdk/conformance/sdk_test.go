package conformance

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
)

// The SDKs' examples and their build lines, as docs/plugins/<lang>.md gives them.

// tool skips the test (fails it under CI) if a tool is missing.
func tool(t *testing.T, name, install string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		unavailable(t, "missing tool: "+name+" ("+install+")")
	}
}

// cc builds C sources with the build line of docs/plugins/c.md plus extra flags, and returns
// the module, or clang's output and an error.
func cc(t *testing.T, extra []string, srcs ...string) ([]byte, string, error) {
	t.Helper()
	tool(t, "clang", "Debian: apt-get install clang lld")
	tool(t, "wasm-ld", "Debian: apt-get install clang lld")
	out := filepath.Join(t.TempDir(), "plugin.wasm")
	args := append([]string{"--target=wasm32", "-nostdlib", "-O2", "-Wall", "-Werror", "-I", "../../sdk/c",
		"-Wl,--no-entry", "-o", out}, extra...)
	msg, err := exec.Command("clang", append(args, srcs...)...).CombinedOutput()
	if err != nil {
		return nil, string(msg), err
	}
	wasm, err := os.ReadFile(out)
	return wasm, string(msg), err
}

func loadChain(t *testing.T, wasm []byte, cfg map[string]string) (*plugins.Chain, error) {
	t.Helper()
	h, err := plugins.NewHost(plugins.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	c, err := h.Load(context.Background(), []plugins.Spec{{Name: "example", Wasm: wasm, Config: cfg}})
	if err == nil {
		t.Cleanup(func() { c.Close(context.Background()) })
	}
	return c, err
}

// tenantCase is a message for a tenant filter, and the reason it is dropped ("": passed).
type tenantCase struct {
	headers map[string]string
	drop    string
}

// checkTenants loads the tenant filter wasm with cfg and checks its verdict on each case.
func checkTenants(t *testing.T, wasm []byte, cfg map[string]string, cases []tenantCase) {
	t.Helper()
	c, err := loadChain(t, wasm, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		d := broker.Draft{Topic: "orders.1", Payload: []byte("p"), Headers: broker.MakeHeaders(tc.headers)}
		v, err := c.OnPublish(&d)
		if err != nil || v.Drop != (tc.drop != "") || v.Reason != tc.drop {
			t.Errorf("headers %v: verdict %+v %v, want drop reason %q", tc.headers, v, err, tc.drop)
		}
	}
}

// sdk/c/examples/tenant-filter.c, built with the SDK as docs/plugins/c.md says.
// Built as the guide says (the SDK's default: the inbox and batches), and with -DTB_NO_INBOX,
// which leaves them out.
func TestCExampleTenantFilter(t *testing.T) {
	for _, inbox := range []bool{true, false} {
		t.Run(map[bool]string{true: "inbox", false: "no-inbox"}[inbox], func(t *testing.T) {
			var flags []string
			if !inbox {
				flags = []string{"-DTB_NO_INBOX"}
			}
			wasm, msg, err := cc(t, flags, "../../sdk/c/examples/tenant-filter.c", "../../sdk/c/tinybroker.c")
			if err != nil {
				t.Fatalf("clang: %v\n%s", err, msg)
			}
			if exportsInbox(wasm) != inbox {
				t.Fatalf("exports tb_v1_inbox: %v, want %v", exportsInbox(wasm), inbox)
			}
			checkTenants(t, wasm, map[string]string{"allow": "acme, globex"}, []tenantCase{
				{map[string]string{"tenant": "acme"}, ""},
				{map[string]string{"tenant": "globex"}, ""},
				{map[string]string{"tenant": "evil"}, "tenant not allowed: evil"},
				{map[string]string{"tenant": "acme, globex"}, "tenant not allowed: acme, globex"},
				{map[string]string{"tenant": ""}, "tenant not allowed: "},
				{nil, "tenant not allowed: "},
			})
		})
	}
}

// sdk/wat/tenant-filter.wat, the hand-written plugin docs/plugins/wat.md walks through.
// sdk/wat's tenant filters: tenant-filter.wat with host calls (the ABI as it was first
// written: its test proves a plugin without the inbox still works), and
// tenant-filter-inbox.wat on the inbox.
func TestWATExampleTenantFilter(t *testing.T) {
	tool(t, "wat2wasm", "Debian: apt-get install wabt")
	for _, name := range []string{"tenant-filter", "tenant-filter-inbox"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), name+".wasm")
			if msg, err := exec.Command("wat2wasm", "../../sdk/wat/"+name+".wat", "-o", out).CombinedOutput(); err != nil {
				t.Fatalf("wat2wasm: %v\n%s", err, msg)
			}
			wasm, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if exportsInbox(wasm) != strings.HasSuffix(name, "-inbox") {
				t.Fatalf("%s exports tb_v1_inbox: %v", name, exportsInbox(wasm))
			}
			checkTenants(t, wasm, map[string]string{"tenant": "acme"}, []tenantCase{
				{map[string]string{"tenant": "acme"}, ""},
				{map[string]string{"tenant": "acmf"}, "tenant not allowed"},
				{map[string]string{"tenant": "acm"}, "tenant not allowed"},
				{map[string]string{"tenant": strings.Repeat("a", 300)}, "tenant not allowed"},
				{map[string]string{"a": "1", "tenant": "acme", "z": "2"}, ""},
				{map[string]string{"tenancy": "acme"}, "tenant not allowed"},
				{nil, "tenant not allowed"},
			})
			if _, err := loadChain(t, wasm, nil); err == nil || !strings.Contains(err.Error(), "set config tenant") {
				t.Errorf("loaded without config: %v, want tb_v1_init's refusal", err)
			}
		})
	}
}

// A copy loop that clang turns into a call to memcpy: without a libc the link fails, unless
// the SDK's tinybroker.c (which defines memcpy) is linked or -mbulk-memory makes clang use
// memory.copy instead. Both ways the plugin works.
func TestCSDKMemcpy(t *testing.T) {
	src := filepath.Join(t.TempDir(), "copy.c")
	if err := os.WriteFile(src, []byte(`#include "tinybroker.h"
TB_ABI_V1
static char in[1024], out[2048];
static void copy(char *restrict d, const char *restrict s, uint32_t n) {
	for (uint32_t i = 0; i < n; i++)
		d[i] = s[i];
}
TB_EXPORT(tb_v1_on_publish) int64_t tb_v1_on_publish(void) {
	int32_t n = tb_msg_payload(in, sizeof in);
	if (n > (int32_t)sizeof in)
		n = sizeof in;
	copy(out, in, n);
	copy(out + n, in, n);
	tb_msg_set_payload(out, 2 * n);
	return TB_PASS;
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := cc(t, nil, src); err == nil || !strings.Contains(msg, "undefined symbol: memcpy") {
		t.Fatalf("built without the SDK's source: %v %s; the test no longer shows the memcpy trap (clang kept the loop?)", err, msg)
	}
	for name, build := range map[string]struct {
		extra []string
		srcs  []string
	}{
		"with tinybroker.c":  {nil, []string{src, "../../sdk/c/tinybroker.c"}},
		"with -mbulk-memory": {[]string{"-mbulk-memory"}, []string{src}},
	} {
		wasm, msg, err := cc(t, build.extra, build.srcs...)
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, msg)
			continue
		}
		c, err := loadChain(t, wasm, nil)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		d := broker.Draft{Topic: "t", Payload: []byte("abc")}
		if _, err := c.OnPublish(&d); err != nil || string(d.Payload) != "abcabc" {
			t.Errorf("%s: payload %q %v, want abcabc", name, d.Payload, err)
		}
	}
}

// The C SDK's string helpers, absent and empty values, and the arena across calls.
func TestCSDKStrings(t *testing.T) {
	src := filepath.Join(t.TempDir(), "strings.c")
	if err := os.WriteFile(src, []byte(`#include "tinybroker.h"
TB_ABI_V1
static tb_str out;
static void add(tb_str s) { out = tb_concat(tb_concat(out, s), TB_S(" ")); }
static void yes(int v) { add(v ? TB_S("1") : TB_S("0")); }
TB_ON_PUBLISH(check) {
	out = TB_S("");
	yes(tb_eq(TB_NONE, TB_NONE));
	yes(tb_eq(TB_NONE, TB_S("")));
	yes(tb_eq(tb_header(TB_S("empty")), TB_S("")));
	yes(TB_ABSENT(tb_header(TB_S("nope"))));
	yes(TB_ABSENT(tb_header_name_at(tb_msg_header_count())));
	yes(tb_eq(tb_header_name_at(0), TB_S("empty")));
	yes(tb_starts_with(tb_topic(), TB_S("orders.")));
	yes(tb_starts_with(TB_S("ord"), TB_S("orders.")));
	yes(tb_list_has(TB_S(" a ,b,,c"), ',', TB_S("a")));
	yes(tb_list_has(TB_S(" a ,b,,c"), ',', TB_S("")));
	yes(tb_list_has(TB_S("a,b"), ',', TB_S("a,b")));
	yes(tb_list_has(TB_NONE, ',', TB_S("a")));
	yes(tb_list_has(TB_S("a"), ',', TB_NONE));
	add(tb_utoa(0));
	add(tb_utoa(18446744073709551615ull));
	add(tb_cstr("c-string"));
	add(tb_config_value(TB_S("k")));
	yes(TB_ABSENT(tb_config_value(TB_S("missing"))));
	tb_alloc(65536); /* without the arena's reset, 2000 calls would pass the memory limit */
	add(tb_utoa(__builtin_wasm_memory_size(0)));
	tb_set_payload(out);
	return TB_PASS;
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	wasm, msg, err := cc(t, []string{"-Wextra"}, src, "../../sdk/c/tinybroker.c")
	if err != nil {
		t.Fatalf("clang: %v\n%s", err, msg)
	}
	c, err := loadChain(t, wasm, map[string]string{"k": "v=1"})
	if err != nil {
		t.Fatal(err)
	}
	// Many calls on one instance: the arena is emptied when each begins, so memory stays put
	// (the last number is the memory's size in pages).
	var first string
	for i := range 2000 {
		d := broker.Draft{Topic: "orders.1", Payload: []byte("p"), Headers: broker.MakeHeaders(map[string]string{"empty": "", "z": "1"})}
		if _, err := c.OnPublish(&d); err != nil {
			t.Fatal(err)
		}
		const want = "1 0 1 1 1 1 1 0 1 1 0 0 0 0 18446744073709551615 c-string v=1 1 "
		if i == 0 {
			first = string(d.Payload)
			if !strings.HasPrefix(first, want) {
				t.Fatalf("%q\nwant %q followed by the memory's size", first, want)
			}
		} else if string(d.Payload) != first {
			t.Fatalf("call %d: %q, the first call: %q", i, d.Payload, first)
		}
	}
	if st := c.Stats(); st[0].Failures != 0 {
		t.Errorf("%+v", st)
	}
}
