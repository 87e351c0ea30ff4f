// Package msgid is the grammar of a publisher's message_id and the dedupe key it makes, for
// the server and the engines.
package msgid

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/tinybroker/tinybroker/broker"
)

// MaxBytes is the longest message_id a publisher may give: enough for any UUID or
// random token, and a bound on what each remembered id costs the dedupe table.
const MaxBytes = 128

// Check checks a publisher's message_id ("" is none, and valid). The error wraps
// broker.ErrInvalidMessage and names the limit.
func Check(id string) error {
	switch {
	case len(id) > MaxBytes:
		return fmt.Errorf("%w: message_id is %d bytes; the limit is %d bytes: use a random token (16 bytes, hex or base64) or a hash of a longer key", broker.ErrInvalidMessage, len(id), MaxBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: message_id is not valid UTF-8", broker.ErrInvalidMessage)
	}
	return nil
}

// Key is the dedupe key (Draft.ID) of message id published by user ("" when
// authentication is off: one anonymous namespace): the same id from two users are two keys,
// so that no publisher can suppress another's message by guessing its id. The user's name is
// length-prefixed, so that no user and id make another's key.
func Key(user, id string) string {
	if id == "" {
		return ""
	}
	return strconv.Itoa(len(user)) + ":" + user + id
}
