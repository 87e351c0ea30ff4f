package jetstream

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// The plugins' key-value stores on this engine (docs/ABI.md, "State"): one NATS KV bucket per
// plugin name, <stream>_kv_<plugin>, shared by every node of the cluster and kept across
// restarts (RATIONALE.md, "Why is a plugin's store a NATS KV bucket on JetStream?"). The
// engine knows nothing of plugins: cmd/tinybroker hands PluginStore to the plugin host as its
// KVBackend.

// pluginStoreInfix names a plugin's bucket after the engine's stream: engines that share a
// NATS server with streams of their own have stores of their own.
const pluginStoreInfix = "_kv_"

// expiresHeader holds when an entry written with a TTL expires (Unix ns, the writer's clock):
// NATS's own per-message TTL counts whole seconds, the ABI milliseconds. An entry past it
// reads as absent; NATS removes it at the next whole second or later.
const expiresHeader = "Tb-Expires"

// markerTTL is how long a delete's marker and the markers NATS leaves for expired entries
// stay in the bucket (its LimitMarkerTTL; NATS's least is a second). Nothing here watches
// the bucket: they only take room.
const markerTTL = time.Second

// casAttempts bounds how often CompareAndSet reads the key and writes: a write refused
// because the key's revision changed since it was read is tried again if the value still
// equals old (another node wrote the same value, or a replica answered the read before it had
// the last write); after that, the answer is a conflict, which a plugin retries anyway.
const casAttempts = 3

// PluginStore is one plugin's key-value store in a NATS KV bucket; it implements
// plugins.KVStore. Keys are stored base64url-encoded (NATS KV keys allow only letters,
// digits and -/_=.), so any bytes make a key. The bound is the bucket's max_bytes, as NATS
// counts a stored message: its subject (the bucket and the encoded key), headers and value
// and a few dozen bytes; a write past it is refused (abi.StatusLimit), never an entry
// dropped. Each call is a round trip to the stream's leader, a compare-and-set two unless it
// follows a read of the key on this node (a read may be answered by a replica, which may lag
// a write made on another node by a moment; CompareAndSet is exact).
type PluginStore struct {
	e      *Engine
	bucket string
	stream jetstream.Stream
	subj   string // $KV.<bucket>.

	mu  sync.Mutex // serialises SetMaxBytes
	max int64      // the bucket's max_bytes, as this store last saw or set it

	// seen is the last entry this node read or wrote of each key, with its revision: a
	// compare-and-set whose old value is the one seen (a plugin reads, then compares and
	// sets) writes at once, expecting that revision, instead of reading it again first. A
	// revision gone stale costs only the read saved. Its bytes are bounded by the bucket's.
	seenMu    sync.Mutex
	seen      map[string]seenEntry
	seenBytes int64        // keys and values in seen
	seenMax   atomic.Int64 // the bucket's bound, for seen's
}

// seenEntry is a key's entry as last read or written on this node.
type seenEntry struct {
	value   []byte // never changed once stored (Get hands it out)
	rev     uint64 // its revision; 0: the key had no message
	present bool   // false: absent (deleted, expired, or never written)
	expires int64  // Unix ns; 0: never
}

// PluginStore opens the store of plugin name (letters, digits, '-' and '_'), making its
// bucket if no node did, with the engine's replicas and storage, and sets the bucket's bound
// to maxBytes: the bound is the last node's to open or reload the plugin, so give every node
// the same kv_max_bytes. The bucket outlives the store: nothing is to be closed.
func (e *Engine) PluginStore(name string, maxBytes int64) (*PluginStore, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	bucket := e.opts.Stream + pluginStoreInfix + name
	storage := jetstream.FileStorage
	if e.opts.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	// LimitMarkerTTL is what allows per-message TTLs in the bucket (NATS 2.11 or later).
	_, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Description: "tinybroker plugin " + name + "'s key-value store",
		MaxBytes: maxBytes, Storage: storage, Replicas: e.opts.Replicas, LimitMarkerTTL: markerTTL})
	if err != nil && !errors.Is(err, jetstream.ErrBucketExists) { // exists: made before, maybe with another bound
		return nil, fmt.Errorf("NATS KV bucket %s: %w", bucket, err)
	}
	stream, err := e.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("NATS KV bucket %s: %w", bucket, err)
	}
	s := &PluginStore{e: e, bucket: bucket, stream: stream, subj: "$KV." + bucket + ".", max: stream.CachedInfo().Config.MaxBytes, seen: map[string]seenEntry{}}
	s.seenMax.Store(maxBytes)
	if err := s.SetMaxBytes(maxBytes); err != nil {
		return nil, err
	}
	return s, nil
}

// SetMaxBytes sets the bucket's bound, if it is not n already. Entries over a lowered bound
// stay; writes are refused until the bucket is under it.
func (s *PluginStore) SetMaxBytes(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seenMax.Store(n)
	if n == s.max {
		return nil
	}
	ctx, cancel := s.e.ctx()
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("NATS KV bucket %s: %w", s.bucket, err)
	}
	cfg := info.Config
	cfg.MaxBytes = n
	if _, err := s.e.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("NATS KV bucket %s: setting max_bytes %d: %w", s.bucket, n, err)
	}
	s.max = n
	return nil
}

// Get returns the value of key, if present and not expired.
func (s *PluginStore) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	e, err := s.load(ctx, key)
	if err != nil || !e.present || e.expired() {
		return nil, false, err
	}
	return e.value, true, nil
}

