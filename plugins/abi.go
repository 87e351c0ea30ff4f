package plugins

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// callState is what the host functions of one call read and write. Readers see the message
// as it entered the call; writes are kept aside and applied only if the call succeeds.
//
// Each instance has one, reset after every call with its storage kept: a publish through a
// chain of filters allocates nothing on the host, so plugins do not add to the broker's GC
// work. The host functions that write set dirty; a call that only read (a filter that
// passes) is reset by clearing its inputs, not the whole state.
type callState struct {
	callInput
	dirty bool // something below was written in this call: reset clears it all

	newTopic   string
	topicSet   bool
	newPayload []byte
	payloadSet bool
	newKey     string
	keySet     bool
	changes    []headerChange // one per header name set or deleted, its last change
	changeIdx  map[string]int // the index in changes of each name, once there are more than maxLinear
	emits      []broker.Draft
	why        string
}

// callInput is what the caller of a hook gives its call: the message and the event.
type callInput struct {
	hook    abi.Hook
	topic   string
	payload []byte
	headers broker.Headers
	key     string // the message's ordering key (broker.Message.Key)
	id      string

	sub, group, reason string
	attempt            uint32
	inFlight           int64
}

// headerChange is the last change a call made to one header.
type headerChange struct {
	key, value string
	deleted    bool
}

// maxLinear is how many header changes are searched one by one: a call changes a header or
// two, and a slice is cheaper to fill, apply and clear than a map; an index map takes over
// for a plugin that changes many.
const maxLinear = 8

// changeHeader records c as the last change of its header.
func (st *callState) changeHeader(c headerChange) {
	st.dirty = true
	if len(st.changes) > maxLinear {
		if i, ok := st.changeIdx[c.key]; ok {
			st.changes[i] = c
			return
		}
		st.changeIdx[c.key] = len(st.changes)
		st.changes = append(st.changes, c)
		return
	}
	for i := range st.changes {
		if st.changes[i].key == c.key {
			st.changes[i] = c
			return
		}
	}
	st.changes = append(st.changes, c)
	if len(st.changes) > maxLinear {
		if st.changeIdx == nil {
			st.changeIdx = make(map[string]int, 2*len(st.changes))
		}
		for i := range st.changes {
			st.changeIdx[st.changes[i].key] = i
		}
	}
}

// clearPublishInput lets go of the message an on_publish call was given (plugin.publish and
// fillBatch set only these fields).
func (st *callState) clearPublishInput() {
	st.topic, st.payload, st.headers, st.key = "", nil, nil, ""
}

// passedClean reports whether an on_publish call whose verdict is v passed with nothing
// written, and if so clears its input, as settle and reset would: their answer without their
// calls, on the path of every message a filter passes.
func (st *callState) passedClean(v uint64) bool {
	if v != 0 || st.dirty {
		return false
	}
	st.clearPublishInput()
	return true
}

// Storage a call state keeps between calls; more than this is dropped on reset, so that one
// call that set thousands of headers does not make every later call clear them.
const keepStorage = 32

// reset clears st, keeping the storage of its slices and index map. What a caller took out of
// it (emits appended elsewhere, newPayload, why) stays valid.
func (st *callState) reset() {
	// No reference to the message is kept past its call. An on_publish call was given only
	// these (plugin.publish), the rest being zero since the last reset.
	if st.hook == abi.HookPublish {
		st.clearPublishInput()
	} else {
		st.callInput = callInput{}
	}
	if !st.dirty {
		return
	}
	// Field by field rather than one assignment of a new callState: the struct copy goes
	// through the write barrier's bulk path (and clears the input again) when the GC runs,
	// which a plugin that sets a header on every message makes it do often.
	st.dirty = false
	if st.topicSet || st.newTopic != "" {
		st.newTopic, st.topicSet = "", false
	}
	if st.payloadSet || st.newPayload != nil {
		st.newPayload, st.payloadSet = nil, false
	}
	if st.keySet {
		st.newKey, st.keySet = "", false
	}
	if len(st.changes) > 0 {
		if cap(st.changes) > keepStorage {
			st.changes, st.changeIdx = nil, nil
		} else {
			clear(st.changes)
			st.changes = st.changes[:0]
			if len(st.changeIdx) > 0 {
				clear(st.changeIdx)
			}
		}
	}
	if len(st.emits) > 0 {
		if cap(st.emits) > keepStorage {
			st.emits = nil
		} else {
			clear(st.emits)
			st.emits = st.emits[:0]
		}
	}
	if st.why != "" {
		st.why = ""
	}
}

