package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// stdin is where `pub TOPIC -` reads its data; tests replace it.
var stdin io.Reader = os.Stdin

func (a *app) pubCmd() *cobra.Command {
	var addr, key string
	var timeout, sleep, ttl, delay time.Duration
	var at string
	var count, keys, priority int
	var noTemplate, asJSON bool
	var dial *dialFlags
	headers := &keyValueFlag{values: map[string]string{}, what: "header", example: "-H content-type=application/json"}
	c := &cobra.Command{
		Use:   "pub [flags] TOPIC DATA",
		Short: "Publish a message, or --count of them",
		Long: `Publishes DATA to TOPIC (dot-separated tokens, e.g. jobs.thumb.1). DATA "-" reads it from
standard input, as it is (never as a template).

With --count N it publishes N messages, --sleep apart, and DATA is a Go text/template for each
message's payload: {{.Count}} (1, 2, ...), {{.ID}} (a random id), {{.Time}} (RFC 3339, in
nanoseconds), {{.Unix}} (seconds), {{.UnixNano}}. DATA without "{{" is sent as it is;
--no-template sends it as it is whatever it holds. A template that does not parse, or names a
field that is not one of these, is a usage error, and nothing is published.

--key K gives every message the ordering and fairness key K: a consumer group with ordering
"key" delivers the messages of one key one at a time, in publish order, and one with fair_by
"key" takes turns across keys. With --count, --keys N spreads the messages over N keys
instead, key-0 to key-<N-1> in turn (or K-0 to K-<N-1> with --key K).

--delay D has the broker hold each message and publish it D after it accepted it; --at T,
until the time T (RFC 3339). pub returns at once, printing the system_id the message will
be delivered under. At most the broker's max_delay (24h by default); on the memory engine a
delayed message is lost if the broker restarts.`,
		Example: `  tinybroker pub orders.created '{"id": 42}'
  tinybroker pub -H size=128 jobs.thumb.1 cat.jpg
  tinybroker pub jobs.raw - < input.bin
  tinybroker pub orders.new 'order {{.Count}} at {{.Time}}' --count 10 --sleep 100ms
  tinybroker pub --key customer-42 orders.paid '{"id": 42}'
  tinybroker pub --count 100 --keys 10 jobs.thumb.1 'job {{.Count}}'
  tinybroker pub --delay 5m reminders.email '{"user": 7}'
  tinybroker pub --at 2026-12-24T18:00:00Z greetings.all 'merry'`,
		Args: exactArgs(2, "TOPIC and DATA"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, data := args[0], []byte(args[1])
			if count < 1 {
				return usagef(cmd, "--count %d: want 1 or more", count)
			}
			if sleep < 0 {
				return usagef(cmd, "--sleep %v: want 0 or a positive duration", sleep)
			}
			if keys > 0 && count == 1 {
				return usagef(cmd, "--keys %d spreads --count messages over keys: add --count N", keys)
			}
			keyOf, err := pubKeys(key, keys)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			var deliverAt time.Time
			if at != "" {
				if deliverAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
					return usagef(cmd, "--at %q: want a time in RFC 3339, e.g. 2026-12-24T18:00:00Z", at)
				}
			}
			if args[1] == "-" {
				var err error
				if data, err = io.ReadAll(a.stdin); err != nil {
					return fmt.Errorf("read DATA from stdin: %w", err)
				}
			}
			var h map[string]string
			if len(headers.values) > 0 {
				h = headers.values
			}
			payload, err := payloadTemplate(string(data), noTemplate || args[1] == "-") // what stdin gives is data, never a template
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			dialOpts, err := dial.clientOptions()
			if err != nil {
				return err
			}
			c, err := client.Dial(addr, dialOpts...)
			if err != nil {
				return dial.explain(sdkError{err}, addr)
			}
			defer c.Close()
			for n := 1; n <= count; n++ {
				if n > 1 && sleep > 0 {
					select {
					case <-cmd.Context().Done():
						return nil
					case <-time.After(sleep):
					}
				}
				body, err := payload(n)
				if err != nil {
					return fmt.Errorf("message %d's payload: %w", n, err)
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				var opts []client.PublishOption
				if k := keyOf(n); k != "" {
					opts = append(opts, client.WithKey(k))
				}
				if ttl != 0 {
					opts = append(opts, client.WithTTL(ttl))
				}
				if priority != 0 {
					opts = append(opts, client.WithPriority(priority))
				}
				if delay != 0 {
					opts = append(opts, client.WithDelay(delay))
				}
				if at != "" {
					opts = append(opts, client.WithDeliverAt(deliverAt))
				}
				res, err := c.Publish(ctx, topic, body, h, opts...)
				cancel()
				if err != nil {
					return dial.explain(sdkError{err}, addr)
				}
				if asJSON {
					if err := json.NewEncoder(a.stdout).Encode(pubJSON{SystemID: res.SystemID, Topic: topic, Key: keyOf(n), Routed: res.Routed,
						DroppedBy: res.DroppedBy, DropReason: res.DropReason, Duplicate: res.Duplicate}); err != nil {
						return err
					}
					continue
				}
				delayed := (delay > 0 || deliverAt.After(time.Now())) && res.DroppedBy == ""
				routed := fmt.Sprintf("routed to %d", res.Routed)
				if delayed {
					routed = "delayed: routed when due"
				}
				if k := keyOf(n); k != "" {
					fmt.Fprintf(a.stdout, "published %s to %s key %s (%s)\n", res.SystemID, topic, quoteIfNeeded(k), routed)
				} else {
					fmt.Fprintf(a.stdout, "published %s to %s (%s)\n", res.SystemID, topic, routed)
				}
				switch {
				case res.DroppedBy != "":
					fmt.Fprintf(a.stderr, "note: plugin %q dropped the message: %s\n", res.DroppedBy, orNone(res.DropReason))
				case res.Routed == 0 && n == 1 && !delayed:
					fmt.Fprintln(a.stderr, "note: no subscription matched the topic, so the broker dropped the message")
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&addr, "addr", defaultAddr(), addrUsage)
	f.VarP(headers, "header", "H", "message header `key=value`; repeat for more")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "give up on a message after this long")
	f.IntVar(&count, "count", 1, "publish this many messages, DATA a template for each (see above)")
	f.DurationVar(&sleep, "sleep", 0, "with --count: time between two messages")
	f.BoolVar(&noTemplate, "no-template", false, "send DATA as it is, even with {{ in it")
	f.StringVar(&key, "key", "", "the messages' ordering and fairness `key` (at most 256 bytes of printable text)")
	f.DurationVar(&ttl, "ttl", 0, "the messages expire this long after the broker accepts them: a consumer group dead-letters them (reason expired) instead of delivering them later")
	f.IntVar(&priority, "priority", 0, "the messages' `priority`, 0 to 9, higher first, in consumer groups with a max_priority")
	f.DurationVar(&delay, "delay", 0, "the broker holds the messages and publishes them this long after it accepts them")
	f.StringVar(&at, "at", "", "the broker holds the messages and publishes them at this `time` (RFC 3339)")
	c.MarkFlagsMutuallyExclusive("delay", "at")
	f.IntVar(&keys, "keys", 0, "with --count: spread the messages over `N` keys in turn, key-0 to key-<N-1> (--key K: K-0 ...)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per message published (system_id, topic, key, routed, dropped_by, drop_reason, duplicate)")
	dial = addDialFlags(f)
	return c
}

// pubJSON is pub --json's line per message.
type pubJSON struct {
	SystemID   string `json:"system_id"`
	Topic      string `json:"topic"`
	Key        string `json:"key,omitempty"`
	Routed     int    `json:"routed"`
	DroppedBy  string `json:"dropped_by,omitempty"`
	DropReason string `json:"drop_reason,omitempty"`
	Duplicate  bool   `json:"duplicate,omitempty"`
}

// pubKeys returns the key of pub's message n (1, 2, ...): key for every message, or with
// keys > 0 one of keys keys in turn, "<key or key>-0" to "-<keys-1>". It checks them as the
// broker would (broker.ValidateKey), so that a bad key is a usage error before anything is
// published.
func pubKeys(key string, keys int) (func(n int) string, error) {
	if keys < 0 {
		return nil, fmt.Errorf("--keys %d: want 1 or more (or 0: one key, --key, for every message)", keys)
	}
	if keys == 0 {
		if err := broker.ValidateKey(key); err != nil {
			return nil, fmt.Errorf("--key: %v", strings.TrimPrefix(err.Error(), broker.ErrInvalidMessage.Error()+": "))
		}
		return func(int) string { return key }, nil
	}
	prefix := cmp.Or(key, "key") + "-"
	if err := broker.ValidateKey(prefix + strconv.Itoa(keys-1)); err != nil {
		return nil, fmt.Errorf("--key with --keys %d: %v", keys, strings.TrimPrefix(err.Error(), broker.ErrInvalidMessage.Error()+": "))
	}
	return func(n int) string { return prefix + strconv.Itoa((n-1)%keys) }, nil
}

// subJSON is sub --json's line per message: the payload as text when it is UTF-8, else in
// base64.
type subJSON struct {
	SystemID       string            `json:"system_id"`
	Topic          string            `json:"topic"`
	Key            string            `json:"key,omitempty"`
	Priority       int               `json:"priority,omitempty"`
	SubscriptionID string            `json:"subscription_id"`
	Attempt        int               `json:"attempt"`
	Redelivered    bool              `json:"redelivered"`
	PublishedAt    string            `json:"published_at"`
	Headers        map[string]string `json:"headers,omitempty"`
	Payload        *string           `json:"payload,omitempty"`
	PayloadBase64  []byte            `json:"payload_base64,omitempty"`
}

func messageJSON(m *client.Message) subJSON {
	j := subJSON{SystemID: m.SystemID, Topic: m.Topic, Key: m.Key, Priority: m.Priority, SubscriptionID: m.SubscriptionID, Attempt: m.Attempt, Redelivered: m.Redelivered,
		PublishedAt: m.PublishedAt.UTC().Format(time.RFC3339Nano), Headers: m.Headers.Map()}
	if utf8.Valid(m.Payload) {
		p := string(m.Payload)
		j.Payload = &p
	} else {
		j.PayloadBase64 = m.Payload
	}
	return j
}

// payloadTemplate returns what makes message n's payload of pub's DATA: DATA itself, or
// DATA as a text/template (when it has "{{" and noTemplate is not set).
func payloadTemplate(data string, noTemplate bool) (func(n int) ([]byte, error), error) {
	if noTemplate || !strings.Contains(data, "{{") {
		return func(int) ([]byte, error) { return []byte(data), nil }, nil
	}
	tmpl, err := template.New("DATA").Option("missingkey=error").Parse(data)
	if err != nil {
		return nil, fmt.Errorf("DATA is not a valid template (%v); use --no-template to send it as it is", err)
	}
	type fields struct {
		Count          int
		ID, Time       string
		Unix, UnixNano int64
	}
	payload := func(n int) ([]byte, error) {
		var b bytes.Buffer
		now := time.Now()
		err := tmpl.Execute(&b, fields{Count: n, ID: rand.Text(), Time: now.Format(time.RFC3339Nano), Unix: now.Unix(), UnixNano: now.UnixNano()})
		return b.Bytes(), err
	}
	// Run it once before anything is published, so that a field it has no value for (a
	// misspelt {{.Cuont}}) is a usage error, not a failure after the first messages.
	if _, err := payload(1); err != nil {
		return nil, fmt.Errorf("DATA's template fails (%v); its fields are {{.Count}}, {{.ID}}, {{.Time}}, {{.Unix}} and {{.UnixNano}}; use --no-template to send DATA as it is", err)
	}
	return payload, nil
}

func orNone(reason string) string {
	if reason == "" {
		return "(no reason given)"
	}
	return reason
}

func (a *app) subCmd() *cobra.Command {
	var addr, group, id, ack, deadLetterTopic, ordering, fairBy string
	var maxInFlight, count, maxDeliveries, maxPriority, priority int
	var ackDeadline, nackDelay time.Duration
	var asJSON bool
	var dial *dialFlags
	c := &cobra.Command{
		Use:   "sub [flags] PATTERN...",
		Short: "Subscribe and print messages",
		Long: `Prints every message whose topic matches a PATTERN ('*' matches one token, a final '>' one
or more, e.g. "jobs.thumb.*" or "orders.>") and acks it, until interrupted. Without --group
the subscription is fanout (it gets every message); with it, it joins the consumer group and
shares its messages with the other members.

In a group, --ack says what becomes of each message printed: auto acks it (the default), nack
nacks it (redelivered after --nack-delay, dead-lettered after --max-deliveries attempts), none
leaves it unacked (redelivered after the ack deadline, or to the other members once this one
leaves). The group's settings (--max-deliveries, --dead-letter-topic, --ordering, --fair-by)
are set by its first member; a later member may leave them out, or must ask for the same.

--ordering key delivers the messages of one key (pub --key) one at a time, in publish order,
keys in parallel across the members; --ordering group delivers one message of the group at a
time (a single active consumer). --fair-by key takes turns across message keys, --fair-by
header:NAME across the values of header NAME, so that one that floods does not delay the
others. A message's key is printed as key=K (and "key" with --json).`,
		Example: `  tinybroker sub 'orders.>'
  tinybroker sub --group resizers --count 10 'jobs.thumb.*'
  tinybroker sub --group resizers --ack nack --max-deliveries 3 'jobs.thumb.*'   # see dead-lettering work
  tinybroker sub --group billing --ordering key 'orders.>'      # one message per key at a time
  tinybroker sub --group jobs --fair-by header:tenant 'jobs.>'  # tenants take turns`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef(cmd, "sub needs at least one PATTERN, e.g. \"orders.>\"")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case count < 0:
				return usagef(cmd, "--count %d: want 0 (no limit) or more", count)
			case maxInFlight < 0:
				return usagef(cmd, "--max-in-flight %d: want 1 or more", maxInFlight)
			case maxInFlight > 0 && group == "":
				return usagef(cmd, "--max-in-flight is for balanced subscriptions: add --group NAME")
			case ack != "auto" && ack != "none" && ack != "nack":
				return usagef(cmd, "--ack %q: want auto, none or nack", ack)
			case maxDeliveries < 0 || ackDeadline < 0 || nackDelay < 0:
				return usagef(cmd, "--max-deliveries, --ack-deadline and --nack-delay: want 0 (the default) or more")
			case group == "" && (ack != "auto" || maxDeliveries > 0 || ackDeadline > 0 || nackDelay > 0 || deadLetterTopic != ""):
				return usagef(cmd, "--ack, --max-deliveries, --ack-deadline, --nack-delay and --dead-letter-topic are for balanced subscriptions: add --group NAME")
			case nackDelay > 0 && ack != "nack":
				return usagef(cmd, "--nack-delay goes with --ack nack")
			case group == "" && (ordering != "" || fairBy != "" || maxPriority != 0 || priority != 0):
				return usagef(cmd, "--ordering, --fair-by, --max-priority and --priority are for balanced subscriptions: add --group NAME (a fanout subscription gets every message in publish order already)")
			case maxPriority < 0 || maxPriority > 9 || priority < 0 || priority > 9:
				return usagef(cmd, "--max-priority %d, --priority %d: priorities are 0 to 9", maxPriority, priority)
			}
			order, err := subOrdering(ordering)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			if err := (broker.Dispatch{FairBy: fairBy}).Check(); err != nil {
				return usagef(cmd, "--fair-by: %s", strings.TrimPrefix(err.Error(), broker.ErrInvalidSubscription.Error()+": "))
			}
			dialOpts, err := dial.clientOptions()
			if err != nil {
				return err
			}
			return a.sub(cmd.Context(), addr, dial, dialOpts, client.SubscribeOptions{ID: id, Patterns: args, Group: group, MaxInFlight: maxInFlight,
				MaxDeliveries: maxDeliveries, AckDeadline: ackDeadline, DeadLetterTopic: deadLetterTopic, NackDelay: nackDelay, ManualAck: ack == "none",
				Ordering: order, FairBy: fairBy, MaxPriority: maxPriority, Priority: priority}, count, ack, asJSON)
		},
	}
	f := c.Flags()
	f.StringVar(&addr, "addr", defaultAddr(), addrUsage)
	f.StringVar(&group, "group", "", "consumer group to join (balanced delivery); empty for fanout")
	f.StringVar(&id, "id", "", "subscription id (default: the group, or made up by the broker for fanout)")
	f.IntVar(&maxInFlight, "max-in-flight", 0, "with --group: unacked messages held at once (default 1)")
	f.IntVar(&count, "count", 0, "exit after this many messages (0: run until interrupted)")
	f.StringVar(&ack, "ack", "auto", "with --group: auto (ack each message), nack (nack each) or none (leave each unacked)")
	f.DurationVar(&nackDelay, "nack-delay", 0, "with --ack nack: how long a nacked message waits before it is redelivered")
	f.IntVar(&maxDeliveries, "max-deliveries", 0, "with --group: attempts before a message is dead-lettered (0: the broker's default)")
	f.DurationVar(&ackDeadline, "ack-deadline", 0, "with --group: a message not acked this long after delivery is redelivered (0: the broker's default)")
	f.StringVar(&deadLetterTopic, "dead-letter-topic", "", "with --group: where dead letters go (default dlq.<subscription id>)")
	f.StringVar(&ordering, "ordering", "", "with --group: key (one message of a key at a time, keys in parallel), group (one message at a time) or none (default: the group's)")
	f.StringVar(&fairBy, "fair-by", "", "with --group: key or header:NAME, take turns across message keys or that header's values (default: the group's)")
	f.IntVar(&maxPriority, "max-priority", 0, "with --group: the group's highest message priority, 1 to 9, higher first (default: the group's; none for a new group: FIFO)")
	f.IntVar(&priority, "priority", 0, "with --group: this member's priority, 0 to 9; a lower one gets messages only while every higher one is full")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per message (system_id, topic, key, priority, subscription_id, attempt, redelivered, published_at, headers, payload or payload_base64)")
	dial = addDialFlags(f)
	return c
}

