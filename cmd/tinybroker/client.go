package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// stdin is where `pub TOPIC -` reads its data; tests replace it.
var stdin io.Reader = os.Stdin

// headerFlag collects repeated -H key=value flags.
type headerFlag map[string]string

func (h headerFlag) String() string {
	keys := slices.Sorted(maps.Keys(h))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + h[k]
	}
	return strings.Join(parts, ",")
}

func (h headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("header %q: want key=value, e.g. -H content-type=application/json", v)
	}
	h[k] = val
	return nil
}

// runPub implements `tinybroker pub [--addr ADDR] [-H key=value]... TOPIC DATA`.
func runPub(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: tinybroker pub [flags] TOPIC DATA

Publishes DATA to TOPIC (dot-separated tokens, e.g. jobs.thumb.1). DATA "-" reads it from
standard input. Flags go before TOPIC.

Flags:
`)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", client.DefaultAddr, "broker address (`host:port`)")
	headers := headerFlag{}
	fs.Var(headers, "H", "message header `key=value`; repeat for more")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	dial := addDialFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return fmt.Errorf("pub needs TOPIC and DATA, got %d arguments %q (flags go before them)", fs.NArg(), fs.Args())
	}
	topic, data := fs.Arg(0), []byte(fs.Arg(1))
	if fs.Arg(1) == "-" {
		var err error
		if data, err = io.ReadAll(stdin); err != nil {
			return fmt.Errorf("read DATA from stdin: %w", err)
		}
	}
	var h map[string]string
	if len(headers) > 0 {
		h = headers
	}

	dialOpts, err := dial.clientOptions()
	if err != nil {
		return err
	}
	c, err := client.Dial(*addr, dialOpts...)
	if err != nil {
		return sdkError{err}
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := c.Publish(ctx, topic, data, h)
	if err != nil {
		return sdkError{err}
	}
	fmt.Fprintf(stdout, "published %s to %s (routed to %d)\n", res.SystemID, topic, res.Routed)
	if res.Routed == 0 {
		fmt.Fprintln(stderr, "note: no subscription matched the topic, so the broker dropped the message")
	}
	return nil
}

// runSub implements `tinybroker sub [--addr ADDR] [--group G] [--id ID] [--max-in-flight N]
// [--count N] PATTERN...`: it prints and acks every message until ctx is done or --count
// messages have arrived.
func runSub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: tinybroker sub [flags] PATTERN...

Prints every message whose topic matches a PATTERN ('*' matches one token, a final '>' one
or more, e.g. "jobs.thumb.*" or "orders.>") and acks it, until interrupted. Without --group
the subscription is fanout (it gets every message); with it, it joins the consumer group and
shares its messages with the other members. Flags go before the patterns.

Flags:
`)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", client.DefaultAddr, "broker address (`host:port`)")
	group := fs.String("group", "", "consumer group to join (balanced delivery); empty for fanout")
	id := fs.String("id", "", "subscription id (default: the group, or made up by the broker for fanout)")
	maxInFlight := fs.Int("max-in-flight", 0, "with --group: unacked messages held at once (default 1)")
	count := fs.Int("count", 0, "exit after this many messages (0: run until interrupted)")
	dial := addDialFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		fs.Usage()
		return errors.New("sub needs at least one PATTERN, e.g. \"orders.>\"")
	case *count < 0:
		return fmt.Errorf("--count %d: want 0 (no limit) or more", *count)
	case *maxInFlight < 0:
		return fmt.Errorf("--max-in-flight %d: want 1 or more", *maxInFlight)
	case *maxInFlight > 0 && *group == "":
		return errors.New("--max-in-flight is for balanced subscriptions: add --group NAME")
	}
	opts := client.SubscribeOptions{ID: *id, Patterns: fs.Args(), Group: *group, MaxInFlight: *maxInFlight}
	if *group != "" {
		opts.Mode = client.Balanced
	}

	dialOpts, err := dial.clientOptions()
	if err != nil {
		return err
	}
	c, err := client.Dial(*addr, dialOpts...)
	if err != nil {
		return sdkError{err}
	}
	defer c.Close()
	var mu sync.Mutex
	n := 0
	reached := make(chan struct{})
	sub, err := c.Subscribe(ctx, opts, func(ctx context.Context, m *client.Message) error {
		mu.Lock()
		if *count > 0 && n >= *count {
			mu.Unlock()
			<-ctx.Done() // one too many: leave it unacked, for another member
			return ctx.Err()
		}
		fmt.Fprintln(stdout, formatMessage(m))
		n++
		if n == *count {
			close(reached)
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return sdkError{err}
	}
	set := sub.Settings()
	if opts.Mode == client.Balanced {
		fmt.Fprintf(stderr, "subscribed to %s as %s of group %s (subscription %s)\n", strings.Join(opts.Patterns, " "), set.MemberID, *group, set.ID)
	} else {
		fmt.Fprintf(stderr, "subscribed to %s (subscription %s)\n", strings.Join(opts.Patterns, " "), set.ID)
	}
	select {
	case <-reached:
	case <-ctx.Done():
	case <-sub.Done():
	}
	if err := sub.Close(); err != nil { // sends the last acks; the error that ended it, if any
		return sdkError{err}
	}
	return nil
}

// sdkError drops the "tinybroker: " prefix of the client library's errors, since main
// prefixes every error with it already. errors.Is and status.Code see the original.
type sdkError struct{ err error }

func (e sdkError) Error() string { return strings.TrimPrefix(e.err.Error(), "tinybroker: ") }
func (e sdkError) Unwrap() error { return e.err }

// formatMessage renders m as one line:
// "[topic] system_id attempt=N payload {header=value, ...}".
func formatMessage(m *client.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s attempt=%d", m.Topic, m.SystemID, m.Attempt)
	if len(m.Payload) > 0 {
		b.WriteByte(' ')
		b.WriteString(payloadText(m.Payload))
	}
	if h := m.Headers.Map(); len(h) > 0 {
		b.WriteString(" {")
		for i, k := range slices.Sorted(maps.Keys(h)) {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteIfNeeded(k))
			b.WriteByte('=')
			b.WriteString(quoteIfNeeded(h[k]))
		}
		b.WriteByte('}')
	}
	return b.String()
}

// payloadText returns p as text on one line (tabs and line breaks escaped), or "len=N bytes"
// if it is not printable UTF-8.
func payloadText(p []byte) string {
	if !utf8.Valid(p) {
		return fmt.Sprintf("len=%d bytes", len(p))
	}
	s := string(p)
	for _, r := range s {
		if !unicode.IsPrint(r) && r != '\t' && r != '\n' && r != '\r' {
			return fmt.Sprintf("len=%d bytes", len(p))
		}
	}
	return strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(s)
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " ,={}\"") || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