// Set sets key to value, expiring after ttl (0: never).
func (s *PluginStore) Set(ctx context.Context, key, value []byte, ttl time.Duration) (int32, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return s.write(ctx, key, value, ttl, nil)
}

// CompareAndSet sets key as Set does only if its value is old now (an empty old: if it is
// absent), else returns abi.StatusConflict: the value read, and the write made only if the
// key's revision is still the one read.
func (s *PluginStore) CompareAndSet(ctx context.Context, key, old, value []byte, ttl time.Duration) (int32, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if e, ok := s.lastSeen(key); ok && e.holds(old) {
		rc, err := s.write(ctx, key, value, ttl, &e.rev)
		if !wrongRevision(err) {
			return rc, err
		}
	}
	for range casAttempts {
		e, err := s.load(ctx, key)
		if err != nil {
			return 0, err
		}
		if !e.holds(old) {
			return abi.StatusConflict, nil
		}
		rc, err := s.write(ctx, key, value, ttl, &e.rev)
		if !wrongRevision(err) {
			return rc, err
		}
	}
	return abi.StatusConflict, nil
}

// Delete removes key: a purge marker replaces its entry, and expires itself.
func (s *PluginStore) Delete(ctx context.Context, key []byte) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	m := nats.NewMsg(s.subject(key))
	m.Header.Set("KV-Operation", "PURGE")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	_, err := s.e.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(markerTTL))
	s.forget(key) // written or not
	return err
}

// bounded gives ctx the engine's RequestTimeout, unless the plugin's call has a time limit.
func (s *PluginStore) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.e.opts.RequestTimeout)
}

func (s *PluginStore) subject(key []byte) string {
	return s.subj + base64.RawURLEncoding.EncodeToString(key)
}

// load reads key's last message: its value if it is one (expired or not), and its revision
// (0: the key has no message), which a compare-and-set's write expects.
func (s *PluginStore) load(ctx context.Context, key []byte) (seenEntry, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, s.subject(key))
	var e seenEntry
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		s.forget(key)
		return e, err
	case m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "":
		e.rev = m.Sequence // a delete's marker, or NATS's for an entry it expired
	default:
		e = seenEntry{value: m.Data, rev: m.Sequence, present: true}
		if exp := m.Header.Get(expiresHeader); exp != "" {
			if e.expires, err = strconv.ParseInt(exp, 10, 64); err != nil {
				return e, fmt.Errorf("NATS KV bucket %s: entry %d: %s %q: %w", s.bucket, m.Sequence, expiresHeader, exp, err)
			}
		}
	}
	s.remember(key, e)
	return e, nil
}

// holds says whether e's value is old now (an empty old: whether e is absent).
func (e seenEntry) holds(old []byte) bool {
	present := e.present && !e.expired()
	if len(old) == 0 {
		return !present
	}
	return present && bytes.Equal(e.value, old)
}

func (e seenEntry) expired() bool { return e.expires != 0 && e.expires <= time.Now().UnixNano() }

// lastSeen returns key's entry as this node last read or wrote it.
func (s *PluginStore) lastSeen(key []byte) (seenEntry, bool) {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	e, ok := s.seen[string(key)]
	return e, ok
}

// remember keeps e as key's last seen entry. Past the bucket's bound, what was seen of every
// key is forgotten: the bucket cannot hold more, so the keys are mostly gone from it.
func (s *PluginStore) remember(key []byte, e seenEntry) {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	if old, ok := s.seen[string(key)]; ok {
		s.seenBytes -= int64(len(key) + len(old.value))
	}
	if n := int64(len(key) + len(e.value)); s.seenBytes+n > s.seenMax.Load() {
		clear(s.seen)
		s.seenBytes = 0
	}
	s.seen[string(key)] = e
	s.seenBytes += int64(len(key) + len(e.value))
}

func (s *PluginStore) forget(key []byte) {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	if old, ok := s.seen[string(key)]; ok {
		s.seenBytes -= int64(len(key) + len(old.value))
		delete(s.seen, string(key))
	}
}

// write stores value at key, expiring after ttl, and if rev is not nil only if key's last
// revision is *rev. A wrong revision is returned as the error, for CompareAndSet.
func (s *PluginStore) write(ctx context.Context, key, value []byte, ttl time.Duration, rev *uint64) (int32, error) {
	m := &nats.Msg{Subject: s.subject(key), Data: value, Header: nats.Header{}}
	var opts []jetstream.PublishOpt
	var expires int64
	if ttl > 0 {
		expires = time.Now().Add(ttl).UnixNano()
		m.Header.Set(expiresHeader, strconv.FormatInt(expires, 10))
		// Whole seconds, rounded up: NATS never removes it before the header says.
		opts = append(opts, jetstream.WithMsgTTL((ttl + time.Second - 1).Truncate(time.Second)))
	}
	if rev != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*rev))
	}
	ack, err := s.e.js.PublishMsg(ctx, m, opts...)
	switch {
	case err == nil:
		s.remember(key, seenEntry{value: append([]byte(nil), value...), rev: ack.Sequence, present: true, expires: expires}) // value is the plugin's memory
		return abi.StatusOK, nil
	case full(err):
		return abi.StatusLimit, nil
	}
	s.forget(key) // the write may have been made, or another's since
	return 0, err
}

// wrongRevision says whether err is JetStream refusing a write whose expected last revision
// is not the key's: 10071, or 10164 from a replicated stream.
func wrongRevision(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
