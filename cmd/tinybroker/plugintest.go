package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/spf13/cobra"

	"github.com/tinybroker/tinybroker/plugins"
	"github.com/tinybroker/tinybroker/plugins/plugintest"
)

// pluginTestInput is one line of `plugin test`'s input: a message, and for on_ack and
// on_redeliver the delivery it is about.
type pluginTestInput struct {
	Topic         string            `json:"topic"`
	Payload       *string           `json:"payload"`
	PayloadBase64 []byte            `json:"payload_base64"`
	Headers       map[string]string `json:"headers"`

	ID           string `json:"id"`
	Group        string `json:"group"`
	Subscription string `json:"subscription"`
	Attempt      int    `json:"attempt"`
	Reason       string `json:"reason"`       // on_redeliver
	InFlightMS   int64  `json:"in_flight_ms"` // on_ack
}

// pluginTestMessage is a message in `plugin test`'s output: its payload as a string if it
// is valid UTF-8, else base64 under payload_base64.
type pluginTestMessage struct {
	Topic         string            `json:"topic"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
}

func outputMessage(m plugintest.Message) pluginTestMessage {
	out := pluginTestMessage{Topic: m.Topic, Headers: m.Headers}
	out.setPayload(m.Payload)
	return out
}

func (m *pluginTestMessage) setPayload(p []byte) {
	if utf8.Valid(p) {
		s := string(p)
		m.Payload = &s
	} else {
		m.PayloadBase64 = p
	}
}

// pluginTestOutput is one line of `plugin test`'s output: what the hook decided about the
// input line, and the message after it.
type pluginTestOutput struct {
	Verdict string `json:"verdict,omitempty"` // on_publish: pass, drop, reject or failed
	Action  string `json:"action,omitempty"`  // on_redeliver: redeliver, delay, dead_letter or drop
	Code    int    `json:"code,omitempty"`    // reject, failed: the gRPC status code
	Status  string `json:"status,omitempty"`  // its name
	DelayMS int64  `json:"delay_ms,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// The message as routed (on_publish pass) or redelivered (on_redeliver: headers only).
	Topic         string              `json:"topic,omitempty"`
	Payload       *string             `json:"payload,omitempty"`
	PayloadBase64 []byte              `json:"payload_base64,omitempty"`
	Headers       map[string]string   `json:"headers,omitempty"`
	Emitted       []pluginTestMessage `json:"emitted"`
	Error         string              `json:"error,omitempty"`
	Timing        *pluginTestTiming   `json:"timing,omitempty"` // with --bench
}

// pluginTestTiming is the cost of the hook's call on one input line (--bench).
type pluginTestTiming struct {
	Calls            int     `json:"calls"`
	NsPerCall        float64 `json:"ns_per_call"`
	HostCallsPerCall float64 `json:"host_calls_per_call"`
	Failures         int     `json:"failures,omitempty"`
	// on_publish: the same message in PublishStream frames of frameSize, per message, and
	// the part of those calls the plugin took in batches (docs/ABI.md, "Batches").
	NsPerMessageInFrames float64 `json:"ns_per_message_in_frames,omitempty"`
	Batched              float64 `json:"batched"`
}

// frameSize is the frame --bench times on_publish in besides one message at a time: what the
// Go SDK's publisher and `tinybroker bench` send.
const frameSize = 128

const pluginTestUsage = `Loads the plugin PLUGIN.wasm into the broker's plugin host, as "tinybroker serve" would, and
runs one of its hooks on each message read from standard input: one JSON object a line,

  {"topic":"orders.1","payload":"text","headers":{"tenant":"acme"}}

("payload_base64" instead of "payload" for binary data; for --hook on_ack and on_redeliver
also "id", "group", "subscription", "attempt", "reason" and "in_flight_ms"). Blank lines
and lines starting with # are skipped. For each message it writes one JSON line: the
verdict (on_publish: pass, drop, reject, failed; on_redeliver: the action), the message as
the plugin left it, the messages it emitted, and "error" if the plugin failed on it. A
payload that is not valid UTF-8 is written base64-encoded, as "payload_base64".

The plugin's log goes to standard error. A plugin failure is not hidden by a failure
policy: the publish is refused (verdict "failed"), and the command exits with status 1
after the last message.

With --bench, each message is then run again through the hook for --bench-time, and its
line gets "timing": the calls made, the wall-clock ns per call (the plugin and the host's
per-call work, as the broker pays it for each message) and the host calls (v1_*) per call;
a summary per hook goes to standard error. Unless --call-timeout is given, --bench runs
without a time limit, as the broker does by default (a limit costs a few µs a call).`

