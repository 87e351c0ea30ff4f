package jetstream

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
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

// casAttempts bounds how often CompareAndSet writes: a write refused because the key's
// revision changed since it was read is tried again if the value still equals old (another
// node wrote the same value, or a replica answered the read before it had the last write);
// after that, the answer is a conflict, which a plugin retries anyway.
const casAttempts = 3

// PluginStore is one plugin's key-value store in a NATS KV bucket; it implements
// plugins.KVStore. Keys are stored base64url-encoded (NATS KV keys allow only letters,
// digits and -/_=.), so any bytes make a key. The bound is the bucket's max_bytes, as NATS
// counts a stored message: its subject (the bucket and the encoded key), headers and value
// and a few dozen bytes; a write past it is refused (abi.StatusLimit), never an entry
// dropped. Each call is a round trip to the stream's leader (a read may be answered by a
// replica, which may lag a write made on another node by a moment; CompareAndSet is exact).
type PluginStore struct {
	e      *Engine
	bucket string
	stream jetstream.Stream
	subj   string // $KV.<bucket>.

	mu  sync.Mutex // serialises SetMaxBytes
	max int64      // the bucket's max_bytes, as this store last saw or set it
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
	s := &PluginStore{e: e, bucket: bucket, stream: stream, subj: "$KV." + bucket + ".", max: stream.CachedInfo().Config.MaxBytes}
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
	v, _, ok, err := s.load(ctx, key)
	return v, ok, err
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
	for range casAttempts {
		cur, rev, ok, err := s.load(ctx, key)
		if err != nil {
			return 0, err
		}
		if len(old) == 0 && ok || len(old) > 0 && (!ok || !bytes.Equal(cur, old)) {
			return abi.StatusConflict, nil
		}
		rc, err := s.write(ctx, key, value, ttl, &rev)
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

// load reads key's last message: its value if it is one and not expired, and its revision
// (0: the key has no message), which a compare-and-set's write expects.
func (s *PluginStore) load(ctx context.Context, key []byte) (value []byte, rev uint64, ok bool, err error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, s.subject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	// A delete's marker, or NATS's for an entry it expired.
	if m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
		return nil, m.Sequence, false, nil
	}
	if exp := m.Header.Get(expiresHeader); exp != "" {
		if ns, err := strconv.ParseInt(exp, 10, 64); err == nil && ns <= time.Now().UnixNano() {
			return nil, m.Sequence, false, nil
		}
	}
	return m.Data, m.Sequence, true, nil
}

// write stores value at key, expiring after ttl, and if rev is not nil only if key's last
// revision is *rev. A wrong revision is returned as the error, for CompareAndSet.
func (s *PluginStore) write(ctx context.Context, key, value []byte, ttl time.Duration, rev *uint64) (int32, error) {
	m := &nats.Msg{Subject: s.subject(key), Data: value, Header: nats.Header{}}
	var opts []jetstream.PublishOpt
	if ttl > 0 {
		m.Header.Set(expiresHeader, strconv.FormatInt(time.Now().Add(ttl).UnixNano(), 10))
		// Whole seconds, rounded up: NATS never removes it before the header says.
		opts = append(opts, jetstream.WithMsgTTL((ttl + time.Second - 1).Truncate(time.Second)))
	}
	if rev != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*rev))
	}
	_, err := s.e.js.PublishMsg(ctx, m, opts...)
	switch {
	case err == nil:
		return abi.StatusOK, nil
	case full(err):
		return abi.StatusLimit, nil
	}
	return 0, err
}

// wrongRevision says whether err is JetStream refusing a write whose expected last revision
// is not the key's: 10071, or 10164 from a replicated stream.
func wrongRevision(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