// callCtx is the context of every call into an instance, and of its instantiation: wazero
// passes it unchanged to the host functions, which find their instance with one type
// assertion rather than a context.Value lookup, and wazero's own lookups (once per call)
// fall through to the embedded context. Without a time limit it is made once per instance,
// so a call allocates nothing.
type callCtx struct {
	context.Context // context.Background(), or the call's time limit
	inst            *instance
	bare            bool // Context is context.Background(): no values
}

// Value implements context.Context. wazero looks a key up once per call into the guest; for
// the instance's own context (no time limit) that is answered here, without the call
// through the embedded interface.
func (c *callCtx) Value(key any) any {
	if c.bare {
		return nil
	}
	return c.Context.Value(key)
}

// getHeader looks key, bytes of guest memory, up in h without copying it.
func getHeader(h broker.Headers, key []byte) (string, bool) {
	return h.Get(unsafe.String(unsafe.SliceData(key), len(key))) // only compared
}

// read returns a view of guest memory [ptr, ptr+n) (not a copy: use it before the guest
// runs again), trapping the call if it is out of bounds. An empty range is valid whatever
// ptr is (docs/ABI.md).
//
// Guest memory is accessed through the instance's guardedMemory, whose buffer is the one
// wazero runs the guest on (it gave it to wazero, and is told of every grow): a slice
// expression instead of an interface call and wazero's own bounds check.
func (inst *instance) read(ptr, n uint32) []byte {
	mem := inst.gmem.buf
	end := uint64(ptr) + uint64(n)
	if end > uint64(len(mem)) {
		if n == 0 {
			return nil
		}
		panic(outsideError{ptr, n, len(mem), false})
	}
	return mem[ptr:end]
}

// outsideError traps a call that gave a (pointer, length) pair outside the guest's memory.
// A value rather than fmt.Errorf's, so that read and writable are inlined.
type outsideError struct {
	ptr, n uint32
	size   int
	write  bool // a buffer to fill, rather than a value to read
}

func (e outsideError) Error() string {
	what := "pointer"
	if e.write {
		what = "buffer"
	}
	return fmt.Sprintf("tinybroker ABI: %s %d length %d is outside the plugin's memory (%d bytes)", what, e.ptr, e.n, e.size)
}

// internMax is the longest string an instance interns.
const internMax = 128

// intern returns guest memory [ptr, ptr+n) as a string, without allocating when it equals
// one of the last few strings this instance was given: plugins tend to set the same header
// names and values, topics and reasons on every call.
func (inst *instance) intern(ptr, n uint32) string { return inst.internBytes(inst.read(ptr, n)) }

// internBytes is intern for bytes of guest memory already checked.
func (inst *instance) internBytes(b []byte) string {
	if len(b) > internMax {
		return string(b)
	}
	for _, s := range inst.strs {
		if s == string(b) { // compared without a copy
			return s
		}
	}
	s := string(b)
	inst.strs[inst.nextStr%uint8(len(inst.strs))] = s
	inst.nextStr++
	return s
}

// give implements the read convention: copy min(len, cap) bytes to buf and return len.
func (inst *instance) give(v []byte, buf, capacity uint32) int32 {
	if n := min(uint32(len(v)), capacity); n > 0 {
		copy(inst.writable(buf, n), v)
	}
	return int32(len(v))
}

func (inst *instance) giveString(v string, buf, capacity uint32) int32 {
	if n := min(uint32(len(v)), capacity); n > 0 {
		copy(inst.writable(buf, n), v)
	}
	return int32(len(v))
}

