// Command goclient is the Go client's driver for the client conformance harness
// (internal/clientconf): it reads commands as JSON lines on stdin, runs them with
// sdk/go/client against the broker named by its argument, and writes answers and deliveries
// as JSON lines on stdout. PROTOCOL.md in the parent directory describes the lines.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// command is one line of stdin; each op reads the fields it needs.
type command struct {
	Op          string   `json:"op"`
	Topic       string   `json:"topic"`
	Payload     string   `json:"payload"`
	Count       int      `json:"count"`
	MsgID       string   `json:"msg_id"`    // message i gets the id MSG_ID:i
	Pipelined   bool     `json:"pipelined"` // through the client's pipelined publisher
	Name        string   `json:"name"`
	Patterns    []string `json:"patterns"`
	Group       string   `json:"group"`
	Concurrency int      `json:"concurrency"`
	AckDeadline int      `json:"ack_deadline_ms"`
	Mode        string   `json:"mode"` // "ack", or "nack-first": fail the first attempt
	NackDelay   int      `json:"nack_delay_ms"`
	SleepMS     int      `json:"sleep_ms"`
	TouchMS     int      `json:"touch_ms"`
	JitterMS    int      `json:"jitter_ms"` // sleep up to this long before writing the delivery line
}

// out writes the JSON lines: the client's handler goroutines and main share stdout.
type out struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *out) write(v map[string]any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.enc.Encode(v) // stdout closed: the harness is gone
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: goclient HOST:PORT (commands as JSON lines on stdin)")
		os.Exit(2)
	}
	opts, err := options()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err := client.Dial(os.Args[1], opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	o := &out{enc: json.NewEncoder(os.Stdout)}
	subs := map[string]*client.Subscription{}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			o.write(map[string]any{"error": "bad command: " + err.Error()})
			continue
		}
		if cmd.Op == "exit" {
			break
		}
		if err := run(c, o, subs, cmd); err != nil {
			o.write(map[string]any{"error": err.Error()})
			continue
		}
		o.write(map[string]any{"ok": cmd.Op})
	}
	for _, s := range subs {
		_ = s.Close() // what it could not ack is redelivered
	}
}

// options reads the environment PROTOCOL.md names: TB_CA_FILE (connect with TLS, trusting that
// CA) and TB_TOKEN (the bearer token).
func options() ([]client.Option, error) {
	var opts []client.Option
	if ca := os.Getenv("TB_CA_FILE"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TB_CA_FILE %s: no PEM certificate in it", ca)
		}
		opts = append(opts, client.WithTLS(&tls.Config{RootCAs: pool}))
	}
	if tok := os.Getenv("TB_TOKEN"); tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	return opts, nil
}

func run(c *client.Client, o *out, subs map[string]*client.Subscription, cmd command) error {
	ctx := context.Background()
	switch cmd.Op {
	case "publish":
		if cmd.Pipelined {
			return publishPipelined(ctx, c, cmd)
		}
		for i := range max(cmd.Count, 1) {
			var opts []client.PublishOption
			if cmd.MsgID != "" {
				opts = append(opts, client.WithMessageID(cmd.MsgID+":"+strconv.Itoa(i)))
			}
			if _, err := c.Publish(ctx, cmd.Topic, []byte(cmd.Payload+":"+strconv.Itoa(i)), nil, opts...); err != nil {
				return err
			}
		}
		return nil
	case "subscribe":
		opts := client.SubscribeOptions{ID: cmd.Group, Patterns: cmd.Patterns, Group: cmd.Group, Concurrency: cmd.Concurrency,
			NackDelay: time.Duration(cmd.NackDelay) * time.Millisecond}
		if cmd.Group != "" {
			opts.Mode = client.Balanced
			opts.AckDeadline = time.Duration(cmd.AckDeadline) * time.Millisecond
		}
		s, err := c.Subscribe(ctx, opts, func(_ context.Context, m *client.Message) error {
			if cmd.JitterMS > 0 {
				time.Sleep(rand.N(time.Duration(cmd.JitterMS) * time.Millisecond))
			}
			o.write(map[string]any{"event": "message", "sub": cmd.Name, "topic": m.Topic, "payload": string(m.Payload),
				"attempt": m.Attempt, "system_id": m.SystemID})
			if err := work(m, time.Duration(cmd.SleepMS)*time.Millisecond, time.Duration(cmd.TouchMS)*time.Millisecond); err != nil {
				return err
			}
			if cmd.Mode == "nack-first" && m.Attempt == 1 {
				return errors.New("nack-first: failing the first attempt")
			}
			return nil
		})
		if err != nil {
			return err
		}
		subs[cmd.Name] = s
		return nil
	case "close":
		s, ok := subs[cmd.Name]
		if !ok {
			return fmt.Errorf("no subscription %q", cmd.Name)
		}
		delete(subs, cmd.Name)
		return s.Close()
	}
	return fmt.Errorf("unknown op %q", cmd.Op)
}

// work sleeps for d, touching m every touch if it is not 0.
func work(m *client.Message, d, touch time.Duration) error {
	if touch <= 0 {
		time.Sleep(d)
		return nil
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(min(touch, time.Until(end)))
		if err := m.Touch(); err != nil {
			return err
		}
	}
	return nil
}

// publishPipelined publishes cmd's messages through a Publisher and waits for every confirm.
func publishPipelined(ctx context.Context, c *client.Client, cmd command) error {
	p, err := c.NewPublisher(ctx, client.PublisherOptions{})
	if err != nil {
		return err
	}
	for i := range max(cmd.Count, 1) {
		var opts []client.PublishOption
		if cmd.MsgID != "" {
			opts = append(opts, client.WithMessageID(cmd.MsgID+":"+strconv.Itoa(i)))
		}
		if err := p.Publish(ctx, cmd.Topic, []byte(cmd.Payload+":"+strconv.Itoa(i)), nil, opts...); err != nil {
			_ = p.Close()
			return err
		}
	}
	if err := p.Flush(ctx); err != nil {
		_ = p.Close()
		return err
	}
	return p.Close()
}
