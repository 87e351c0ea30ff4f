package plugins

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// newLoggingHost returns a Host whose log takes info and above (not debug), as log topics do.
func newLoggingHost(t *testing.T) *Host {
	t.Helper()
	h, err := NewHost(HostOptions{Logger: hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func loggerSpec(t *testing.T, topic string) Spec {
	return Spec{Name: "logger", Wasm: fixture(t, "logger"), LogTopic: topic}
}

func publishTo(t *testing.T, c *Chain, payload string) {
	t.Helper()
	if _, err := c.OnPublish(&broker.Draft{Topic: "in", Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
}

// The lines a plugin logs once its chain is started arrive on its log topic, with its name,
// hash and level; its line from tb_v1_init at load does not (no engine then), nor its debug
// lines, which the broker's log, at info, leaves out.
func TestLogTopicPublishesLines(t *testing.T) {
	h := newLoggingHost(t)
	c := load(t, h, loggerSpec(t, "logs.logger"))
	var e emitted
	c.Start(e.emit)
	for i := range 3 {
		publishTo(t, c, "line "+strconv.Itoa(i))
	}
	waitUntil(t, "3 lines", func() bool { return e.count() >= 3 })
	time.Sleep(20 * time.Millisecond) // time for any line too many to arrive
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ds) != 3 {
		t.Fatalf("%d lines published, want 3 (the payloads): %+v", len(e.ds), e.ds)
	}
	hash := statsOf(c).Hash
	for i, d := range e.ds {
		want := broker.Headers{{Key: "hash", Value: hash}, {Key: "level", Value: "info"}, {Key: "plugin", Value: "logger"}}
		if d.Topic != "logs.logger" || string(d.Payload) != "line "+strconv.Itoa(i) || !equalHeaders(d.Headers, want) {
			t.Errorf("line %d: %s %q %v; want logs.logger %q %v", i, d.Topic, d.Payload, d.Headers, "line "+strconv.Itoa(i), want)
		}
	}
}

func equalHeaders(a, b broker.Headers) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Past log_topic_rate lines a second, the lines are dropped and counted, not published.
func TestLogTopicRate(t *testing.T) {
	h := newLoggingHost(t)
	s := loggerSpec(t, "logs.logger")
	s.LogTopicRate = 5
	c := load(t, h, s)
	var e emitted
	c.Start(e.emit)
	start := time.Now()
	for i := range 20 {
		publishTo(t, c, "line "+strconv.Itoa(i))
	}
	if time.Since(start) > 150*time.Millisecond {
		t.Skip("too slow a machine to stay within one bucket's refill") // 0.15 s refills under one line
	}
	waitUntil(t, "5 lines", func() bool { return e.count() >= 5 })
	time.Sleep(20 * time.Millisecond)
	if n, dropped := e.count(), statsOf(c).LogDropped; n != 5 || dropped != 15 {
		t.Fatalf("%d lines published and %d dropped; want 5 and 15", n, dropped)
	}
}

// Without log_topic, nothing a plugin logs is published.
func TestLogTopicUnset(t *testing.T) {
	h := newLoggingHost(t)
	c := load(t, h, loggerSpec(t, ""))
	var e emitted
	c.Start(e.emit)
	publishTo(t, c, "line")
	time.Sleep(50 * time.Millisecond)
	if n := e.count(); n != 0 {
		t.Fatalf("%d lines published without a log_topic", n)
	}
}

// A log_topic that is not a topic refuses the load, naming the setting.
func TestLogTopicInvalid(t *testing.T) {
	h := newLoggingHost(t)
	for _, topic := range []string{"logs.*", "logs..x", "logs.>"} {
		c, err := h.Load(context.Background(), []Spec{loggerSpec(t, topic)})
		if err == nil {
			c.Close(context.Background())
			t.Fatalf("log_topic %q loaded", topic)
		}
		if !strings.Contains(err.Error(), "log_topic") || !strings.Contains(err.Error(), topic) {
			t.Errorf("log_topic %q: error %q, want one naming log_topic and the topic", topic, err)
		}
	}
}

// Through an engine, a line reaches the log topic's subscribers and does not come back to the
// plugin that logged it: its on_publish, which sees every topic, runs once, for the message
// published, not for its own line (which would log again, without end).
func TestLogTopicThroughEngine(t *testing.T) {
	h := newLoggingHost(t)
	c := load(t, h, loggerSpec(t, "logs.logger"))
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	sub := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"logs.logger"}, Mode: broker.Fanout})
	if _, err := b.Publish("in", []byte("hello"), nil); err != nil {
		t.Fatal(err)
	}
	if d := sub.Next(t); string(d.Msg.Payload) != "hello" {
		t.Fatalf("delivered %q on the log topic, want hello", d.Msg.Payload)
	}
	sub.None(t, 100*time.Millisecond)
	if n := statsOf(c).Calls; n != 1 {
		t.Fatalf("on_publish called %d times, want once (for the message, not its log line)", n)
	}
}
