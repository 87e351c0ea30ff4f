package broker

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxKeyBytes is the longest message key accepted, in bytes (SQS's MessageGroupId allows
// 128 characters, Pub/Sub's ordering key 1,024 bytes).
const maxKeyBytes = 256

// ValidateKey reports whether k may be a message's ordering and fairness key: at most
// maxKeyBytes of valid UTF-8 without control characters (it travels in a header on the
// JetStream engine and in log lines). The empty key is valid: the message has none.
func ValidateKey(k string) error {
	if len(k) > maxKeyBytes {
		return fmt.Errorf("%w: key is %d bytes long; the limit is %d: use an id (a customer, an order, a tenant), not the data", ErrInvalidMessage, len(k), maxKeyBytes)
	}
	for i := 0; i < len(k); i++ { // printable ASCII, the usual key, in one pass
		if c := k[i]; c < 0x20 || c >= 0x7f {
			return validateKeyText(k)
		}
	}
	return nil
}

// validateKeyText is ValidateKey's check of a key that is not all printable ASCII.
func validateKeyText(k string) error {
	if !utf8.ValidString(k) {
		return fmt.Errorf("%w: key is not valid UTF-8; keys are printable text", ErrInvalidMessage)
	}
	for i, r := range k {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: key %q contains the control character %U at byte %d; keys are printable text", ErrInvalidMessage, k, r, i)
		}
	}
	return nil
}

// Ordering is how a consumer group orders its deliveries (OpenSubscription.ordering).
type Ordering uint8

const (
	// OrderingNone delivers in best-effort FIFO order, any number of messages of a key at
	// once (the zero value: a member that leaves it unset takes the group's).
	OrderingNone Ordering = iota
	// OrderingKey delivers a message only once the previous message of its key was acked,
	// dead-lettered or dropped: one at a time per key, in publish order, keys in parallel.
	// Messages without a key are not ordered.
	OrderingKey
	// OrderingGroup makes the whole group one key: one message in flight at a time, in
	// publish order, whatever their keys (a single active consumer).
	OrderingGroup
)

var orderingNames = [...]string{OrderingNone: "", OrderingKey: "key", OrderingGroup: "group"}

// String returns the name the configuration and the admin API use: "", "key" or "group".
func (o Ordering) String() string {
	if int(o) < len(orderingNames) {
		return orderingNames[o]
	}
	return fmt.Sprintf("Ordering(%d)", o)
}

// ParseOrdering reads an Ordering by name ("none" is OrderingNone too).
func ParseOrdering(s string) (Ordering, error) {
	switch s {
	case "", "none":
		return OrderingNone, nil
	case "key":
		return OrderingKey, nil
	case "group":
		return OrderingGroup, nil
	}
	return 0, fmt.Errorf("%w: ordering %q: want \"key\" (one message of a key at a time, keys in parallel), \"group\" (one message at a time: a single active consumer) or \"none\"", ErrInvalidSubscription, s)
}

// Dispatch is how a consumer group picks the next message for a member with room. Its zero
// value is plain FIFO.
type Dispatch struct {
	Ordering Ordering
	// FairBy, if not "", makes delivery take turns across tenants: "key" (the message
	// key) or "header:<name>" (that header's value; a message without it is tenant "").
	FairBy string
	// MaxPriority, if not 0, makes the group deliver by message priority: of the messages
	// that may go now, one of the highest priority first, levels 0 to MaxPriority (at most
	// MaxPriority); a message of a higher priority counts as MaxPriority. 0: the group
	// ignores priorities (FIFO), as a RabbitMQ queue without x-max-priority does.
	MaxPriority uint8
}

// maxPriority is the highest message and member priority (levels 0 to 9, higher first:
// AMQP's and JMS's ten levels; NATS's prioritized pull requests have ten too). The engines
// and the gate use grouping.MaxPriority, which a test holds to it.
const maxPriority = 9

// Level returns the level a message of priority p is queued at under d: p, at most
// d.MaxPriority; 0 in a group without priorities.
func (d Dispatch) Level(p uint8) uint8 { return min(p, d.MaxPriority) }

// FairKeyHeader returns the header FairBy names, and whether it names one.
func (d Dispatch) FairKeyHeader() (string, bool) {
	return strings.CutPrefix(d.FairBy, "header:")
}

// Keyed reports whether the group tracks keys or tenants at all.
func (d Dispatch) Keyed() bool { return d.Ordering != OrderingNone || d.FairBy != "" }

// Check reports whether d is valid.
func (d Dispatch) Check() error {
	if d.Ordering > OrderingGroup {
		return fmt.Errorf("%w: ordering %d is unknown: want 0 (none), 1 (key) or 2 (group)", ErrInvalidSubscription, d.Ordering)
	}
	if d.MaxPriority > maxPriority {
		return fmt.Errorf("%w: max_priority %d: at most %d (levels 0 to %d, higher first); 0 leaves priorities off", ErrInvalidSubscription, d.MaxPriority, maxPriority, maxPriority)
	}
	if d.Ordering == OrderingGroup && d.FairBy != "" {
		return fmt.Errorf("%w: fair_by %q with ordering \"group\": a group ordered as one key delivers its messages one at a time in publish order, so there are no turns to take; drop one of them", ErrInvalidSubscription, d.FairBy)
	}
	if d.FairBy == "" || d.FairBy == "key" {
		return nil
	}
	h, ok := d.FairKeyHeader()
	if !ok || h == "" {
		return fmt.Errorf("%w: fair_by %q: want \"key\" (take turns across message keys) or \"header:<name>\" (across that header's values), or leave it empty", ErrInvalidSubscription, d.FairBy)
	}
	if err := (Header{Key: h}).Check(); err != nil {
		return fmt.Errorf("%w: fair_by %q: %v", ErrInvalidSubscription, d.FairBy, err)
	}
	return nil
}

// OrderKey returns the key m is ordered by under d, and whether it is ordered at all.
func (d Dispatch) OrderKey(key string) (string, bool) {
	switch d.Ordering {
	case OrderingGroup:
		return "", true
	case OrderingKey:
		return key, key != ""
	}
	return "", false
}

// Tenant returns the tenant a message of key and headers h counts for under d's fairness.
func (d Dispatch) Tenant(key string, h Headers) string {
	if d.FairBy == "key" {
		return key
	}
	if name, ok := d.FairKeyHeader(); ok {
		v, _ := h.Get(name)
		return v
	}
	return ""
}
