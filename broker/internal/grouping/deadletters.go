package grouping

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
)

// ReplayHeaders returns a dead letter's headers as its replay carries them: without
// tb-dead-letter-*, with tb-replay-count one higher.
func ReplayHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if !strings.HasPrefix(k, deadletter.HeaderPrefix) {
			out[k] = v
		}
	}
	n, _ := strconv.Atoi(h[deadletter.HeaderReplayCount])
	out[deadletter.HeaderReplayCount] = strconv.Itoa(max(n, 0) + 1)
	return out
}

// UnknownDeadLetter refuses a replay of id, which group (subscription id) does not keep.
func UnknownDeadLetter(group, id string) error {
	return fmt.Errorf("%w %q: consumer group %q keeps no dead letter of this system_id (replayed or purged already?)", broker.ErrUnknownMessage, id, group)
}

// BadPageToken refuses a page token of a listing that the engine did not give.
func BadPageToken(token string) error {
	return fmt.Errorf("%w: page token %q is not one this broker gave; leave it empty to list from the start", broker.ErrInvalidSubscription, token)
}

// ListDeadLetters is Engine.DeadLetters over one group's store of dead letters, each at a
// position that grows with its age: up to limit letters (100 if limit is not positive),
// oldest first, after the position the page token names (from the start if it is empty),
// and the token of the rest ("" if there is no more). next returns the first letter after a
// position and its own, and ok false if there is none; it is called with growing positions.
func ListDeadLetters(token string, limit int, next func(after uint64) (dl broker.DeadLetter, pos uint64, ok bool, err error)) ([]broker.DeadLetter, string, error) {
	var after uint64
	if token != "" {
		var err error
		if after, err = strconv.ParseUint(token, 10, 64); err != nil {
			return nil, "", BadPageToken(token)
		}
	}
	if limit <= 0 {
		limit = 100
	}
	var out []broker.DeadLetter
	for {
		dl, pos, ok, err := next(after)
		switch {
		case err != nil:
			return nil, "", err
		case !ok:
			return out, "", nil
		case len(out) == limit:
			return out, strconv.FormatUint(after, 10), nil
		}
		out = append(out, dl)
		after = pos
	}
}

// Replay publishes a dead letter through pub (the engine) again as it was first published:
// its topic, payload, key and original headers (ReplayHeaders), through the plugins.
func Replay(pub interface {
	Publish(topic string, payload []byte, headers map[string]string) (broker.PublishResult, error)
	PublishBatch(frame []broker.Draft, res []broker.PublishResult, errs []error)
}, dl *broker.DeadLetter) (broker.PublishResult, error) {
	h := ReplayHeaders(dl.Headers)
	if dl.Key == "" {
		return pub.Publish(dl.Topic, dl.Payload, h)
	}
	d := [1]broker.Draft{{Topic: dl.Topic, Payload: dl.Payload, Headers: broker.MakeHeaders(h), Key: dl.Key}}
	var res [1]broker.PublishResult
	var errs [1]error
	pub.PublishBatch(d[:], res[:], errs[:])
	return res[0], errs[0]
}
