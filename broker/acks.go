package broker

import "time"

// GroupMember is a consumer group's side of one of its members, as an engine keeps it: it
// reads the system_ids of the group's messages, and settles deliveries by sequence number,
// each call returning how many of seqs it did not find (see Acks).
type GroupMember interface {
	ParseID(systemID string) (uint64, error)
	AckSeqs(seqs []uint64) (unknown int)
	NackSeqs(seqs []uint64, delay time.Duration, reason string) (unknown int)
	TouchSeqs(seqs []uint64) (unknown int)
}

// Acks is a Subscription's Ack, Nack and Touch, which both engines' subscriptions embed.
// Ids that the member does not read (malformed, or not this engine's) are skipped, and so
// are those its group does not hold (unknown, already acked, or redelivered to another
// member): a late or duplicate ack never ends a stream. Each returns how many ids were
// skipped. The zero Acks is a fanout subscription's, which takes no acks: every id is
// ignored and 0 returned.
type Acks struct {
	member GroupMember
}

// MemberAcks returns the Acks of a group member's subscription.
func MemberAcks(m GroupMember) Acks { return Acks{member: m} }

// Ack settles deliveries by system_id: the member's, or another member's of its group (a
// message redelivered elsewhere that this member processed after all).
func (a Acks) Ack(ids []string) (skipped int) {
	if a.member == nil {
		return 0
	}
	seqs, bad := a.parse(ids)
	return a.member.AckSeqs(seqs) + bad
}

// Nack gives the member's deliveries back to the group, to be redelivered after delay (at
// once if zero).
func (a Acks) Nack(ids []string, delay time.Duration, reason string) (skipped int) {
	if a.member == nil {
		return 0
	}
	seqs, bad := a.parse(ids)
	return a.member.NackSeqs(seqs, delay, reason) + bad
}

// Touch restarts the ack deadline of the member's deliveries: a full AckDeadline from now.
func (a Acks) Touch(ids []string) (skipped int) {
	if a.member == nil {
		return 0
	}
	seqs, bad := a.parse(ids)
	return a.member.TouchSeqs(seqs) + bad
}

// parse returns the sequence numbers of the ids the member reads, and how many it does not.
func (a Acks) parse(ids []string) (seqs []uint64, bad int) {
	seqs = make([]uint64, 0, len(ids))
	for _, id := range ids {
		if seq, err := a.member.ParseID(id); err == nil {
			seqs = append(seqs, seq)
		} else {
			bad++
		}
	}
	return seqs, bad
}
