package broker

import (
	"fmt"
	"strconv"
	"strings"
)

// What every engine's dead-letter store says the same way.

// ReplayHeaders returns a dead letter's headers as its replay carries them: without
// tb-dead-letter-*, with tb-replay-count one higher.
func ReplayHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if !strings.HasPrefix(k, HeaderDeadLetterPrefix) {
			out[k] = v
		}
	}
	n, _ := strconv.Atoi(h[HeaderReplayCount])
	out[HeaderReplayCount] = strconv.Itoa(max(n, 0) + 1)
	return out
}

// UnknownDeadLetter refuses a replay of id, which group (subscription id) does not keep.
func UnknownDeadLetter(group, id string) error {
	return fmt.Errorf("%w %q: consumer group %q keeps no dead letter of this system_id (replayed or purged already?)", ErrUnknownMessage, id, group)
}

// BadPageToken refuses a page token of a listing that the engine did not give.
func BadPageToken(token string) error {
	return fmt.Errorf("%w: page token %q is not one this broker gave; leave it empty to list from the start", ErrInvalidSubscription, token)
}

// DeadLetterPage reads the page token and size of a dead-letter listing: the position after
// which to list (0 for an empty token) and the limit, 100 if limit is not positive.
func DeadLetterPage(token string, limit int) (after uint64, n int, err error) {
	if token != "" {
		if after, err = strconv.ParseUint(token, 10, 64); err != nil {
			return 0, 0, BadPageToken(token)
		}
	}
	if limit <= 0 {
		limit = 100
	}
	return after, limit, nil
}
