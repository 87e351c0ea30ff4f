package plugin

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// encodeConfig is the reference encoder of ABI v1's configuration text: what the broker's
// v1_config returns for cfg.
func encodeConfig(cfg map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`).Replace(cfg[k]))
		b.WriteByte('\n')
	}
	return b.String()
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		text string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"a=1\n", map[string]string{"a": "1"}},
		{"a=1\nb=\n", map[string]string{"a": "1", "b": ""}},
		{"a=1", map[string]string{"a": "1"}}, // no final newline
		{"k=x=y\n", map[string]string{"k": "x=y"}},
		{"=v\n", map[string]string{"": "v"}},
		{`p=C:\\dir\nline2\r` + "\n", map[string]string{"p": "C:\\dir\nline2\r"}},
		{`t=\\n` + "\n", map[string]string{"t": `\n`}}, // an escaped backslash, then n
		{"u=h\u00e9\u4e16 ok\n", map[string]string{"u": "h\u00e9\u4e16 ok"}},
		{"max_attempts=5\nbase=250ms\n", map[string]string{"max_attempts": "5", "base": "250ms"}},
	} {
		got, err := ParseConfig(tc.text)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("ParseConfig(%q) = %q, %v; want %q", tc.text, got, err, tc.want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, text := range []string{
		"novalue\n",
		"a=1\n\n", // an empty line has no '='
		`a=\t` + "\n",
		`a=x\` + "\n",
		"a=1\na=2\n",
	} {
		if got, err := ParseConfig(text); err == nil {
			t.Errorf("ParseConfig(%q) = %q, want an error", text, got)
		}
	}
	_, err := ParseConfig("a=1\nb=\\q\n")
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("error %v does not name line 2 and key \"b\"", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add("key", "a\\b\nc\rd", "other", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		cfg := map[string]string{k1: v1, k2: v2}
		for k := range cfg {
			if strings.ContainsAny(k, "=\n") {
				return // not representable in ABI v1's configuration text
			}
		}
		text := encodeConfig(cfg)
		got, err := ParseConfig(text)
		if err != nil || !maps.Equal(got, cfg) {
			t.Fatalf("ParseConfig(%q) = %q, %v; want %q", text, got, err, cfg)
		}
	})
}

func TestVerdictEncoding(t *testing.T) {
	// The reason is given to the broker separately (v1_set_reason); only the i64 is checked.
	v := func(action, arg uint32) int64 { return int64(uint64(action) | uint64(arg)<<32) }
	for _, tc := range []struct {
		got  any
		want int64
	}{
		{Pass(), v(0, 0)},
		{Verdict{}, v(0, 0)},
		{Drop(""), v(1, 0)},
		{Reject(PermissionDenied, ""), v(2, 7)},
		{Reject(0, ""), v(2, 0)},
		{Reject(Unauthenticated, ""), v(2, 16)},
		{Redeliver(), v(0, 0)},
		{Delay(250e6), v(1, 250)},
		{Delay(1), v(1, 1)},    // 1ns rounds up to 1ms
		{Delay(0), v(1, 1)},    // at least 1ms
		{Delay(-5e9), v(1, 1)}, // negative too
		{Delay(1500_100_000), v(1, 1501)},
		{Delay(1 << 62), v(1, 1<<31-1)},
		{DeadLetter(""), v(2, 0)},
		{DropMessage(""), v(3, 0)},
	} {
		var enc int64
		switch g := tc.got.(type) {
		case Verdict:
			enc = g.encode()
		case RedeliverVerdict:
			enc = g.encode()
		}
		if enc != tc.want {
			t.Errorf("%+v encodes to %#x, want %#x", tc.got, enc, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Reject(17, ...) did not panic")
		}
	}()
	Reject(17, "")
}

func TestStatusError(t *testing.T) {
	err := &StatusError{Op: `SetTopic "a..b"`, Status: abi.StatusInvalid}
	if got, want := err.Error(), `tinybroker: SetTopic "a..b": invalid value`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	for st, want := range map[int32]error{-1: ErrInvalid, -2: ErrTooLarge, -3: ErrNotAllowed, -4: ErrLimit, -5: ErrConflict, -9: nil} {
		if got := (&StatusError{Status: st}).Unwrap(); got != want {
			t.Errorf("status %d unwraps to %v, want %v", st, got, want)
		}
	}
	if got := (&StatusError{Op: "Emit", Status: -9}).Error(); got != "tinybroker: Emit: status -9" {
		t.Errorf("unknown status: %q", got)
	}
}
