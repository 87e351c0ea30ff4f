package ops

import (
	"errors"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// Admin is what the dashboard's group and dead-letter panels need from the broker. The
// HTTP API speaks only to it, so that the admin API (issue 12's admin part: a dead-letter
// store with list, replay and purge) plugs in without changing the dashboard.
type Admin interface {
	// Group describes one consumer group (broker.ErrUnknownSubscription if none).
	Group(id string) (broker.GroupStats, error)
	// PurgeGroup drops what a group holds for its members and says how many it dropped.
	PurgeGroup(id string) (int, error)
	// DeleteGroup removes a group without members (broker.ErrGroupInUse otherwise).
	DeleteGroup(id string) error
	// DeadLetters lists up to limit dead letters of a group, oldest first
	// (ErrNoDeadLetters if the broker keeps none).
	DeadLetters(group string, limit int) ([]DeadLetter, error)
	// Replay publishes the dead letters ids of a group again to their original topics, or
	// all of them with ids empty, removes them from the store and says how many it replayed.
	Replay(group string, ids []string) (int, error)
}

// DeadLetter is a message a group gave up on.
type DeadLetter struct {
	ID       string            `json:"id"`    // the dead letter's id in the store
	Topic    string            `json:"topic"` // the message's original topic
	Reason   string            `json:"reason"`
	Attempts int               `json:"attempts"`
	At       time.Time         `json:"at"` // when it was dead-lettered
	Headers  map[string]string `json:"headers,omitempty"`
	Payload  []byte            `json:"payload,omitempty"` // the first bytes, for a preview
	Size     int               `json:"size"`              // the whole payload's size
}

// ErrNoDeadLetters: the broker keeps no dead letters to list or replay; they are published
// to the group's dead-letter topic (dlq.<subscription_id> by default), where a consumer of
// that topic receives them.
var ErrNoDeadLetters = errors.New("this broker keeps no dead-letter store yet: dead letters are published to each group's dead_letter_topic (dlq.<subscription_id> by default); subscribe to it to see them")

// EngineAdmin is the Admin of an engine without a dead-letter store: groups are described,
// purged and deleted through broker.Engine, and DeadLetters and Replay answer
// ErrNoDeadLetters.
//
// TODO(issue 12, admin): the dead-letter store is on branch admin, not yet on main. Once it
// lands, DeadLetters is Engine.DeadLetters(group, "", limit) with each broker.DeadLetter
// mapped field for field (DeadAt → At, Size = len(Payload), Payload cut to a preview), and
// Replay is Engine.ReplayDeadLetters(group, ids) counting the results without Err (an
// unknown id: broker.ErrUnknownMessage → 404 in adminError). The dashboard and its browser
// test need no change: the test's captureAdmin stands in for the store meanwhile.
type EngineAdmin struct{ Engine broker.Engine }

func (a EngineAdmin) Group(id string) (broker.GroupStats, error) { return a.Engine.Group(id) }
func (a EngineAdmin) PurgeGroup(id string) (int, error)          { return a.Engine.PurgeGroup(id) }
func (a EngineAdmin) DeleteGroup(id string) error                { return a.Engine.DeleteGroup(id) }
func (a EngineAdmin) DeadLetters(string, int) ([]DeadLetter, error) {
	return nil, ErrNoDeadLetters
}
func (a EngineAdmin) Replay(string, []string) (int, error) { return 0, ErrNoDeadLetters }
