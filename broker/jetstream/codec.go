package jetstream

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/internal/sysid"
)

// Headers the engine adds to a NATS message besides the tinybroker message's own. They start
// with "Tb-" (capitalised): a message header of the client that does too is carried inside
// hdrJSON instead, so the two never mix.
const (
	hdrTime = "Tb-Time"     // when the engine accepted it, Unix nanoseconds
	hdrFrom = "Tb-From"     // the engine that announced a group's change (its self id)
	hdrSkip = "Tb-Skip"     // the consumers of the groups that refused a stored message (full), comma-separated
	hdrJSON = "Tb-Hx"       // every header of the message, as JSON, when one cannot be a NATS header
	hdrKey  = "Tb-Key"      // the message's key (broker.Message.Key), when it has one
	hdrKeyQ = "Tb-Keyq"     // the key, Go-quoted, when it cannot be a NATS header's value (natsValue)
	hdrTTL  = "Tb-Ttl"      // the message's ttl (broker.Message.TTL), nanoseconds, when it has one
	hdrPrio = "Tb-Priority" // the message's priority (broker.Message.Priority), when not 0
)

// setTTL adds a message's ttl to its NATS headers h: stored with the message (and its
// Tb-Time), it expires the message on every node and after a restart.
func setTTL(h nats.Header, ttl time.Duration) {
	if ttl > 0 {
		h[hdrTTL] = []string{strconv.FormatInt(int64(ttl), 10)}
	}
}

// ttlOf returns the ttl setTTL put in a NATS message's headers (0: none).
func ttlOf(nh nats.Header) time.Duration {
	if v := nh[hdrTTL]; len(v) > 0 {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n > 0 {
			return time.Duration(n)
		}
	}
	return 0
}

// setPriority adds a message's priority to its NATS headers h: stored with the message, so
// that every node (and a restarted one) queues it at its level and delivers it with it.
// Priority 0, the default, is not written: messages of groups without priorities cost
// nothing more.
func setPriority(h nats.Header, p uint8) {
	if p > 0 {
		h[hdrPrio] = []string{strconv.Itoa(int(p))}
	}
}

// priorityOf returns the priority setPriority put in a NATS message's headers (0: none).
// One past grouping.MaxPriority, which the gate refuses, could only come from another
// writer of the stream: it counts as the highest.
func priorityOf(nh nats.Header) uint8 {
	if v := nh[hdrPrio]; len(v) > 0 {
		if n, err := strconv.Atoi(v[0]); err == nil && n > 0 {
			return uint8(min(n, grouping.MaxPriority))
		}
	}
	return 0
}

// setKey adds a message's key to its NATS headers h.
func setKey(h nats.Header, key string) {
	switch {
	case key == "":
	case natsValue(key):
		h[hdrKey] = []string{key}
	default:
		h[hdrKeyQ] = []string{strconv.Quote(key)}
	}
}

// keyOf returns the key setKey put in a NATS message's headers.
func keyOf(nh nats.Header) string {
	if k := nh[hdrKey]; len(k) > 0 {
		return k[0]
	}
	if k := nh[hdrKeyQ]; len(k) > 0 {
		key, _ := strconv.Unquote(k[0])
		return key
	}
	return ""
}

// encodeHeaders turns a message's headers into NATS headers. Every header the broker accepts
// (broker.CheckHeader: any UTF-8) must come back unchanged from decodeHeaders, through
// nats.go and JetStream, and none may make them act on the message. When every header is a
// plain NATS header (natsKey, natsValue) they go as NATS headers, which other NATS tools
// read; otherwise all of them go as one JSON header (hdrJSON), which carries any string.
// RATIONALE.md, "Why may a header be any UTF-8?".
func encodeHeaders(h broker.Headers, publishedAt int64) nats.Header {
	out := make(nats.Header, len(h)+2)
	plain := true
	for _, x := range h {
		if !natsKey(x.Key) || !natsValue(x.Value) {
			plain = false
			break
		}
	}
	if plain {
		for _, x := range h {
			out[x.Key] = []string{x.Value}
		}
	} else {
		j, _ := json.Marshal(h.Map()) // a map of strings always marshals
		out[hdrJSON] = []string{string(j)}
	}
	out[hdrTime] = []string{strconv.FormatInt(publishedAt, 10)}
	return out
}

// natsKeyChars are the bytes of a NATS header name as nats.go sends it (an HTTP token:
// printable ASCII without separators); nats.go refuses to publish a message with any other.
var natsKeyChars = func() (t [256]bool) {
	for c := byte(33); c <= 126; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, rune(c))
	}
	return t
}()

// natsKey says whether a tinybroker header name can be a plain NATS header: nats.go sends it
// (natsKeyChars), it is not the engine's (Tb-), nor one JetStream acts on (Nats-: Nats-Msg-Id
// would deduplicate messages, Nats-Rollup purge others, Nats-Expected-* refuse them), nor
// one the engine reads as JetStream's own answer (Status, Description).
func natsKey(k string) bool {
	if k == "" || strings.HasPrefix(k, "Tb-") || hasPrefixFold(k, "nats-") || strings.EqualFold(k, "Status") || strings.EqualFold(k, "Description") {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !natsKeyChars[k[i]] {
			return false
		}
	}
	return true
}

