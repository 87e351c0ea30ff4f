package ops

import (
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
	// DeleteGroup removes a group; its members are ended with broker.ErrGroupDeleted.
	DeleteGroup(id string) error
	// PauseGroup pauses (paused true) or resumes a group: see broker.Admin.PauseGroup.
	PauseGroup(id string, paused bool) error
	// DeadLetters lists up to limit dead letters of a group, oldest first.
	DeadLetters(group string, limit int) ([]DeadLetter, error)
	// Replay publishes the dead letters ids of a group again to their original topics, or
	// all of them with ids empty, removes them from the store and says how many it replayed.
	Replay(group string, ids []string) (int, error)
}

// DeadLetter is a message a group gave up on.
type DeadLetter struct {
	ID       string            `json:"id"`    // the dead letter's id in the store
	Topic    string            `json:"topic"` // the message's original topic
	Code     string            `json:"code"`  // which path dead-lettered it (a deadletter.Code*)
	Reason   string            `json:"reason"`
	Attempts int               `json:"attempts"`
	At       time.Time         `json:"at"` // when it was dead-lettered
	Headers  map[string]string `json:"headers,omitempty"`
	Payload  []byte            `json:"payload,omitempty"` // the first bytes, for a preview
	Size     int               `json:"size"`              // the whole payload's size
}

// previewBytes is how much of a dead letter's payload the dashboard shows.
const previewBytes = 256

// EngineAdmin is the Admin of an engine: groups are described, purged and deleted, and dead
// letters listed and replayed, through the engine's broker.Admin.
type EngineAdmin struct{ Engine broker.Admin }

func (a EngineAdmin) Group(id string) (broker.GroupStats, error) {
	g, err := a.Engine.Group(id)
	return g.GroupStats, err
}
func (a EngineAdmin) PurgeGroup(id string) (int, error) { return a.Engine.PurgeGroup(id) }
func (a EngineAdmin) DeleteGroup(id string) error       { return a.Engine.DeleteGroup(id) }
func (a EngineAdmin) PauseGroup(id string, paused bool) error {
	return a.Engine.PauseGroup(id, paused)
}

// DeadLetters lists the first limit dead letters the group keeps.
func (a EngineAdmin) DeadLetters(group string, limit int) ([]DeadLetter, error) {
	dls, _, err := a.Engine.DeadLetters(group, "", limit)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(dls))
	for i, d := range dls {
		out[i] = DeadLetter{ID: d.ID, Topic: d.Topic, Code: d.Code, Reason: d.Reason, Attempts: d.Attempts,
			At: time.Unix(0, d.DeadAt), Headers: d.Headers, Payload: d.Payload[:min(len(d.Payload), previewBytes)], Size: len(d.Payload)}
	}
	return out, nil
}

// Replay publishes the dead letters ids again on their topics and returns how many were.
func (a EngineAdmin) Replay(group string, ids []string) (int, error) {
	res, err := a.Engine.ReplayDeadLetters(group, ids)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range res {
		if r.Err == nil {
			n++
		} else if len(ids) == 1 {
			return 0, r.Err
		}
	}
	return n, nil
}
