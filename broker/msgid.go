package broker

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxMessageIDBytes is the longest message_id a publisher may give: enough for any UUID or
// random token, and a bound on what each remembered id costs the dedupe table.
const MaxMessageIDBytes = 128

// CheckMessageID checks a publisher's message_id ("" is none, and valid). The error wraps
// ErrInvalidMessage and names the limit.
func CheckMessageID(id string) error {
	switch {
	case len(id) > MaxMessageIDBytes:
		return fmt.Errorf("%w: message_id is %d bytes; the limit is %d bytes: use a random token (16 bytes, hex or base64) or a hash of a longer key", ErrInvalidMessage, len(id), MaxMessageIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: message_id is not valid UTF-8", ErrInvalidMessage)
	}
	return nil
}

// MessageKey is the dedupe key (Draft.ID) of message id published by user ("" when
// authentication is off: one anonymous namespace): the same id from two users are two keys,
// so that no publisher can suppress another's message by guessing its id. The user's name is
// length-prefixed, so that no user and id make another's key.
func MessageKey(user, id string) string {
	if id == "" {
		return ""
	}
	return strconv.Itoa(len(user)) + ":" + user + id
}
