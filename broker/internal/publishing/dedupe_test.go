package publishing

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/msgid"
)

// dedupeEngine routes frames through a Gate with a Dedupe, as the engines do, counting
// what it routes; a topic "fail" fails.
type dedupeEngine struct {
	gate    Gate
	hooks   HookSlot
	closing atomic.Bool
	limits  broker.Limits
	seq     atomic.Uint64
	hold    chan struct{} // if not nil, routing waits on it
}

func newDedupeEngine(d *Dedupe) *dedupeEngine {
	e := &dedupeEngine{limits: broker.Limits{}.WithDefaults()}
	e.gate = Gate{Limits: &e.limits, Hooks: &e.hooks, Closing: &e.closing, Dedupe: d}
	return e
}

func (e *dedupeEngine) publish(frame []broker.Draft) ([]broker.PublishResult, []error) {
	res, errs := make([]broker.PublishResult, len(frame)), make([]error, len(frame))
	b := e.gate.Batch(frame, errs)
	defer b.Release()
	if e.hold != nil {
		<-e.hold
	}
	for j, m := range b.Msgs {
		i := b.At[j]
		if m.Topic == "fail" {
			errs[i] = broker.ErrUnavailable
			continue
		}
		seq := e.seq.Add(1)
		res[i] = broker.PublishResult{Seq: seq, SystemID: strconv.FormatUint(seq, 10), Routed: 1}
	}
	b.Settle(res, errs)
	return res, errs
}

func drafts(ids ...string) []broker.Draft {
	ds := make([]broker.Draft, len(ids))
	for i, id := range ids {
		ds[i] = broker.Draft{Topic: "t", ID: id}
	}
	return ds
}

