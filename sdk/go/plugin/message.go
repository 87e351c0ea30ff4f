package plugin

import (
	"errors"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// A Message is the message a hook is called for. It is valid only during that call: do not
// keep it, nor use it from another goroutine. The SDK reuses it for the next call of the same
// hook (allocating one per call would cost more than the rest of a simple hook call); using
// it between calls, or in a call of another hook, panics.
//
// Values are read from the broker when first asked for and then kept, so calling Topic or
// Payload again costs nothing. The setters change the message the broker will route (or
// redeliver) when the hook returns successfully — the broker throws the changes away if the
// call fails — and the Message reflects them at once: after SetTopic("a.b"), Topic returns
// "a.b".
type Message struct {
	gen     uint32
	have    uint8 // which of the fields below have been read (have* bits)
	topic   string
	payload []byte
	id      string
	key     string
	headers map[string]string // every header as the message entered the call, once read (haveHeaders)
	changes []headerChange    // the headers set or deleted in this call, one entry per name
	changed map[string]int    // the index in changes of each name, once there are more than maxLinear
}

const (
	haveTopic uint8 = 1 << iota
	havePayload
	haveID
	haveHeaders
	haveKey
)

type headerChange struct {
	key     string
	value   string
	deleted bool
}

// maxLinear is how many header changes are searched one by one. A plugin changes a header or
// two: a slice is cheaper than a map (a Go plugin hashes strings without the CPU's help), but
// not for a plugin that changes hundreds.
const maxLinear = 8

// findChange returns the index in m.changes of the change of the header key, or -1.
func (m *Message) findChange(key string) int {
	if len(m.changes) > maxLinear {
		if i, ok := m.changed[key]; ok {
			return i
		}
		return -1
	}
	for i := range m.changes {
		if m.changes[i].key == key {
			return i
		}
	}
	return -1
}

func (m *Message) check() {
	if call.hook == abi.HookNone || m.gen != call.gen {
		panic("plugin: a Message was used after the hook it was passed to had returned (a Message is valid only during its call)")
	}
}

// Topic returns the message's topic.
func (m *Message) Topic() string { return m.readOnce(haveTopic, &m.topic, hostMsgTopic, abi.InTopic) }

// Payload returns the message's payload. The slice is the Message's own: do not modify it
// (use SetPayload); it stays valid after the hook returns.
func (m *Message) Payload() []byte {
	m.check()
	if m.have&havePayload == 0 {
		if inbox != nil {
			b, _ := inField(abi.InPayload)
			m.payload = append([]byte(nil), b...)
		} else {
			m.payload, _ = readBytes(hostMsgPayload)
		}
		m.have |= havePayload
	}
	return m.payload
}

// ID returns the message's system_id, the broker's identifier for it. A message being
// published has none yet: in on_publish ID returns "".
func (m *Message) ID() string { return m.readOnce(haveID, &m.id, hostMsgID, abi.InID) }

// Key returns the message's ordering key, "" if it has none: the key the publisher gave
// (PublishRequest.key), or a plugin before this one set. Consumer groups with ordering or
// fair_by "key" group messages by it. It is read from the broker with a host call, the inbox
// having no room for it, once per call.
func (m *Message) Key() string {
	m.check()
	if m.have&haveKey == 0 {
		m.key, _ = readString(hostMsgKey)
		m.have |= haveKey
	}
	return m.key
}

// readOnce returns *v, the field of bit, reading it the first time it is asked for: from the
// inbox at off, or with r.
func (m *Message) readOnce(bit uint8, v *string, r reader, off int) string {
	m.check()
	if m.have&bit == 0 {
		if inbox != nil {
			*v, _ = inString(off)
		} else {
			*v, _ = readString(r)
		}
		m.have |= bit
	}
	return *v
}

// Header returns the value of the header key, and whether the message has it.
func (m *Message) Header(key string) (value string, ok bool) {
	// The common case, a header of the inbox's message that the hook has not changed, is
	// written out here: each function call costs a Go plugin more than the lookup. The
	// entries are read in place, the name compared without a call (sameBytes), and a value
	// read recently found among the interned ones, also without a call.
	b := inbox
	if m.gen != call.gen || call.hook == abi.HookNone || len(m.changes) != 0 || m.have&haveHeaders != 0 ||
		len(b) < abi.InHeaders || key == "" {
		return m.header(key)
	}
	base := unsafe.Pointer(unsafe.SliceData(b))
	for _, e := range inEntries(b) {
		if int(e[1]) != len(key) || uint64(e[0])+uint64(e[1]) > uint64(len(b)) ||
			!sameBytes(unsafe.Add(base, e[0]), unsafe.Pointer(unsafe.StringData(key)), uintptr(len(key))) {
			continue
		}
		if uint64(e[2])+uint64(e[3]) > uint64(len(b)) {
			return "", false
		}
		v := b[e[2] : e[2]+e[3]]
		for _, s := range interned { // intern's lookup, written out: a value read recently
			if len(s) == len(v) && len(v) > 0 &&
				sameBytes(unsafe.Pointer(unsafe.StringData(s)), unsafe.Pointer(unsafe.SliceData(v)), uintptr(len(v))) {
				return s, true
			}
		}
		return intern(v), true
	}
	return "", false
}

// header is Header for the cases it does not write out.
func (m *Message) header(key string) (value string, ok bool) {
	m.check()
	if i := m.findChange(key); i >= 0 {
		return m.changes[i].value, !m.changes[i].deleted
	}
	if m.have&haveHeaders != 0 {
		value, ok = m.headers[key]
		return value, ok
	}
	if inbox != nil {
		b, ok := inHeader(key)
		return intern(b), ok
	}
	// The common case, a value that fits the scratch buffer, without read's calls.
	if n := hostMsgHeader(key, bytesPtr(scratch), uint32(len(scratch))); n < 0 {
		return "", false
	} else if int(n) <= len(scratch) {
		return intern(scratch[:n]), true
	}
	return readString(func(buf unsafe.Pointer, capacity uint32) int32 {
		return hostMsgHeader(key, buf, capacity)
	})
}

// Headers returns every header of the message, in a map of the caller's own. It costs two
// calls to the broker per header the first time; to look up a few headers, Header is cheaper.
func (m *Message) Headers() map[string]string {
	m.check()
	if m.have&haveHeaders == 0 && inbox != nil {
		n := int(inU32(abi.InHeaderCount))
		if m.headers == nil {
			m.headers = make(map[string]string, n)
		}
		for i := range n {
			k, _ := inString(abi.InHeaders + abi.InEntry*i)
			m.headers[k], _ = inString(abi.InHeaders + abi.InEntry*i + 8)
		}
		m.have |= haveHeaders
	}
	if m.have&haveHeaders == 0 {
		n := hostMsgHeaderCount()
		if m.headers == nil {
			m.headers = make(map[string]string, max(n, 0))
		}
		for i := int32(0); i < n; i++ {
			name, ok := readString(func(buf unsafe.Pointer, capacity uint32) int32 {
				return hostMsgHeaderName(i, buf, capacity)
			})
			if !ok {
				break
			}
			m.headers[name], _ = readString(func(buf unsafe.Pointer, capacity uint32) int32 {
				return hostMsgHeader(name, buf, capacity)
			})
		}
		m.have |= haveHeaders
	}
	out := make(map[string]string, len(m.headers)+len(m.changes))
	for k, v := range m.headers {
		out[k] = v
	}
	for _, c := range m.changes {
		if c.deleted {
			delete(out, c.key)
		} else {
			out[c.key] = c.value
		}
	}
	return out
}

// SetTopic routes the message to topic instead. Only on_publish may change the topic (in
// other hooks SetTopic returns ErrNotAllowed); a topic that is not valid is ErrInvalid.
func (m *Message) SetTopic(topic string) error {
	m.check()
	if st := hostMsgSetTopic(topic); st != abi.StatusOK {
		return &StatusError{Op: "SetTopic " + strconv.Quote(topic), Status: st}
	}
	m.topic = topic
	m.have |= haveTopic
	return nil
}

// SetKey sets the message's ordering key; "" removes it. Only on_publish may change the key
// (in other hooks SetKey returns ErrNotAllowed); a key over 256 bytes (the broker's limit) is
// ErrTooLarge, one that is not UTF-8 or holds a control character ErrInvalid. A refused key
// leaves the message's as it was.
func (m *Message) SetKey(key string) error {
	m.check()
	if st := hostMsgSetKey(key); st != abi.StatusOK {
		return &StatusError{Op: "SetKey " + quoteShort(key), Status: st}
	}
	m.key = key
	m.have |= haveKey
	return nil
}

// quoteShort quotes s for an error message, cut to its first 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// SetPayload replaces the payload. Only on_publish may change the payload (in other hooks
// SetPayload returns ErrNotAllowed); a payload over the broker's max_message_bytes is
// ErrTooLarge. The broker copies p: the plugin may reuse it once the hook has returned, but
// Payload returns p itself until then.
func (m *Message) SetPayload(p []byte) error {
	m.check()
	if st := setPayload(p); st != abi.StatusOK {
		return &StatusError{Op: "SetPayload (" + strconv.Itoa(len(p)) + " bytes)", Status: st}
	}
	m.payload = p
	m.have |= havePayload
	return nil
}

// SetHeader adds or replaces the header key. on_publish and on_redeliver may change headers
// (on_ack may not: ErrNotAllowed); an empty key is ErrInvalid, a header over the broker's
// max_header_bytes ErrTooLarge.
func (m *Message) SetHeader(key, value string) error {
	m.check()
	var st int32
	if inbox != nil {
		st = inSetHeader(key, value)
	} else {
		st = hostMsgSetHeader(key, value)
	}
	if st != abi.StatusOK {
		return &StatusError{Op: "SetHeader " + strconv.Quote(key), Status: st}
	}
	if len(m.changes) == 0 && cap(m.changes) > 0 { // the first change of the call, written out
		m.changes = m.changes[:1]
		m.changes[0] = headerChange{key: key, value: value}
		return nil
	}
	m.change(headerChange{key: key, value: value})
	return nil
}

// DelHeader removes the header key; removing a header the message does not have is not an
// error. on_publish and on_redeliver may change headers (on_ack may not: ErrNotAllowed).
func (m *Message) DelHeader(key string) error {
	m.check()
	if st := delHeader(key); st != abi.StatusOK {
		return &StatusError{Op: "DelHeader " + strconv.Quote(key), Status: st}
	}
	m.change(headerChange{key: key, deleted: true})
	return nil
}

// setPayload and delHeader write through the inbox's write list, or the host.
func setPayload(p []byte) int32 {
	if inbox != nil {
		return inSetPayload(p)
	}
	return hostMsgSetPayload(bytesPtr(p), uint32(len(p)))
}

func delHeader(key string) int32 {
	if inbox != nil {
		return inDelHeader(key)
	}
	return hostMsgDelHeader(key)
}

func (m *Message) change(c headerChange) {
	if i := m.findChange(c.key); i >= 0 {
		m.changes[i] = c
		return
	}
	m.changes = append(m.changes, c)
	switch n := len(m.changes); {
	case n == maxLinear+1:
		if m.changed == nil {
			m.changed = make(map[string]int, 2*n)
		}
		for i := range m.changes {
			m.changed[m.changes[i].key] = i
		}
	case n > maxLinear+1:
		m.changed[c.key] = n - 1
	}
}

// An Event describes the delivery an on_ack or on_redeliver hook is called for. Like the
// Message, it is valid only during that call. Each method asks the broker, so a hook pays
// only for what it reads.
type Event struct {
	gen uint32
}

func (e Event) check() {
	if call.hook == abi.HookNone || e.gen != call.gen {
		panic("plugin: an Event was used after the hook it was passed to had returned")
	}
}

// Subscription returns the subscription_id of the consumer group.
func (e Event) Subscription() string {
	e.check()
	if inbox != nil {
		s, _ := inString(abi.InSub)
		return s
	}
	s, _ := readString(hostEventSubscription)
	return s
}

// Group returns the consumer group's name.
func (e Event) Group() string {
	e.check()
	if inbox != nil {
		s, _ := inString(abi.InGroup)
		return s
	}
	s, _ := readString(hostEventGroup)
	return s
}

// Attempt returns the delivery attempt that was acked (on_ack) or that failed
// (on_redeliver), counting from 1.
func (e Event) Attempt() int {
	e.check()
	if inbox != nil {
		return int(inU32(abi.InAttempt))
	}
	return int(hostEventAttempt())
}

// InFlight returns, in on_ack, how long the acked delivery was in flight: from its delivery
// to its ack.
func (e Event) InFlight() time.Duration {
	e.check()
	if inbox != nil {
		return time.Duration(uint64(inU32(abi.InInFlight)) | uint64(inU32(abi.InInFlight+4))<<32)
	}
	return time.Duration(hostEventInFlightNs())
}

// Reason returns, in on_redeliver, why the message is redelivered: "nack" (or the nack's own
// reason), "ack deadline exceeded" or "member left".
func (e Event) Reason() string {
	e.check()
	if inbox != nil {
		s, _ := inString(abi.InReason)
		return s
	}
	s, _ := readString(hostEventReason)
	return s
}

// Emit publishes a new message when the hook returns successfully, whatever its verdict,
// after the message the hook was called for. Emitted messages are routed directly: they do
// not pass through on_publish plugins. A call may emit at most the plugin's max_emits
// messages (then Emit returns ErrLimit); Init may not emit (ErrNotAllowed).
//
// Emit is not atomic: the broker accepts the message before its headers, one by one, so if a
// header is refused (ErrTooLarge) the message is still emitted, without that header and the
// ones after it. Emit refuses an empty header name before emitting anything.
func Emit(topic string, payload []byte, headers map[string]string) error {
	return emit(topic, "", payload, headers)
}

// EmitKeyed is Emit with an ordering key for the emitted message (see Message.Key). A key
// the broker would refuse (over 256 bytes: ErrTooLarge; not UTF-8, or with a control
// character: ErrInvalid) is refused before anything is emitted.
func EmitKeyed(topic, key string, payload []byte, headers map[string]string) error {
	if st := keyStatus(key); st != abi.StatusOK {
		return &StatusError{Op: "Emit " + strconv.Quote(topic) + ": key " + quoteShort(key), Status: st}
	}
	return emit(topic, key, payload, headers)
}

func emit(topic, key string, payload []byte, headers map[string]string) error {
	op := func() string { return "Emit " + strconv.Quote(topic) }
	if _, empty := headers[""]; empty {
		return &StatusError{Op: op() + `: header ""`, Status: abi.StatusInvalid}
	}
	h := hostEmit(topic, bytesPtr(payload), uint32(len(payload)))
	if h < 0 {
		return &StatusError{Op: op(), Status: h}
	}
	if key != "" {
		if st := hostEmitKey(h, key); st != abi.StatusOK {
			return &StatusError{Op: op() + ": key " + quoteShort(key), Status: st}
		}
	}
	for k, v := range headers {
		if st := hostEmitHeader(h, k, v); st != abi.StatusOK {
			return &StatusError{Op: op() + ": header " + strconv.Quote(k), Status: st}
		}
	}
	return nil
}

// keyStatus is the status the broker gives key as a message's key (broker.ValidateKey):
// at most abi.MaxKeyBytes of UTF-8 without control characters (U+0000–U+001F,
// U+007F–U+009F).
func keyStatus(key string) int32 {
	if len(key) > abi.MaxKeyBytes {
		return abi.StatusTooLarge
	}
	if !utf8.ValidString(key) {
		return abi.StatusInvalid
	}
	for _, r := range key {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return abi.StatusInvalid
		}
	}
	return abi.StatusOK
}