// subOrdering reads sub's --ordering: "" (the group's, or none for a new group), "none",
// "key" or "group".
func subOrdering(s string) (client.Ordering, error) {
	o, err := broker.ParseOrdering(s)
	if err != nil {
		return 0, fmt.Errorf("--ordering %q: want key (one message of a key at a time, keys in parallel), group (one message of the group at a time) or none", s)
	}
	switch o {
	case broker.OrderingKey:
		return client.OrderingKey, nil
	case broker.OrderingGroup:
		return client.OrderingGroup, nil
	}
	return client.OrderingNone, nil
}

// nackReason is the reason sub --ack nack gives its nacks: the dead-letter headers show it.
const nackReason = "nacked by sub --ack nack"

// sub prints every message until ctx is done or count messages have arrived, and acks,
// nacks or leaves each as ack says.
func (a *app) sub(ctx context.Context, addr string, dial *dialFlags, dialOpts []client.Option, opts client.SubscribeOptions, count int, ack string, asJSON bool) error {
	if opts.Group != "" {
		opts.Mode = client.Balanced
	}
	c, err := client.Dial(addr, dialOpts...)
	if err != nil {
		return dial.explain(sdkError{err}, addr)
	}
	defer c.Close()
	// --ack nack nacks by the unary Nack call, which the broker answers once it has applied
	// it, rather than by the handler's error: the client library does not nack a message whose
	// handler fails once the subscription is closing, as --count closes it after the last
	// message, and a nack still in the stream's buffers is lost when the stream is cancelled.
	// Either way the last message would go back as left behind, without the delay or the
	// reason. The client library then acks nothing itself (ManualAck).
	var nacks pb.BrokerClient
	if ack == "nack" {
		conn, err := (&adminFlags{addr: addr, dial: dial}).conn()
		if err != nil {
			return err
		}
		defer conn.Close()
		nacks = pb.NewBrokerClient(conn)
		opts.ManualAck = true
	}
	var mu sync.Mutex
	n := 0
	reached := make(chan struct{})
	sub, err := c.Subscribe(ctx, opts, func(ctx context.Context, m *client.Message) error {
		mu.Lock()
		if count > 0 && n >= count {
			mu.Unlock()
			<-ctx.Done() // one too many: leave it unacked, for another member
			return ctx.Err()
		}
		if asJSON {
			_ = json.NewEncoder(a.stdout).Encode(messageJSON(m))
		} else {
			fmt.Fprintln(a.stdout, formatMessage(m))
		}
		n++
		last := n == count
		mu.Unlock()
		if nacks != nil {
			// Even when sub is stopping: the message was printed, so it gets its nack.
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, err := nacks.Nack(nctx, &pb.Nack{SubscriptionId: m.SubscriptionID, SystemId: m.SystemID, Delay: durationpb.New(opts.NackDelay), Reason: nackReason})
			cancel()
			if err != nil {
				fmt.Fprintf(a.stderr, "note: nack of %s failed (the broker redelivers it after the ack deadline, or when sub exits): %v\n", m.SystemID, sdkError{err})
			}
		}
		if last {
			close(reached) // after the nack, so that sub exits with every printed message settled
		}
		return nil // auto: the client acks; none and nack (ManualAck): it does not
	})
	if err != nil {
		return dial.explain(sdkError{err}, addr)
	}
	set := sub.Settings()
	if opts.Mode == client.Balanced {
		maxDel, ackText := "unlimited", "acks each"
		if set.MaxDeliveries > 0 {
			maxDel = strconv.Itoa(set.MaxDeliveries)
		}
		switch ack {
		case "nack":
			ackText = "nacks each"
			if opts.NackDelay > 0 {
				ackText += fmt.Sprintf(" with a delay of %v", opts.NackDelay)
			}
		case "none":
			ackText = "acks none"
		}
		fmt.Fprintf(a.stderr, "subscribed to %s as %s of group %s (subscription %s; max in flight %d, ack deadline %v, max deliveries %s, dead letters to %s%s; %s)\n",
			strings.Join(opts.Patterns, " "), set.MemberID, opts.Group, set.ID, set.MaxInFlight, set.AckDeadline, maxDel, set.DeadLetterTopic, dispatchText(set), ackText)
	} else {
		fmt.Fprintf(a.stderr, "subscribed to %s (subscription %s)\n", strings.Join(opts.Patterns, " "), set.ID)
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

// dispatchText is sub's note of the group's ordering and fairness, "" if it has neither.
func dispatchText(set client.Settings) string {
	var s string
	switch set.Ordering {
	case client.OrderingKey:
		s = ", ordered by key"
	case client.OrderingGroup:
		s = ", ordered: one message at a time"
	}
	if set.FairBy != "" {
		s += ", fair by " + set.FairBy
	}
	return s
}

// sdkError drops the "tinybroker: " prefix of the client library's errors, since main
// prefixes every error with it already. errors.Is and status.Code see the original.
type sdkError struct{ err error }

func (e sdkError) Error() string { return strings.TrimPrefix(e.err.Error(), "tinybroker: ") }
func (e sdkError) Unwrap() error { return e.err }

// formatMessage renders m as one line:
// "[topic] system_id [key=K] attempt=N payload {header=value, ...}" (key=K if it has one).
func formatMessage(m *client.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s", m.Topic, m.SystemID)
	if m.Key != "" {
		b.WriteString(" key=")
		b.WriteString(quoteIfNeeded(m.Key))
	}
	fmt.Fprintf(&b, " attempt=%d", m.Attempt)
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

// addrUsage is the --addr flag's help, for every command that dials.
const addrUsage = "broker address (`host:port`), or a cluster's nodes separated by commas (the first that answers is used; default $TINYBROKER_ADDR, else 127.0.0.1:7878)"

// defaultAddr is --addr's default: $TINYBROKER_ADDR, else client.DefaultAddr.
func defaultAddr() string {
	if a := os.Getenv("TINYBROKER_ADDR"); a != "" {
		return a
	}
	return client.DefaultAddr
}
