package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// goodWasm is the host's hand-written test plugin (see plugins/testdata/good.wat).
const (
	goodWasm  = "../../plugins/testdata/good.wasm"
	batchWasm = "../../plugins/testdata/batchpass.wasm" // takes frames in batches
)

// pluginTest runs `tinybroker plugin test args...` with input on stdin.
func pluginTest(t *testing.T, input string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = runPluginTest(args, strings.NewReader(input), &out, &errOut)
	return out.String(), errOut.String(), err
}

func wantLines(t *testing.T, got string, want ...string) {
	t.Helper()
	if g := strings.Split(strings.TrimSuffix(got, "\n"), "\n"); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n  %s\nwant:\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestPluginTestPublish(t *testing.T) {
	input := `{"topic":"orders.1","payload":"x","headers":{"tenant":"acme"}}
{"topic":"orders.1","payload":"x","headers":{"tenant":"evil"}}

# comments and blank lines are skipped
{"topic":"orders.1","headers":{"tenant":"initech"}}
{"topic":"reroute.me","payload":"<r>"}
{"topic":"orders.2","payload_base64":"/w==","headers":{"tenant":"acme"}}
`
	stdout, stderr, err := pluginTest(t, input, "--config", "to=rerouted.here", goodWasm)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	wantLines(t, stdout,
		`{"verdict":"pass","topic":"orders.1","payload":"x","headers":{"filtered":"yes","tenant":"acme"},"emitted":[{"topic":"audit.copy","payload":"acme"}]}`,
		`{"verdict":"reject","code":7,"status":"PermissionDenied","reason":"evil tenant","emitted":[]}`,
		`{"verdict":"drop","reason":"not on the allow-list","emitted":[]}`,
		`{"verdict":"pass","topic":"rerouted.here","payload":"<r>","emitted":[]}`,
		`{"verdict":"pass","topic":"orders.2","payload_base64":"/w==","headers":{"filtered":"yes","tenant":"acme"},"emitted":[{"topic":"audit.copy","payload":"acme"}]}`,
	)
	if !strings.Contains(stderr, "[INFO]  good: plugin loaded") {
		t.Errorf("stderr does not have the plugin's log:\n%s", stderr)
	}
}

func TestPluginTestAckAndRedeliver(t *testing.T) {
	stdout, stderr, err := pluginTest(t, `{"topic":"jobs.1","id":"abc-7","group":"g","attempt":1,"in_flight_ms":20}`+"\n",
		"--hook", "on_ack", "--log-level", "off", goodWasm)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	wantLines(t, stdout, `{"emitted":[{"topic":"audit.acks","payload":"abc-7"}]}`)
	if stderr != "" {
		t.Errorf("--log-level off: stderr %q", stderr)
	}

	stdout, stderr, err = pluginTest(t, `{"topic":"jobs.1","payload":"p","group":"g","attempt":1,"reason":"nack"}
{"topic":"jobs.1","headers":{"a":"b"},"attempt":2}
`, "--hook", "on_redeliver", goodWasm)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	wantLines(t, stdout,
		`{"action":"delay","delay_ms":50,"headers":{"retried":"yes"},"emitted":[]}`,
		`{"action":"dead_letter","reason":"gave up","headers":{"a":"b","retried":"yes"},"emitted":[]}`,
	)
}

// A failing plugin's messages are reported, and the command fails after the last one.
func TestPluginTestFailure(t *testing.T) {
	stdout, stderr, err := pluginTest(t, `{"topic":"a"}`+"\n"+`{"topic":"bad topic"}`+"\n", "../../plugins/testdata/trap.wasm")
	if err == nil || err.Error() != `2 of 2 messages failed (see their "error")` {
		t.Errorf("error %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"verdict":"failed","code":14,"status":"Unavailable","emitted":[],"error":"plugin \"trap\" failed in on_publish: wasm error: unreachable`) ||
		!strings.Contains(lines[1], `"error":"plugintest: the broker would refuse this message: invalid topic`) {
		t.Errorf("output:\n%s", stdout)
	}
	if !strings.Contains(stderr, "plugin call failed") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

func TestPluginTestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		args        []string
		want        string
	}{
		{"no plugin", "", nil, "needs one PLUGIN.wasm"},
		{"two plugins", "", []string{goodWasm, goodWasm}, "needs one PLUGIN.wasm"},
		{"bad hook", "", []string{"--hook", "on_fire", goodWasm}, `--hook "on_fire"`},
		{"bad config", "", []string{"--config", "allow", goodWasm}, "want key=value"},
		{"bad log level", "", []string{"--log-level", "loud", goodWasm}, `log level "loud"`},
		{"missing file", "", []string{"nothere.wasm"}, "nothere.wasm"},
		{"refused", "", []string{"../../plugins/testdata/initfail.wasm"}, "config key allow is missing"},
		{"not JSON", "{\"topic\":\"a\"}\nnope\n", []string{goodWasm}, "standard input, line 2: want one JSON object"},
		{"unknown field", `{"topic":"a","payloads":"x"}`, []string{goodWasm}, `unknown field "payloads"`},
		{"two payloads", `{"topic":"a","payload":"x","payload_base64":"eA=="}`, []string{goodWasm}, "not both"},
		{"two values", `{"topic":"a"} {"topic":"b"}`, []string{goodWasm}, "more than one JSON value"},
		{"no such hook", `{"topic":"a"}`, []string{"--hook", "on_ack", "../../plugins/testdata/trap.wasm"}, "on_ack: the plugin does not implement this hook: choose another --hook"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := pluginTest(t, tc.input, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q\n%s", err, tc.want, stderr)
			}
		})
	}
}

func TestPluginDispatch(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"plugin"}, &stdout, &stderr); err == nil || !strings.Contains(stderr.String(), "tinybroker plugin test") {
		t.Errorf("plugin: %v\n%s", err, stderr.String())
	}
	if err := run(context.Background(), []string{"plugin", "run"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), `"plugin test"`) {
		t.Errorf("plugin run: %v", err)
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"plugin", "test", "-h"}, &stdout, &stderr); err != nil ||
		!strings.Contains(stdout.String(), "tinybroker plugin test") || !strings.Contains(stdout.String(), "--hook") {
		t.Errorf("plugin test -h: %v\n%s", err, stdout.String())
	}
}