// Frames that share ids in opposite orders, published at once from many goroutines, never
// wait for each other for good, and each id is published once: every answer for it carries
// the same sequence.
func TestDedupeCrossedFramesPublishOnce(t *testing.T) {
	e := newDedupeEngine(NewDedupe(time.Minute, 1<<20, nil, nil))
	var mu sync.Mutex
	seqs := map[string]map[uint64]bool{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for round := range 50 {
				ids := []string{"k" + strconv.Itoa(round), "k" + strconv.Itoa(round+1), "k" + strconv.Itoa(round+2)}
				if g%2 == 1 {
					ids[0], ids[2] = ids[2], ids[0]
				}
				res, errs := e.publish(drafts(ids...))
				mu.Lock()
				for i, id := range ids {
					if errs[i] != nil {
						t.Errorf("id %s: %v", id, errs[i])
					}
					if seqs[id] == nil {
						seqs[id] = map[uint64]bool{}
					}
					seqs[id][res[i].Seq] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for id, s := range seqs {
		if len(s) != 1 {
			t.Fatalf("id %s published %d times: %v", id, len(s), s)
		}
	}
	if n := e.seq.Load(); n != 52 {
		t.Fatalf("%d messages published, want 52 (k0..k51)", n)
	}
}

// A duplicate that arrives while the first publish of its id is under way waits for it and
// gets its result; if the first fails, the duplicate is told to retry (UNAVAILABLE), and the
// retry publishes, as the id was forgotten.
func TestDedupeWaitsForTheFirstPublish(t *testing.T) {
	d := NewDedupe(time.Minute, 1<<20, nil, nil)
	for _, fail := range []bool{false, true} {
		e := newDedupeEngine(d)
		e.hold = make(chan struct{})
		topic := "t"
		if fail {
			topic = "fail"
		}
		first := make(chan error, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, errs := e.publish([]broker.Draft{{Topic: topic, ID: topic}})
			first <- errs[0]
		})
		// The first is past the gate (its id entered) once it waits on hold.
		for d.Stats().IDs == 0 {
			time.Sleep(time.Millisecond)
		}
		e2 := newDedupeEngine(d)
		var dupRes broker.PublishResult
		var dupErr error
		wg.Go(func() {
			res, errs := e2.publish([]broker.Draft{{Topic: topic, ID: topic}})
			dupRes, dupErr = res[0], errs[0]
		})
		close(e.hold)
		wg.Wait()
		ferr := <-first
		if !fail {
			if ferr != nil || dupErr != nil || !dupRes.Duplicate || dupRes.Seq != 1 {
				t.Fatalf("first: %v; duplicate: %+v %v; want the duplicate answered with seq 1", ferr, dupRes, dupErr)
			}
		} else {
			if ferr == nil || !errors.Is(dupErr, broker.ErrUnavailable) {
				t.Fatalf("first: %v; duplicate: %v; want both to fail, the duplicate with ErrUnavailable", ferr, dupErr)
			}
			e3 := newDedupeEngine(d)
			if _, errs := e3.publish([]broker.Draft{{Topic: "t", ID: "fail"}}); errs[0] != nil || e3.seq.Load() != 1 {
				t.Fatalf("the retry of a failed id: %v, %d published; want it published", errs[0], e3.seq.Load())
			}
		}
	}
}

// The table stays within its bytes, forgetting its oldest half when full; ids expire after
// the window; the budget it is charged to gets back everything it took.
func TestDedupeBoundsAndCharges(t *testing.T) {
	var charged atomic.Int64
	var evicted atomic.Uint64
	now := time.Unix(0, 0)
	one := int64(entryCost)
	d := NewDedupe(time.Minute, 10*one, func(n int64) { charged.Add(n) }, func(total uint64) { evicted.Store(total) })
	d.now = func() time.Time { return now }
	e := newDedupeEngine(d)
	for i := range 27 {
		if res, _ := e.publish(drafts(testKey(i))); res[0].Duplicate {
			t.Fatalf("id %d is new", i)
		}
		if st := d.Stats(); st.Bytes > 10*one || charged.Load() != st.Bytes {
			t.Fatalf("after %d ids: %+v, charged %d; want at most %d bytes, all charged", i+1, st, charged.Load(), 10*one)
		}
	}
	// Generations of 5: ids 20-24 and 25-26 are kept, 0-19 forgotten (evicted).
	st := d.Stats()
	if st.IDs != 7 || st.Evicted != 20 || evicted.Load() != 20 {
		t.Fatalf("after 27 ids in a table of 10: %+v, told of %d evicted; want 7 ids, 20 evicted", st, evicted.Load())
	}
	for _, i := range []int{20, 26} {
		if res, _ := e.publish(drafts(testKey(i))); !res[0].Duplicate {
			t.Fatalf("id %d, among the newest, was forgotten", i)
		}
	}
	if res, _ := e.publish(drafts(testKey(0))); res[0].Duplicate {
		t.Fatal("an evicted id is still remembered")
	}
	now = now.Add(59 * time.Second)
	if res, _ := e.publish(drafts(testKey(26))); !res[0].Duplicate {
		t.Fatal("an id forgotten within its window")
	}
	now = now.Add(time.Second)
	if res, _ := e.publish(drafts(testKey(26))); res[0].Duplicate {
		t.Fatal("an id remembered past its window")
	}
	now = now.Add(time.Minute)
	e.publish(drafts("after"))
	if st := d.Stats(); st.IDs != 2 || st.Evicted != 20 || charged.Load() != st.Bytes {
		t.Fatalf("after two windows: %+v, charged %d; want the id of the last window and the new one", st, charged.Load())
	}
}

// testKey is the i-th dedupe key of a test.
func testKey(i int) string { return msgid.Key("u", "id-"+strconv.Itoa(1000+i)) }

// BenchmarkDedupeBegin enters new ids into a table at its default bound (64 MiB, ~420,000
// ids), and settles them: the table's own cost per new id.
func BenchmarkDedupeBegin(b *testing.B) {
	d := NewDedupe(2*time.Minute, 64<<20, nil, nil)
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = testKey(i)
	}
	now := time.Now()
	var res [1]broker.PublishResult
	var errs [1]error
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k, _, _, _ := d.begin(keys[i&(len(keys)-1)], now)
		d.settle([]idAt{{k: k}}, res[:], errs[:])
		i++
	}
}