// pluginTestCmd is `tinybroker plugin test [--config key=value]... [--hook HOOK]
// PLUGIN.wasm < MESSAGES`, on top of package plugintest.
func (a *app) pluginTestCmd() *cobra.Command {
	config := &keyValueFlag{values: map[string]string{}, what: "config", example: "--config allow=acme,globex"}
	var hook, name, logLevel string
	var callTimeout, benchTime time.Duration
	var memoryMB int
	var bench bool
	c := &cobra.Command{
		Use:     "test [flags] PLUGIN.wasm < MESSAGES",
		Short:   "Run a plugin's hook on messages from standard input, without a broker",
		Long:    pluginTestUsage,
		Example: `  echo '{"topic":"orders.1","headers":{"tenant":"acme"}}' | tinybroker plugin test --config allow=acme tenant-filter.wasm`,
		Args:    exactArgs(1, "one PLUGIN.wasm"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch hook {
			case plugins.HookPublish, plugins.HookAck, plugins.HookRedeliver:
			default:
				return usagef(cmd, "--hook %q: use on_publish, on_ack or on_redeliver", hook)
			}
			if memoryMB < 1 {
				return usagef(cmd, "--memory-limit-mb %d: want 1 or more", memoryMB)
			}
			timeout := callTimeout
			if timeout <= 0 || bench && !cmd.Flags().Changed("call-timeout") {
				timeout = -1 // no limit
			}
			return pluginTestRun(args[0], config.values, pluginTestOptions{hook: hook, name: name, timeout: timeout, memoryMB: memoryMB,
				logLevel: logLevel, bench: bench, benchTime: benchTime}, a.stdin, a.stdout, a.stderr)
		},
	}
	fs := c.Flags()
	fs.Var(config, "config", "a value of the plugin's configuration, `key=value`; repeat for more")
	fs.StringVar(&hook, "hook", plugins.HookPublish, "the hook to run: on_publish, on_ack or on_redeliver")
	fs.StringVar(&name, "name", "", "the plugin's name (default: the file's name without .wasm)")
	fs.DurationVar(&callTimeout, "call-timeout", 10*time.Second, "time limit per call (0: none)")
	fs.IntVar(&memoryMB, "memory-limit-mb", 64, "the plugin's largest memory, in MiB")
	fs.StringVar(&logLevel, "log-level", "info", "the plugin's log lines shown on standard error: trace, debug, info, warn, error or off")
	fs.BoolVar(&bench, "bench", false, "also time the hook on each message: ns and host calls per call")
	fs.DurationVar(&benchTime, "bench-time", 200*time.Millisecond, "with --bench, how long to time each message")
	_ = c.RegisterFlagCompletionFunc("hook", cobra.FixedCompletions([]string{plugins.HookPublish, plugins.HookAck, plugins.HookRedeliver}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.MarkFlagFilename("config")
	c.ValidArgsFunction = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"wasm"}, cobra.ShellCompDirectiveFilterFileExt
	}
	return c
}

type pluginTestOptions struct {
	hook, name, logLevel string
	timeout, benchTime   time.Duration
	memoryMB             int
	bench                bool
}

// pluginTestRun runs o.hook of the plugin at path on each message of stdin.
func pluginTestRun(path string, config map[string]string, o pluginTestOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	hook, name, logLevel, memoryMB, bench, benchTime, timeout := &o.hook, &o.name, &o.logLevel, &o.memoryMB, &o.bench, &o.benchTime, o.timeout
	p, err := plugintest.New(path, config, plugintest.Options{
		Name:             *name,
		CallTimeout:      timeout,
		MemoryLimitBytes: *memoryMB << 20,
		LogLevel:         *logLevel,
		LogOutput:        func(line string) { fmt.Fprintln(stderr, line) },
	})
	if err != nil {
		return err
	}
	defer p.Close()

	out := json.NewEncoder(stdout)
	out.SetEscapeHTML(false)
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 64<<20)
	lineNo, messages, failed := 0, 0, 0
	var total pluginTestTiming // --bench: over every message
	for in.Scan() {
		lineNo++
		line := bytes.TrimSpace(in.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		msg, err := parsePluginTestInput(line)
		if err != nil {
			return fmt.Errorf("standard input, line %d: %w", lineNo, err)
		}
		res := runHook(p, *hook, msg)
		if errors.Is(res.err, plugintest.ErrNoHook) {
			return fmt.Errorf("%w: choose another --hook", res.err)
		}
		messages++
		if res.err != nil {
			failed++
		}
		if *bench {
			tm, err := timeHook(p, *hook, msg, *benchTime)
			if err != nil {
				return fmt.Errorf("standard input, line %d: --bench: %w", lineNo, err)
			}
			res.out.Timing = tm
			total.Calls += tm.Calls
			total.NsPerCall += tm.NsPerCall * float64(tm.Calls)
			total.HostCallsPerCall += tm.HostCallsPerCall * float64(tm.Calls)
			total.Failures += tm.Failures
			total.NsPerMessageInFrames += tm.NsPerMessageInFrames // averaged over the lines
			total.Batched += tm.Batched
		}
		if err := out.Encode(res.out); err != nil {
			return err
		}
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("standard input, after line %d: %w", lineNo, err)
	}
	if *bench && total.Calls > 0 {
		n := float64(total.Calls)
		fmt.Fprintf(stderr, "bench: %s: %d messages, %d calls: %.0f ns per call, %.2f host calls per call",
			*hook, messages, total.Calls, total.NsPerCall/n, total.HostCallsPerCall/n)
		if total.Failures > 0 {
			fmt.Fprintf(stderr, ", %d failed", total.Failures)
		}
		if *hook == plugins.HookPublish {
			how := "one call per message: the plugin has no batches (docs/ABI.md, \"Batches\")"
			if b := total.Batched / float64(messages); b > 0 {
				how = fmt.Sprintf("%.0f%% of them in batches", 100*b)
			}
			fmt.Fprintf(stderr, "; in frames of %d: %.0f ns per message, %s", frameSize, total.NsPerMessageInFrames/float64(messages), how)
		}
		if timeout < 0 {
			fmt.Fprint(stderr, " (no time limit)")
		} else {
			fmt.Fprintf(stderr, " (with a time limit of %v per call)", timeout)
		}
		fmt.Fprintln(stderr)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d messages failed (see their \"error\")", failed, messages)
	}
	return nil
}

