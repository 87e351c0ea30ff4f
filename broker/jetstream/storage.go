package jetstream

// Where a consumer group's messages are stored. Most groups share the engine's stream (one
// interest-retention stream: a message several groups take is stored once). A declared
// group whose replicas differ from the engine's gets a stream of its own, with that many
// copies of its messages, as a replicated queue does (RabbitMQ's quorum queues, a NATS work
// queue): its messages are stored under <prefix>.q.<consumer>.<topic> in stream
// <Stream>_G_<consumer>, and its consumer is made on that stream. A message that groups of
// both kinds take is stored once in the shared stream and once in each group stream; its
// system_id differs between them (each stream numbers its messages), and the publisher is
// answered with the shared stream's, else the first group stream's. See RATIONALE.md, "Why
// can a group have its own stream?".

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

const (
	metaReplicas    = "tinybroker-replicas"     // a group stream's consumer: its copies
	metaGroupStream = "tinybroker-group-stream" // a group stream: the group's subscription_id
)

// groupStreamName is the stream of the group whose consumer is named consumer, if it has one.
func (e *Engine) groupStreamName(consumer string) string { return e.opts.Stream + "_G_" + consumer }

// place sets where g's messages are stored: in the engine's stream if replicas is 0 or the
// engine's own, else in a stream of its own with replicas copies.
func (e *Engine) place(g *group, replicas int) {
	replicas = e.normalReplicas(replicas)
	g.replicas = replicas
	if replicas == 0 {
		g.stream, g.subj, g.secret = e.opts.Stream, e.subjG, e.ids.stored
		return
	}
	g.stream, g.subj = e.groupStreamName(g.consumer), e.opts.Prefix+".q."+g.consumer+"."
	h := fnv.New64a()
	h.Write([]byte(g.consumer))
	g.secret = e.ids.stored ^ h.Sum64()
	for g.secret == e.ids.stored || g.secret == e.ids.fanout {
		g.secret++
	}
}

// normalReplicas is the group replicas a declaration's replicas stand for: 0 for the
// engine's stream.
func (e *Engine) normalReplicas(replicas int) int {
	if replicas == e.opts.Replicas {
		return 0
	}
	return replicas
}

// copiesOf is how many copies a group declared with replicas keeps.
func (e *Engine) copiesOf(replicas int) int {
	if replicas == 0 {
		return e.opts.Replicas
	}
	return replicas
}

// ownStream says whether g has a stream of its own.
func (g *group) ownStream() bool { return g.replicas != 0 }

// copies is how many copies of g's messages JetStream keeps.
func (g *group) copies() int { return g.e.copiesOf(g.replicas) }

// parseID returns the sequence, in g's stream, of a message of g's by its system_id.
func (g *group) parseID(id string) (uint64, error) {
	return grouping.ParseID(g.e.ids.ids, g.secret, id, "a message this broker stored for consumer group "+g.id, "")
}

// ensureGroupStream creates g's own stream, or opens the one there is.
func (e *Engine) ensureGroupStream(g *group) error {
	cfg := jetstream.StreamConfig{Name: g.stream, Subjects: []string{g.subj + ">"}, Retention: jetstream.InterestPolicy,
		Storage: jetstream.FileStorage, Replicas: g.replicas, Discard: jetstream.DiscardOld, Duplicates: e.opts.DedupeWindow,
		Metadata:    map[string]string{metaGroupStream: g.id},
		Description: "tinybroker: messages of consumer group " + g.name + " not yet acked"}
	if e.opts.MemoryStorage {
		cfg.Storage = jetstream.MemoryStorage
	}
	if e.opts.MaxBytes > 0 { // the engine's max_bytes bounds each of its streams, refusing what does not fit
		cfg.MaxBytes, cfg.Discard = e.opts.MaxBytes, jetstream.DiscardNew
	}
	s, err := e.openStream(cfg)
	if err != nil {
		return err
	}
	if got := s.CachedInfo().Config; got.Replicas != g.replicas || got.Metadata[metaGroupStream] != g.id {
		return fmt.Errorf("%w: JetStream stream %s exists with %d replicas for group %q; delete the group (tinybroker groups delete %s) to make it again with %d",
			broker.ErrGroupMismatch, g.stream, got.Replicas, got.Metadata[metaGroupStream], g.id, g.replicas)
	}
	return nil
}

// consumerByName reads the consumer named name: on the engine's stream, else on the group
// stream of that name. jetstream.ErrConsumerNotFound if neither has it.
func (e *Engine) consumerByName(ctx context.Context, name string) (jetstream.Consumer, error) {
	c, err := e.js.Consumer(ctx, e.opts.Stream, name)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c, err
	}
	c, err = e.js.Consumer(ctx, e.groupStreamName(name), name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, jetstream.ErrConsumerNotFound
	}
	return c, err
}

// groupStreams lists the engine's group streams.
func (e *Engine) groupStreams(ctx context.Context) ([]string, error) {
	return e.streamsNamed(ctx, e.opts.Stream+"_G_")
}

// streamsNamed lists the streams whose names start with prefix.
func (e *Engine) streamsNamed(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	l := e.js.StreamNames(ctx)
	for name := range l.Name() {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out, l.Err()
}

// deleteGroupStream deletes g's own stream, if it has one.
func (e *Engine) deleteGroupStream(ctx context.Context, g *group) error {
	if !g.ownStream() {
		return nil
	}
	if err := e.js.DeleteStream(ctx, g.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}
