package auth

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// What a flood of wrong tokens may cost (RATIONALE.md, "Why can a flood of wrong tokens
// not starve a valid login?"). A token that is not in the cache of verified tokens costs a
// bcrypt comparison, tens of milliseconds of a core. The comparisons are made by at most
// GOMAXPROCS/2 callers at once (at least one); the others wait in a queue per user name
// (one queue for every name that is no user), served in turn, one comparison per queue:
// guesses for one name, however many, hold up another name's login by at most one
// comparison per name being guessed. Each queue holds at most maxWaitingPerName callers
// and all of them maxWaiting: past either, a caller is refused at once, without a
// comparison. After failuresBeforeBackoff wrong tokens in a row for a user, that user's next
// attempts are refused at once until a back-off has passed (backoffMin, doubling to
// backoffMax): a flood of guesses for a user's own name slows that user's first login,
// not anyone else's.
const (
	maxWaitingPerName     = 8
	maxWaiting            = 512
	failuresBeforeBackoff = 5
	backoffMin            = 100 * time.Millisecond
	backoffMax            = 5 * time.Second
	// unknownName is the queue of every name that is no user: unknown names are as many
	// as an attacker likes, and must not make as many queues.
	unknownName = "\x00unknown"
)

// verifier schedules bcrypt comparisons fairly across user names.
type verifier struct {
	slots int // comparisons at once

	mu      sync.Mutex
	running int
	waiting int
	queues  map[string]*nameQueue // the names with callers waiting, or in back-off
	ring    []string              // the names with callers waiting, in turn order
	next    int
	now     func() time.Time
	done    uint64 // comparisons made, for tests
}

func (v *verifier) comparisons() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.done
}

type nameQueue struct {
	tickets  []chan struct{}
	failures int       // wrong tokens in a row
	until    time.Time // refused at once before this, after failuresBeforeBackoff failures
	backoff  time.Duration
}

func newVerifier() *verifier {
	return &verifier{slots: max(1, runtime.GOMAXPROCS(0)/2), queues: make(map[string]*nameQueue), now: time.Now}
}

// refusal is why a login was refused without a comparison.
type refusal struct{ msg string }

func (r refusal) Error() string { return r.msg }

// acquire waits for a turn to compare a token of name (a user's, or unknownName), or says
// why there is none.
func (v *verifier) acquire(ctx context.Context, name string) error {
	v.mu.Lock()
	q := v.queues[name]
	if q != nil && v.now().Before(q.until) {
		wait := q.until.Sub(v.now())
		v.mu.Unlock()
		return refusal{fmt.Sprintf("too many wrong tokens for user %q in a row: logins for it are refused for %v; retry then", name, wait.Round(time.Millisecond))}
	}
	if v.running < v.slots && v.waiting == 0 {
		v.running++
		v.mu.Unlock()
		return nil
	}
	if q == nil {
		q = &nameQueue{}
		v.queues[name] = q
	}
	if len(q.tickets) >= maxWaitingPerName || v.waiting >= maxWaiting {
		v.mu.Unlock()
		return refusal{"too many logins are being verified at once (a flood of wrong tokens?); retry in a moment"}
	}
	t := make(chan struct{})
	if len(q.tickets) == 0 {
		v.ring = append(v.ring, name)
	}
	q.tickets = append(q.tickets, t)
	v.waiting++
	v.mu.Unlock()
	select {
	case <-t:
		return nil
	case <-ctx.Done():
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-t: // granted meanwhile: give the turn on
		v.releaseLocked()
	default:
		v.dropLocked(name, q, t)
	}
	return ctx.Err()
}

// release ends a comparison of name's token, which matched or not, and gives the turn to
// the next name that waits.
func (v *verifier) release(name string, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.done++
	q := v.queues[name]
	switch {
	case ok && q != nil:
		q.failures, q.backoff, q.until = 0, 0, time.Time{}
	case !ok && name != unknownName:
		if q == nil {
			q = &nameQueue{}
			v.queues[name] = q
		}
		if q.failures++; q.failures >= failuresBeforeBackoff {
			q.backoff = min(max(2*q.backoff, backoffMin), backoffMax)
			q.until = v.now().Add(q.backoff)
		}
	}
	v.releaseLocked()
	if q != nil && len(q.tickets) == 0 && q.failures == 0 {
		delete(v.queues, name)
	}
}

// releaseLocked frees a slot and hands it to the next name in turn. v.mu must be held.
func (v *verifier) releaseLocked() {
	v.running--
	for v.running < v.slots && len(v.ring) > 0 {
		v.next %= len(v.ring)
		name := v.ring[v.next]
		q := v.queues[name]
		t := q.tickets[0]
		q.tickets = q.tickets[1:]
		v.waiting--
		if len(q.tickets) == 0 {
			v.ring = append(v.ring[:v.next], v.ring[v.next+1:]...)
		} else {
			v.next++
		}
		v.running++
		close(t)
	}
}

// dropLocked removes ticket t, whose caller gave up, from name's queue. v.mu must be held.
func (v *verifier) dropLocked(name string, q *nameQueue, t chan struct{}) {
	for i, x := range q.tickets {
		if x == t {
			q.tickets = append(q.tickets[:i], q.tickets[i+1:]...)
			v.waiting--
			break
		}
	}
	if len(q.tickets) == 0 {
		for i, n := range v.ring {
			if n == name {
				v.ring = append(v.ring[:i], v.ring[i+1:]...)
				if v.next > i {
					v.next--
				}
				break
			}
		}
		if q.failures == 0 {
			delete(v.queues, name)
		}
	}
}