func parsePluginTestInput(line []byte) (pluginTestInput, error) {
	var msg pluginTestInput
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil {
		return msg, fmt.Errorf("want one JSON object such as {\"topic\":\"orders.1\",\"payload\":\"text\",\"headers\":{\"tenant\":\"acme\"}}: %w", err)
	}
	if dec.More() {
		return msg, errors.New("more than one JSON value on the line")
	}
	if msg.Payload != nil && msg.PayloadBase64 != nil {
		return msg, errors.New(`give "payload" or "payload_base64", not both`)
	}
	return msg, nil
}

type hookResult struct {
	out pluginTestOutput
	err error
}

// runHook runs hook on msg and describes the result as a line of output.
func runHook(p *plugintest.Plugin, hook string, in pluginTestInput) hookResult {
	m := plugintest.Message{Topic: in.Topic, Payload: in.PayloadBase64, Headers: in.Headers}
	if in.Payload != nil {
		m.Payload = []byte(*in.Payload)
	}
	ev := plugintest.Event{ID: in.ID, Group: in.Group, Subscription: in.Subscription, Attempt: in.Attempt}
	var (
		out     pluginTestOutput
		err     error
		emitted []plugintest.Message
	)
	switch hook {
	case plugins.HookPublish:
		r := p.Publish(m)
		err, emitted = r.Err, r.Emitted
		out.Verdict, out.Reason = string(r.Verdict), r.Reason
		switch r.Verdict {
		case plugintest.Pass:
			out.Topic, out.Headers = r.Topic, r.Headers
			var pm pluginTestMessage
			pm.setPayload(r.Payload)
			out.Payload, out.PayloadBase64 = pm.Payload, pm.PayloadBase64
		case plugintest.Reject, plugintest.Failed:
			out.Code, out.Status = r.Code, codes.Code(r.Code).String()
			if r.Verdict == plugintest.Failed {
				out.Reason = "" // the same as the error
			}
		}
	case plugins.HookAck:
		r := p.Ack(plugintest.AckEvent{Message: m, Event: ev, InFlight: time.Duration(in.InFlightMS) * time.Millisecond})
		err, emitted = r.Err, r.Emitted
	case plugins.HookRedeliver:
		r := p.Redeliver(plugintest.RedeliverEvent{Message: m, Event: ev, Reason: in.Reason})
		err, emitted = r.Err, r.Emitted
		out.Action, out.Reason, out.Headers = string(r.Action), r.Reason, r.Headers
		out.DelayMS = r.Delay.Milliseconds()
	}
	out.Emitted = make([]pluginTestMessage, len(emitted))
	for i, e := range emitted {
		out.Emitted[i] = outputMessage(e)
	}
	if err != nil {
		out.Error = err.Error()
	}
	return hookResult{out: out, err: err}
}

// timeHook times hook on the message of one input line (--bench).
func timeHook(p *plugintest.Plugin, hook string, in pluginTestInput, d time.Duration) (*pluginTestTiming, error) {
	m := plugintest.Message{Topic: in.Topic, Payload: in.PayloadBase64, Headers: in.Headers}
	if in.Payload != nil {
		m.Payload = []byte(*in.Payload)
	}
	ev := plugintest.Event{ID: in.ID, Group: in.Group, Subscription: in.Subscription, Attempt: in.Attempt}
	var (
		t   plugintest.Timing
		err error
	)
	switch hook {
	case plugins.HookPublish:
		t, err = p.TimePublish(m, d)
	case plugins.HookAck:
		t, err = p.TimeAck(plugintest.AckEvent{Message: m, Event: ev, InFlight: time.Duration(in.InFlightMS) * time.Millisecond}, d)
	default:
		t, err = p.TimeRedeliver(plugintest.RedeliverEvent{Message: m, Event: ev, Reason: in.Reason}, d)
	}
	if err != nil {
		return nil, err
	}
	tm := &pluginTestTiming{Calls: t.Calls, NsPerCall: float64(t.PerCall.Nanoseconds()), HostCallsPerCall: t.HostCalls, Failures: t.Failures}
	if hook == plugins.HookPublish {
		f, err := p.TimePublishFrame(m, frameSize, d)
		if err != nil {
			return nil, err
		}
		tm.NsPerMessageInFrames, tm.Batched = float64(f.PerCall.Nanoseconds()), f.Batched
	}
	return tm, nil
}