// writable returns guest memory [buf, buf+n), n > 0, trapping the call if it is out of
// bounds.
func (inst *instance) writable(buf, n uint32) []byte {
	mem := inst.gmem.buf
	end := uint64(buf) + uint64(n)
	if end > uint64(len(mem)) {
		panic(outsideError{buf, n, len(mem), true})
	}
	return mem[buf:end]
}

// mayChangeHeaders reports whether the hook of the call may change the message's headers.
func (st *callState) mayChangeHeaders() bool {
	return st.hook == abi.HookPublish || st.hook == abi.HookRedeliver
}

// headerStatus is the status of a header a plugin writes, k: v, as far as its content goes:
// one outside the header grammar (broker.CheckHeader: an empty name, text that is not
// UTF-8) is invalid, and a header over max_header_bytes alone could never be sent. The sum
// of a message's headers is the broker's to check (broker.Limits.CheckHeaders).
func (inst *instance) headerStatus(k, v string) int32 {
	switch {
	case broker.Header{Key: k, Value: v}.Check() != nil:
		return abi.StatusInvalid
	case len(k)+len(v) > inst.p.host.opts.MaxHeaderBytes:
		return abi.StatusTooLarge
	}
	return abi.StatusOK
}

// payloadStatus is the status of a new payload of n bytes.
func (inst *instance) payloadStatus(n uint32) int32 {
	switch {
	case inst.st.hook != abi.HookPublish:
		return abi.StatusNotAllowed
	case int(n) > inst.p.host.opts.MaxMessageBytes:
		return abi.StatusTooLarge
	}
	return abi.StatusOK
}

// setPayload replaces the payload with a copy of b, whose payloadStatus was OK.
func (inst *instance) setPayload(b []byte) {
	st := inst.st
	st.dirty = true
	st.newPayload = append([]byte(nil), b...)
	st.payloadSet = true
}

// setHeader sets header k to v, if the hook and the header's content allow, and returns the
// status.
func (inst *instance) setHeader(k, v string) int32 {
	rc := inst.headerStatus(k, v)
	if !inst.st.mayChangeHeaders() {
		rc = abi.StatusNotAllowed
	}
	if rc == abi.StatusOK {
		inst.st.changeHeader(headerChange{key: k, value: v})
	}
	return rc
}

// delHeader removes header k, if the hook allows, and returns the status.
func (inst *instance) delHeader(k string) int32 {
	if !inst.st.mayChangeHeaders() {
		return abi.StatusNotAllowed
	}
	inst.st.changeHeader(headerChange{key: k, deleted: true})
	return abi.StatusOK
}

func u32(v uint64) uint32 { return uint32(v) }

func putI32(stack []uint64, v int32) { stack[0] = uint64(uint32(v)) }

// hostFunc is one host function of the ABI.
type hostFunc struct {
	name    string
	params  []api.ValueType
	results []api.ValueType
	fn      api.GoFunction
}

// Each host function is a type of its own whose Call method is its whole body: wazero calls
// it through the api.GoFunction interface with the call's context (a *callCtx), in which
// enter finds the calling instance. Not api.GoModuleFunction, whose calling module a host
// function of ours does not need and wazero would look up on every call; and not one
// function type with the bodies as closures, which costs a second indirect call, a stack
// frame and the arguments' spills on every host call (RATIONALE.md).