// natsValue says whether a header value survives a NATS header exactly: nats.go trims spaces
// and tabs at its ends and turns CR and LF into spaces; other control characters (NUL
// included) are sent as JSON too, for other NATS tools' sake.
func natsValue(v string) bool {
	if v != strings.TrimSpace(v) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// decodeHeaders returns a NATS message's tinybroker headers and when it was published.
func decodeHeaders(nh nats.Header) (h broker.Headers, publishedAt int64, hb int) {
	if t := nh[hdrTime]; len(t) > 0 {
		publishedAt, _ = strconv.ParseInt(t[0], 10, 64)
	}
	if j := nh[hdrJSON]; len(j) > 0 {
		var m map[string]string
		_ = json.Unmarshal([]byte(j[0]), &m)
		h = broker.MakeHeaders(m)
	} else {
		for k, vs := range nh {
			// The engine's own, and JetStream's (natsKey never sends a header of the
			// message as either).
			if strings.HasPrefix(k, "Tb-") || strings.HasPrefix(k, "Nats-") || len(vs) == 0 {
				continue
			}
			h = append(h, broker.Header{Key: k, Value: vs[0]})
		}
		h = h.Sorted()
	}
	for _, x := range h {
		hb += len(x.Key) + len(x.Value)
	}
	return h, publishedAt, hb
}

// idCodec turns stream sequence numbers into system_ids and back, as the memory engine
// does (see RATIONALE.md, "Why unguessable system_ids?"): the sequence number and a secret,
// encrypted as one AES-128 block. Its key and secrets are the cluster's, kept in the
// stream's metadata, so that every node reads the ids of every other and of earlier runs.
// A message that was not stored (fanout only) gets a random number under another secret:
// its id names it, and cannot be acked. A delayed message is answered with its schedule's
// sequence number in the delayed stream under a third (delay.go).
type idCodec struct {
	ids                     sysid.Codec
	stored, fanout, delayed uint64
}

const idLen = sysid.Len

// newIDSecret returns a fresh key and secrets, encoded for the stream's metadata.
func newIDSecret() string {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

func newIDCodec(secret string) (idCodec, error) {
	raw, err := base64.RawURLEncoding.DecodeString(secret)
	if err != nil || len(raw) != 32 {
		return idCodec{}, fmt.Errorf("the stream's %s metadata is not a key of this engine", metaIDKey)
	}
	ids, err := sysid.New(raw[:16])
	if err != nil {
		return idCodec{}, err
	}
	c := idCodec{ids: ids, stored: binary.LittleEndian.Uint64(raw[16:24]), fanout: binary.LittleEndian.Uint64(raw[24:32])}
	if c.stored == c.fanout {
		c.fanout++
	}
	// Kept in the stream's metadata before delayed messages came, the key has no room for
	// a third secret: one made of the other two, unlike either.
	c.delayed = bits.RotateLeft64(c.stored, 32) ^ c.fanout
	for c.delayed == c.stored || c.delayed == c.fanout {
		c.delayed++
	}
	return c, nil
}

func (c idCodec) format(seq, secret uint64) string { return c.ids.Format(seq, secret) }

// parse returns the stream sequence number of a stored message's system_id.
func (c idCodec) parse(id string) (uint64, error) {
	return grouping.ParseID(c.ids, c.stored, id, "a message this broker stored for a consumer group", "")
}

// encodeName turns a subscription_id (letters, digits, '-', '_', '.') into a JetStream
// consumer name, which may not contain '.': '_' becomes "__" and '.' "_d", so that two ids
// never share a name.
func encodeName(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		switch c := id[i]; c {
		case '_':
			b.WriteString("__")
		case '.':
			b.WriteString("_d")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ackInfo is what an ack subject of JetStream ($JS.ACK...) says of a delivery.
type ackInfo struct {
	stream, consumer string
	delivered        uint32 // how many times the message was delivered, this one included
	sseq, dseq       uint64
}

// parseAck reads an ack subject: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>,
// or the newer form with a domain and an account hash after $JS.ACK.
func parseAck(reply string) (ackInfo, bool) {
	// The tokens, without strings.Split's allocation (one per delivery).
	var buf [12]string
	tok := buf[:0]
	for rest := reply; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			tok = append(tok, rest)
			break
		}
		if len(tok) == len(buf)-1 {
			return ackInfo{}, false
		}
		tok = append(tok, rest[:i])
		rest = rest[i+1:]
	}
	var off int
	switch {
	case len(tok) == 9:
		off = 2
	case len(tok) >= 11:
		off = 4
	default:
		return ackInfo{}, false
	}
	if tok[0] != "$JS" || tok[1] != "ACK" {
		return ackInfo{}, false
	}
	dc, err1 := strconv.ParseUint(tok[off+2], 10, 32)
	sseq, err2 := strconv.ParseUint(tok[off+3], 10, 64)
	dseq, err3 := strconv.ParseUint(tok[off+4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return ackInfo{}, false
	}
	return ackInfo{stream: tok[off], consumer: tok[off+1], delivered: uint32(dc), sseq: sseq, dseq: dseq}, true
}

// ackSubject builds the ack subject of stream sequence sseq of a consumer, for an ack that
// arrives on a node that does not hold the delivery (JetStream finds it by sseq; a nak also
// needs a consumer sequence in range).
func ackSubject(stream, consumer string, sseq, dseq uint64) string {
	return fmt.Sprintf("$JS.ACK.%s.%s.1.%d.%d.%d.0", stream, consumer, sseq, dseq, time.Now().UnixNano())
}

// A fanout message goes by core NATS as an envelope in the NATS payload, not with NATS
// headers: headers cost nats.go a text encoding, a parse into a map and several allocations
// per message and per receiver, where the envelope is one buffer read in place. It is only
// ever read by tinybroker nodes (stored messages keep NATS headers, which JetStream keeps):
//
//	'T' 1 | uvarint seq | varint published_at | uvarint len, system_id |
//	uvarint headers | (uvarint len, key, uvarint len, value)... | payload
//
// Version 2, for a message with a key (broker.Message.Key), adds it after the system_id,
// as uvarint len, key. Version 3, for a message with a priority (broker.Message.Priority),
// adds the key (of length 0 if none) and a byte, the priority, after it. A message with
// neither keeps version 1, which nodes of an older version read: in a rolling upgrade only
// keyed or prioritized fanout messages need every node upgraded.
const (
	envMagic           = 'T'
	envVersion         = 1
	envVersionKeyed    = 2
	envVersionPriority = 3
)

// appendEnvelope encodes a fanout message into dst.
func appendEnvelope(dst []byte, seq uint64, publishedAt int64, id, key string, prio uint8, headers broker.Headers, payload []byte) []byte {
	version := byte(envVersion)
	switch {
	case prio > 0:
		version = envVersionPriority
	case key != "":
		version = envVersionKeyed
	}
	dst = append(dst, envMagic, version)
	dst = binary.AppendUvarint(dst, seq)
	dst = binary.AppendVarint(dst, publishedAt)
	dst = binary.AppendUvarint(dst, uint64(len(id)))
	dst = append(dst, id...)
	if version != envVersion {
		dst = binary.AppendUvarint(dst, uint64(len(key)))
		dst = append(dst, key...)
	}
	if version == envVersionPriority {
		dst = append(dst, prio)
	}
	dst = binary.AppendUvarint(dst, uint64(len(headers)))
	for _, x := range headers {
		dst = binary.AppendUvarint(dst, uint64(len(x.Key)))
		dst = append(dst, x.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(x.Value)))
		dst = append(dst, x.Value...)
	}
	return append(dst, payload...)
}

// envelopeSize bounds what appendEnvelope adds to a payload, for sizing its buffer.
func envelopeSize(id, key string, headers broker.Headers) int {
	n := 3 + 4*binary.MaxVarintLen64 + len(id) + len(key)
	for _, x := range headers {
		n += 2*binary.MaxVarintLen64 + len(x.Key) + len(x.Value)
	}
	return n
}

// parseEnvelope decodes a fanout message of topic; the payload is data's own tail (nats.go
// gives every message a buffer of its own).
func parseEnvelope(topic string, data []byte) (*broker.Message, error) {
	bad := func(what string) error {
		return fmt.Errorf("fanout message on %q: %s; is every node the same tinybroker version?", topic, what)
	}
	if len(data) < 2 || data[0] != envMagic || data[1] < envVersion || data[1] > envVersionPriority {
		return nil, bad("not an envelope of this version")
	}
	version := data[1]
	r := data[2:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(r)) {
			return "", false
		}
		s := string(r[:n])
		r = r[n:]
		return s, true
	}
	m := &broker.Message{Topic: topic, Targets: 1}
	var ok bool
	if m.ID, ok = uv(); !ok {
		return nil, bad("bad sequence")
	}
	at, n := binary.Varint(r)
	if n <= 0 {
		return nil, bad("bad time")
	}
	m.PublishedAt, r = at, r[n:]
	if m.SystemID, ok = str(); !ok {
		return nil, bad("bad system_id")
	}
	if version != envVersion {
		if m.Key, ok = str(); !ok {
			return nil, bad("bad key")
		}
	}
	if version == envVersionPriority {
		if len(r) == 0 {
			return nil, bad("no priority")
		}
		m.Priority, r = min(r[0], grouping.MaxPriority), r[1:]
	}
	nh, ok := uv()
	if !ok || nh > uint64(len(r)) {
		return nil, bad("bad header count")
	}
	if nh > 0 {
		m.Headers = make(broker.Headers, 0, nh)
		for range nh {
			k, ok1 := str()
			v, ok2 := str()
			if !ok1 || !ok2 {
				return nil, bad("bad header")
			}
			m.Headers = append(m.Headers, broker.Header{Key: k, Value: v})
			m.HeaderBytes += len(k) + len(v)
		}
		m.Headers = m.Headers.Sorted() // an older broker wrote them in a map's order
	}
	m.Payload = r
	return m, nil
}
