package grouping

import (
	"fmt"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/sysid"
)

// ParseID returns the sequence number of system_id id, which ids sealed with secret. An id
// of another length, of another key or of another secret is refused with ErrUnknownMessage;
// whose says whose ids the engine reads ("this broker process"), and other, when not empty,
// why an id may not be one of them ("the broker may have restarted").
func ParseID(ids sysid.Codec, secret uint64, id, whose, other string) (uint64, error) {
	if other != "" {
		other = "; " + other
	}
	if len(id) != sysid.Len {
		return 0, fmt.Errorf("%w %q: not a system_id of %s (a system_id is the %d characters the broker sent with the message%s)", broker.ErrUnknownMessage, truncate(id, 64), whose, sysid.Len, other)
	}
	seq, s, ok := ids.Parse(id)
	if !ok {
		return 0, fmt.Errorf("%w %q: malformed system_id", broker.ErrUnknownMessage, id)
	}
	if s != secret || seq == 0 {
		if other != "" {
			other = " (" + other[2:] + ")"
		}
		return 0, fmt.Errorf("%w %q: not a system_id of %s%s", broker.ErrUnknownMessage, id, whose, other)
	}
	return seq, nil
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