// enter is the start of every host function: it finds the calling instance, counts the call
// and, in a frame (batch.go), selects the message the guest is on.
func enter(ctx context.Context) *instance {
	inst := ctx.(*callCtx).inst
	inst.hostCalls++
	if inst.batch.n > 0 {
		inst.selectCurrent()
	}
	return inst
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostImpls are the bodies of the ABI v1 host functions, by name; their signatures and docs
// are internal/abi's table (docs/ABI.md is generated from it).
var hostImpls = map[string]api.GoFunction{
	"v1_log":                new(hostLog),
	"v1_now":                new(hostNow),
	"v1_config":             new(hostConfig),
	"v1_config_get":         new(hostConfigGet),
	"v1_set_reason":         new(hostSetReason),
	"v1_msg_topic":          new(hostMsgTopic),
	"v1_msg_payload":        new(hostMsgPayload),
	"v1_msg_header":         new(hostMsgHeader),
	"v1_msg_header_count":   new(hostMsgHeaderCount),
	"v1_msg_header_name":    new(hostMsgHeaderName),
	"v1_msg_id":             new(hostMsgID),
	"v1_msg_set_topic":      new(hostMsgSetTopic),
	"v1_msg_set_payload":    new(hostMsgSetPayload),
	"v1_msg_set_header":     new(hostMsgSetHeader),
	"v1_msg_del_header":     new(hostMsgDelHeader),
	"v1_event_subscription": new(hostEventSubscription),
	"v1_event_group":        new(hostEventGroup),
	"v1_event_attempt":      new(hostEventAttempt),
	"v1_event_in_flight_ns": new(hostEventInFlightNs),
	"v1_event_reason":       new(hostEventReason),
	"v1_emit":               new(hostEmit),
	"v1_emit_header":        new(hostEmitHeader),
	"v1_msg_key":            new(hostMsgKey),
	"v1_msg_set_key":        new(hostMsgSetKey),
	"v1_emit_key":           new(hostEmitKey),
	"v1_kv_get":             new(hostKVGet),
	"v1_kv_set":             new(hostKVSet),
	"v1_kv_cas":             new(hostKVCas),
	"v1_kv_delete":          new(hostKVDelete),

	"v1_metric_define":  new(hostMetricDefine),
	"v1_metric_add":     new(hostMetricAdd),
	"v1_metric_set":     new(hostMetricSet),
	"v1_metric_observe": new(hostMetricObserve),
}

// hostFuncs lists the ABI v1 host functions, from internal/abi's table and hostImpls; a
// function in one and not the other stops the program at start (TestHostFuncsMatchTable).
var hostFuncs = func() []hostFunc {
	valueType := func(k abi.Kind) api.ValueType {
		if k == abi.I64 {
			return i64
		}
		return i32
	}
	out := make([]hostFunc, 0, len(abi.HostFuncs))
	for _, f := range abi.HostFuncs {
		fn, ok := hostImpls[f.Name]
		if !ok {
			panic("plugins: no implementation of the ABI's host function " + f.Name)
		}
		hf := hostFunc{name: f.Name, fn: fn}
		for _, p := range f.Params {
			hf.params = append(hf.params, valueType(p.Kind))
		}
		if f.Result != abi.None {
			hf.results = []api.ValueType{valueType(f.Result)}
		}
		out = append(out, hf)
	}
	if len(out) != len(hostImpls) {
		panic("plugins: a host function is implemented that internal/abi's table does not declare")
	}
	return out
}()

// The host functions' types: each Call below is one function's whole body.
type (
	hostLog               struct{}
	hostNow               struct{}
	hostConfig            struct{}
	hostConfigGet         struct{}
	hostSetReason         struct{}
	hostMsgTopic          struct{}
	hostMsgPayload        struct{}
	hostMsgHeader         struct{}
	hostMsgHeaderCount    struct{}
	hostMsgHeaderName     struct{}
	hostMsgID             struct{}
	hostMsgSetTopic       struct{}
	hostMsgSetPayload     struct{}
	hostMsgSetHeader      struct{}
	hostMsgDelHeader      struct{}
	hostEventSubscription struct{}
	hostEventGroup        struct{}
	hostEventAttempt      struct{}
	hostEventInFlightNs   struct{}
	hostEventReason       struct{}
	hostEmit              struct{}
	hostEmitHeader        struct{}
	hostMsgKey            struct{}
	hostMsgSetKey         struct{}
	hostEmitKey           struct{}

	hostMetricDefine  struct{}
	hostMetricAdd     struct{}
	hostMetricSet     struct{}
	hostMetricObserve struct{}
)

func (*hostLog) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	b := inst.read(u32(s[1]), u32(s[2])) // bounds-checked even when the level is off
	log := inst.p.log
	level := hclog.Error // and any level past 4
	switch lvl := int32(u32(s[0])); {
	case lvl == 0 && !log.IsTrace(), lvl == 1 && !log.IsDebug(), lvl == 2 && !log.IsInfo():
		return // a level the broker's log leaves out: the log topic does too
	case lvl >= 0 && lvl <= 3:
		level = hclog.Level(lvl + 1) // hclog's levels start at Trace = 1
	}
	line := string(b)
	log.Log(level, line)
	inst.p.logToTopic(level, line)
}