// --bench adds each message's timing to its line, and a summary to standard error.
func TestPluginTestBench(t *testing.T) {
	input := `{"topic":"orders.1","payload":"x","headers":{"tenant":"acme"}}
{"topic":"orders.1","payload":"x","headers":{"tenant":"evil"}}
`
	stdout, stderr, err := pluginTest(t, input, "--bench", "--bench-time", "1ms", "--log-level", "off", "--config", "to=x.y", goodWasm)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("output:\n%s", stdout)
	}
	// good.wat reads the tenant and the config, then: acme sets a header and emits with
	// one header (4 host calls); evil sets the reason (3).
	for i, want := range []float64{4, 3} {
		var out pluginTestOutput
		if err := json.Unmarshal([]byte(lines[i]), &out); err != nil {
			t.Fatal(err)
		}
		tm := out.Timing
		if tm == nil || tm.Calls < 10 || tm.NsPerCall <= 0 || tm.HostCallsPerCall != want || tm.Failures != 0 {
			t.Errorf("line %d: timing %+v, want %v host calls per call", i+1, tm, want)
		}
	}
	if !strings.Contains(stderr, "bench: on_publish: 2 messages, ") || !strings.Contains(stderr, "host calls per call; in frames of 128: ") ||
		!strings.Contains(stderr, "one call per message: the plugin has no batches") || !strings.Contains(stderr, "(no time limit)") {
		t.Errorf("summary on stderr:\n%s", stderr)
	}
	// A plugin with batches takes the frames in batches, with no host call.
	stdout, stderr, err = pluginTest(t, input, "--bench", "--bench-time", "1ms", "--log-level", "off", batchWasm)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var out pluginTestOutput
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &out); err != nil {
		t.Fatal(err)
	}
	if tm := out.Timing; tm == nil || tm.Batched != 1 || tm.NsPerMessageInFrames <= 0 || tm.HostCallsPerCall != 0 {
		t.Errorf("batches: timing %+v, want every call in frames batched", tm)
	}
	if !strings.Contains(stderr, "in frames of 128: ") || !strings.Contains(stderr, "100% of them in batches") {
		t.Errorf("batches: summary on stderr:\n%s", stderr)
	}
	// Without --bench, no timing.
	stdout, _, err = pluginTest(t, input, "--log-level", "off", goodWasm)
	if err != nil || strings.Contains(stdout, "timing") {
		t.Errorf("without --bench: %v\n%s", err, stdout)
	}
}
