package broker

import (
	"fmt"
	"sync/atomic"
)

// Quota bounds what the consumer groups of one owner — a user of the server's
// authentication — may make an engine hold, on top of the engine's own limits: how many
// groups they create, and how many bytes those groups hold in all (queued, in flight,
// delayed, counted as each group counts its own max_queued_bytes). The server gives the same
// *Quota to every SubscribeOptions of one user; the engine charges a group to the quota of
// the member that created it, for the group's whole life, whoever joins it later. Members
// joining an existing group, and groups declared in the configuration, charge nothing.
//
// It is the one thing about users an engine must know: only the engine sees what a group
// holds. A nil *Quota bounds nothing and costs one nil check per message. Its methods are
// safe for concurrent use; a check and the charge that follows it are not one atomic step,
// so concurrent publishes may pass MaxBytes by what they carry between them.
type Quota struct {
	Owner     string // who it bounds, for errors: "user \"alice\""
	MaxBytes  int64  // bytes the owner's groups hold in all; 0: no bound
	MaxGroups int    // groups the owner created that exist now; 0: no bound

	bytes  atomic.Int64
	groups atomic.Int64
}

// Bytes returns what the owner's groups hold now; Groups how many groups the owner created
// that exist now.
func (q *Quota) Bytes() int64 { return q.bytes.Load() }
func (q *Quota) Groups() int  { return int(q.groups.Load()) }

// Over says why holding cost more bytes would pass the byte budget, or "".
func (q *Quota) Over(cost int64) string {
	if q == nil || q.MaxBytes <= 0 || q.bytes.Load()+cost <= q.MaxBytes {
		return ""
	}
	return fmt.Sprintf("the byte budget of %s's consumer groups, %d bytes (limits { max_queued_bytes } of the user; they hold %d)", q.Owner, q.MaxBytes, q.bytes.Load())
}

// AddBytes charges n bytes (negative: gives them back).
func (q *Quota) AddBytes(n int64) {
	if q != nil {
		q.bytes.Add(n)
	}
}

// TakeGroup counts one more group, or returns an ErrLimit error if the owner has MaxGroups.
func (q *Quota) TakeGroup() error {
	if q == nil {
		return nil
	}
	if n := q.groups.Add(1); q.MaxGroups > 0 && n > int64(q.MaxGroups) {
		q.groups.Add(-1)
		return fmt.Errorf("%w: %s created %d consumer groups, the most the user may have (limits { max_groups } of the user); delete one (its members gone) or join an existing group",
			ErrLimit, q.Owner, q.MaxGroups)
	}
	return nil
}

// ReleaseGroup counts one group fewer.
func (q *Quota) ReleaseGroup() {
	if q != nil {
		q.groups.Add(-1)
	}
}