func (*hostNow) Call(ctx context.Context, s []uint64) {
	enter(ctx)
	s[0] = uint64(nowNanos())
}

func (*hostConfig) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.giveString(inst.p.configText, u32(s[0]), u32(s[1])))
}

func (*hostConfigGet) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	v, ok := inst.p.spec.Config[string(inst.read(u32(s[0]), u32(s[1])))] // looked up without a copy
	if !ok {
		putI32(s, -1)
		return
	}
	putI32(s, inst.giveString(v, u32(s[2]), u32(s[3])))
}

func (*hostSetReason) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	inst.st.dirty = true
	inst.st.why = inst.intern(u32(s[0]), u32(s[1]))
}

func (*hostMsgTopic) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.giveString(inst.st.topic, u32(s[0]), u32(s[1])))
}

func (*hostMsgPayload) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.give(inst.st.payload, u32(s[0]), u32(s[1])))
}

func (*hostMsgHeader) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	v, ok := getHeader(inst.st.headers, inst.read(u32(s[0]), u32(s[1])))
	if !ok {
		putI32(s, -1)
		return
	}
	putI32(s, inst.giveString(v, u32(s[2]), u32(s[3])))
}

func (*hostMsgHeaderCount) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, int32(len(inst.st.headers)))
}

func (*hostMsgHeaderName) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	h := inst.st.headers // sorted by name
	i := int32(u32(s[0]))
	if i < 0 || int(i) >= len(h) {
		putI32(s, -1)
		return
	}
	putI32(s, inst.giveString(h[i].Key, u32(s[1]), u32(s[2])))
}

func (*hostMsgID) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	// Absent: a message being published has no id yet, and a tick has no message.
	if h := inst.st.hook; h == abi.HookPublish || h == abi.HookTick {
		putI32(s, -1)
		return
	}
	putI32(s, inst.giveString(inst.st.id, u32(s[0]), u32(s[1])))
}

func (*hostMsgSetTopic) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	st := inst.st
	topic := inst.intern(u32(s[0]), u32(s[1]))
	switch {
	case st.hook != abi.HookPublish:
		putI32(s, abi.StatusNotAllowed)
	case broker.ValidateTopic(topic) != nil:
		putI32(s, abi.StatusInvalid)
	case !inst.p.spec.mayEmit(topic):
		putI32(s, abi.StatusNotAllowed)
	default:
		st.dirty = true
		st.newTopic, st.topicSet = topic, true
		putI32(s, abi.StatusOK)
	}
}

func (*hostMsgSetPayload) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	rc := inst.payloadStatus(u32(s[1])) // first: a length over the limit is refused, not trapped
	if rc == abi.StatusOK {
		inst.setPayload(inst.read(u32(s[0]), u32(s[1])))
	}
	putI32(s, rc)
}

func (*hostMsgSetHeader) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.setHeader(inst.intern(u32(s[0]), u32(s[1])), inst.intern(u32(s[2]), u32(s[3]))))
}

func (*hostMsgDelHeader) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.delHeader(inst.intern(u32(s[0]), u32(s[1]))))
}

func (*hostEventSubscription) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.giveString(inst.st.sub, u32(s[0]), u32(s[1])))
}

func (*hostEventGroup) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.giveString(inst.st.group, u32(s[0]), u32(s[1])))
}

func (*hostEventAttempt) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, int32(inst.st.attempt))
}

