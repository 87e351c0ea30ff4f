// Command audit is a tinybroker plugin that records every ack of a consumer group: for each
// ack it emits a message to audit.acks (or the topic of the config key "topic") whose payload
// is one line of key=value text,
//
//	group=resizers subscription=resizers id=5f3a9c01-7 topic=jobs.thumb.1 attempt=1 in_flight_ms=12
//
// and whose headers carry the same values (audit-group, audit-subscription, audit-id,
// audit-topic, audit-attempt, audit-in-flight-ms).
package main

import (
	"strconv"
	"time"

	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onack"
)

// topic is where the records go.
var topic = "audit.acks"

func init() {
	plugin.Init(func(cfg map[string]string) error {
		if t, ok := cfg["topic"]; ok {
			topic = t
		}
		return nil
	})
	onack.Handle(record)
}

func record(m *plugin.Message, ev plugin.Event) {
	r := ackRecord{
		group:        ev.Group(),
		subscription: ev.Subscription(),
		id:           m.ID(),
		topic:        m.Topic(),
		attempt:      ev.Attempt(),
		inFlight:     ev.InFlight(),
	}
	if err := plugin.Emit(topic, r.payload(), r.headers()); err != nil {
		plugin.Log(plugin.LevelWarn, "audit: "+err.Error())
	}
}

// An ackRecord is what audit records of one ack.
type ackRecord struct {
	group, subscription, id, topic string
	attempt                        int
	inFlight                       time.Duration
}

func (r ackRecord) inFlightMillis() string { return strconv.FormatInt(r.inFlight.Milliseconds(), 10) }

func (r ackRecord) payload() []byte {
	b := make([]byte, 0, 96+len(r.group)+len(r.subscription)+len(r.id)+len(r.topic))
	b = append(b, "group="...)
	b = append(b, r.group...)
	b = append(b, " subscription="...)
	b = append(b, r.subscription...)
	b = append(b, " id="...)
	b = append(b, r.id...)
	b = append(b, " topic="...)
	b = append(b, r.topic...)
	b = append(b, " attempt="...)
	b = strconv.AppendInt(b, int64(r.attempt), 10)
	b = append(b, " in_flight_ms="...)
	b = append(b, r.inFlightMillis()...)
	return b
}

func (r ackRecord) headers() map[string]string {
	return map[string]string{
		"audit-group":        r.group,
		"audit-subscription": r.subscription,
		"audit-id":           r.id,
		"audit-topic":        r.topic,
		"audit-attempt":      strconv.Itoa(r.attempt),
		"audit-in-flight-ms": r.inFlightMillis(),
	}
}

func main() {}