// Now returns the broker's wall-clock time. Use it rather than time.Now, which in a plugin
// reads the WebAssembly runtime's clock, which the broker need not set to the real time.
func Now() time.Time {
	return time.Unix(0, hostNow())
}

// The errors a write can fail with, by status (docs/ABI.md): test for them with errors.Is.
var (
	// ErrInvalid: the value is malformed, e.g. a topic that is not valid, an empty header name,
	// or a header name or value that is not UTF-8.
	ErrInvalid = errors.New("invalid value")
	// ErrTooLarge: over a broker limit (max_message_bytes, max_header_bytes, a key's 256 bytes).
	ErrTooLarge = errors.New("over a broker limit")
	// ErrNotAllowed: not available in this hook, e.g. changing the payload in on_redeliver.
	ErrNotAllowed = errors.New("not allowed in this hook")
	// ErrLimit: the plugin's max_emits for this call is used up.
	ErrLimit = errors.New("max_emits for this call used up, or the plugin's store is full")
	// ErrConflict: a compare-and-set (KVCompareAndSet) found another value than the old one.
	ErrConflict = errors.New("compare-and-set: the value changed")
)

// A StatusError is a write the broker refused. It wraps ErrInvalid, ErrTooLarge,
// ErrNotAllowed, ErrLimit or ErrConflict, according to its Status.
type StatusError struct {
	Op     string // what was refused, e.g. `SetTopic "orders..x"`
	Status int32  // the broker's status code, e.g. -1 for ErrInvalid
}

func (e *StatusError) Error() string {
	if err := e.Unwrap(); err != nil {
		return "tinybroker: " + e.Op + ": " + err.Error()
	}
	return "tinybroker: " + e.Op + ": status " + strconv.Itoa(int(e.Status))
}

// Unwrap returns the error for e.Status, or nil if the status is not one of ABI v1's.
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case abi.StatusInvalid:
		return ErrInvalid
	case abi.StatusTooLarge:
		return ErrTooLarge
	case abi.StatusNotAllowed:
		return ErrNotAllowed
	case abi.StatusLimit:
		return ErrLimit
	case abi.StatusConflict:
		return ErrConflict
	}
	return nil
}