func (*hostEventInFlightNs) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	s[0] = uint64(inst.st.inFlight)
}

func (*hostEventReason) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.giveString(inst.st.reason, u32(s[0]), u32(s[1])))
}

func (*hostEmit) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	st := inst.st
	topic := inst.intern(u32(s[0]), u32(s[1]))
	n := u32(s[3])
	switch {
	case st.hook == abi.HookInit:
		putI32(s, abi.StatusNotAllowed)
	case len(st.emits) >= inst.p.spec.MaxEmits:
		putI32(s, abi.StatusLimit)
	case broker.ValidateTopic(topic) != nil:
		putI32(s, abi.StatusInvalid)
	case !inst.p.spec.mayEmit(topic):
		putI32(s, abi.StatusNotAllowed)
	case int(n) > inst.p.host.opts.MaxMessageBytes:
		putI32(s, abi.StatusTooLarge)
	default:
		st.dirty = true
		payload := append([]byte(nil), inst.read(u32(s[2]), n)...)
		st.emits = append(st.emits, broker.Draft{Topic: topic, Payload: payload})
		putI32(s, int32(len(st.emits)-1))
	}
}

func (*hostEmitHeader) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	st := inst.st
	h := int32(u32(s[0]))
	k, v := inst.intern(u32(s[1]), u32(s[2])), inst.intern(u32(s[3]), u32(s[4]))
	rc := inst.headerStatus(k, v)
	if h < 0 || int(h) >= len(st.emits) {
		rc = abi.StatusInvalid
	}
	if rc == abi.StatusOK {
		d := &st.emits[h]
		d.Headers = d.Headers.Set(k, v) // the emit's own, made by this call
	}
	putI32(s, rc)
}

func (*hostMsgKey) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	putI32(s, inst.giveString(inst.st.key, u32(s[0]), u32(s[1])))
}

func (*hostMsgSetKey) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	st := inst.st
	rc := int32(abi.StatusNotAllowed)
	if st.hook == abi.HookPublish {
		var key string
		if key, rc = inst.readKey(u32(s[0]), u32(s[1])); rc == abi.StatusOK {
			st.dirty = true
			st.newKey, st.keySet = key, true
		}
	}
	putI32(s, rc)
}

func (*hostEmitKey) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	st := inst.st
	h := int32(u32(s[0]))
	key, rc := inst.readKey(u32(s[1]), u32(s[2]))
	if h < 0 || int(h) >= len(st.emits) {
		rc = abi.StatusInvalid
	}
	if rc == abi.StatusOK {
		st.emits[h].Key = key // the emit's own, made by this call
	}
	putI32(s, rc)
}

// readKey reads a message key a plugin gives, guest memory [ptr, ptr+n), and returns it with
// its status: ERR_TOO_LARGE over abi.MaxKeyBytes (checked first: a length over the limit is
// refused, not trapped), ERR_INVALID if broker.ValidateKey refuses it. The empty key is valid:
// no key.
func (inst *instance) readKey(ptr, n uint32) (string, int32) {
	if n > abi.MaxKeyBytes {
		return "", abi.StatusTooLarge
	}
	key := inst.intern(ptr, n)
	if broker.ValidateKey(key) != nil {
		return "", abi.StatusInvalid
	}
	return key, abi.StatusOK
}

var hostFuncIndex = func() map[string]*hostFunc {
	m := make(map[string]*hostFunc, len(hostFuncs))
	for i := range hostFuncs {
		m[hostFuncs[i].name] = &hostFuncs[i]
	}
	return m
}()

// instantiateHostModule defines the "tinybroker" module in r. Its functions serve every
// instance of the runtime's plugin: each finds the calling instance in the call's context.
func instantiateHostModule(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(abi.HostModule)
	for i := range hostFuncs {
		b = b.NewFunctionBuilder().WithGoFunction(hostFuncs[i].fn, hostFuncs[i].params, hostFuncs[i].results).Export(hostFuncs[i].name)
	}
	_, err := b.Instantiate(ctx)
	return err
}
