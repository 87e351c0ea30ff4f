package jetstream

// Message expiry (a message's ttl, a group's max_age) on the JetStream engine. A message's
// ttl is stored with it (the Tb-Ttl header, beside Tb-Time, when the engine accepted it), so
// every node, and a node restarted on the same store, reads the same deadline: Tb-Time plus
// the shorter of its ttl and the group's max_age. The engine looks at it where a message
// would go to a member: when JetStream hands it to a member's pull request (onMsg), when an
// ordered group's node takes it from JetStream or hands out what it parked (keyed.go), and
// when a member gives it back (a nack, a passed ack deadline, leaving: settle). An expired
// message is never handed out: it is dead-lettered with reason "expired", or with
// on_expire "drop" ended in JetStream (+TERM) and counted. A message that expires while no
// member pulls stays in JetStream until a member next pulls it (counted as queued until
// then): NATS's own per-message TTL would delete it unseen, with no dead letter, and for
// every group of the stream at once. See RATIONALE.md.

import (
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// expiresAt returns when m expires in a group with limits l, in Unix nanoseconds (0: never).
func expiresAt(l broker.GroupLimits, m *broker.Message) int64 {
	ttl := m.TTL
	if l.MaxAge > 0 && (ttl <= 0 || l.MaxAge < ttl) {
		ttl = l.MaxAge
	}
	if ttl <= 0 {
		return 0
	}
	return m.PublishedAt + int64(ttl)
}

// expired says whether m, in a group with limits l, has expired at now.
func expired(l broker.GroupLimits, m *broker.Message, now time.Time) bool {
	at := expiresAt(l, m)
	return at != 0 && at <= now.UnixNano()
}
