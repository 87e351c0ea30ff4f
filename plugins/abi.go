package plugins

import (
	"context"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// The ABI v1 names (docs/ABI.md).
const (
	hostModule   = "tinybroker"
	abiMarker    = "tinybroker_abi_v1"
	markerPrefix = "tinybroker_abi_v"
)

type hookKind int

const (
	hookInit hookKind = iota
	hookPublish
	hookAck
	hookRedeliver
	numHooks
)

var hookExports = [numHooks]string{"tb_init", "tb_on_publish", "tb_on_ack", "tb_on_redeliver"}
var hookNames = [numHooks]string{"init", HookPublish, HookAck, HookRedeliver}

// callState is what the host functions of one call read and write. Readers see the message
// as it entered the call; writes are kept aside and applied only if the call succeeds.
//
// Each instance has one, reset after every call with its storage kept: a publish through a
// chain of filters allocates nothing on the host, so plugins do not add to the broker's GC
// work.
type callState struct {
	hook    hookKind
	topic   string
	payload []byte
	headers map[string]string
	id      string
	names   []string // sorted header names, built on first use (namesOK)
	namesOK bool

	sub, group, reason string
	attempt            uint32
	inFlight           int64

	newTopic   string
	topicSet   bool
	newPayload []byte
	payloadSet bool
	changes    []headerChange // one per header name set or deleted, its last change
	changeIdx  map[string]int // the index in changes of each name, once there are more than maxLinear
	emits      []broker.Draft
	why        string
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

// Storage a call state keeps between calls; more than this is dropped on reset, so that one
// call that set thousands of headers does not make every later call clear them.
const keepStorage = 32

// reset clears st, keeping the storage of its slices and index map. What a caller took out of
// it (emits appended elsewhere, newPayload, why) stays valid.
func (st *callState) reset() {
	names, changes, idx, emits := st.names, st.changes, st.changeIdx, st.emits
	if cap(names) > keepStorage {
		names = nil
	}
	if cap(changes) > keepStorage {
		changes, idx = nil, nil
	}
	if cap(emits) > keepStorage {
		emits = nil
	}
	clear(names)
	clear(changes)
	if len(idx) > 0 {
		clear(idx)
	}
	clear(emits)
	*st = callState{names: names[:0], changes: changes[:0], changeIdx: idx, emits: emits[:0]}
}

// instKey carries the calling instance in the context wazero passes to host functions.
type instKey struct{}

func instOf(ctx context.Context) *instance { return ctx.Value(instKey{}).(*instance) }

func stateOf(ctx context.Context) *callState { return &instOf(ctx).st }

// read returns a view of guest memory [ptr, ptr+n) (not a copy: use it before the guest
// runs again), trapping the call if it is out of bounds.
func read(m api.Module, ptr, n uint32) []byte {
	b, ok := m.Memory().Read(ptr, n)
	if !ok {
		panic(fmt.Errorf("tinybroker ABI: pointer %d length %d is outside the plugin's memory (%d bytes)", ptr, n, m.Memory().Size()))
	}
	return b
}

// internMax is the longest string an instance interns.
const internMax = 128

// intern returns guest memory [ptr, ptr+n) as a string, without allocating when it equals
// one of the last few strings this instance was given: plugins tend to set the same header
// names and values, topics and reasons on every call.
func (inst *instance) intern(m api.Module, ptr, n uint32) string {
	b := read(m, ptr, n)
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
func give(m api.Module, v []byte, buf, capacity uint32) int32 {
	n := min(uint32(len(v)), capacity)
	if n > 0 && !m.Memory().Write(buf, v[:n]) {
		panic(fmt.Errorf("tinybroker ABI: buffer %d length %d is outside the plugin's memory (%d bytes)", buf, n, m.Memory().Size()))
	}
	return int32(len(v))
}

func giveString(m api.Module, v string, buf, capacity uint32) int32 {
	n := min(uint32(len(v)), capacity)
	if n > 0 && !m.Memory().WriteString(buf, v[:n]) {
		panic(fmt.Errorf("tinybroker ABI: buffer %d length %d is outside the plugin's memory (%d bytes)", buf, n, m.Memory().Size()))
	}
	return int32(len(v))
}

func u32(v uint64) uint32 { return uint32(v) }

func putI32(stack []uint64, v int32) { stack[0] = uint64(uint32(v)) }

// hostFunc is one host function of the ABI.
type hostFunc struct {
	name    string
	params  []api.ValueType
	results []api.ValueType
	fn      func(p *plugin, ctx context.Context, m api.Module, stack []uint64)
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

func params(n int) []api.ValueType { return slices.Repeat([]api.ValueType{i32}, n) }

// hostFuncs lists the ABI v1 host functions; docs/ABI.md is their specification.
var hostFuncs = []hostFunc{
	{"v1_log", params(3), nil, func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		b := read(m, u32(s[1]), u32(s[2])) // bounds-checked even when the level is off
		switch lvl := int32(u32(s[0])); {
		case lvl == 0:
			if p.log.IsTrace() {
				p.log.Trace(string(b))
			}
		case lvl == 1:
			if p.log.IsDebug() {
				p.log.Debug(string(b))
			}
		case lvl == 2:
			if p.log.IsInfo() {
				p.log.Info(string(b))
			}
		case lvl == 3:
			p.log.Warn(string(b))
		default:
			p.log.Error(string(b))
		}
	}},
	{"v1_now", nil, []api.ValueType{i64}, func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(nowNanos())
	}},
	{"v1_config", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, p.configText, u32(s[0]), u32(s[1])))
	}},
	{"v1_config_get", params(4), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		v, ok := p.spec.Config[string(read(m, u32(s[0]), u32(s[1])))] // looked up without a copy
		if !ok {
			putI32(s, -1)
			return
		}
		putI32(s, giveString(m, v, u32(s[2]), u32(s[3])))
	}},
	{"v1_set_reason", params(2), nil, func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		inst := instOf(ctx)
		inst.st.why = inst.intern(m, u32(s[0]), u32(s[1]))
	}},
	{"v1_msg_topic", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, stateOf(ctx).topic, u32(s[0]), u32(s[1])))
	}},
	{"v1_msg_payload", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, give(m, stateOf(ctx).payload, u32(s[0]), u32(s[1])))
	}},
	{"v1_msg_header", params(4), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		v, ok := stateOf(ctx).headers[string(read(m, u32(s[0]), u32(s[1])))] // looked up without a copy
		if !ok {
			putI32(s, -1)
			return
		}
		putI32(s, giveString(m, v, u32(s[2]), u32(s[3])))
	}},
	{"v1_msg_header_count", nil, params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, int32(len(stateOf(ctx).headers)))
	}},
	{"v1_msg_header_name", params(3), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		st := stateOf(ctx)
		if !st.namesOK {
			for k := range st.headers {
				st.names = append(st.names, k)
			}
			slices.Sort(st.names)
			st.namesOK = true
		}
		i := int32(u32(s[0]))
		if i < 0 || int(i) >= len(st.names) {
			putI32(s, -1)
			return
		}
		putI32(s, giveString(m, st.names[i], u32(s[1]), u32(s[2])))
	}},
	{"v1_msg_id", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, stateOf(ctx).id, u32(s[0]), u32(s[1])))
	}},
	{"v1_msg_set_topic", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		inst := instOf(ctx)
		st := &inst.st
		topic := inst.intern(m, u32(s[0]), u32(s[1]))
		switch {
		case st.hook != hookPublish:
			putI32(s, abi.StatusNotAllowed)
		case broker.ValidateTopic(topic) != nil:
			putI32(s, abi.StatusInvalid)
		default:
			st.newTopic, st.topicSet = topic, true
			putI32(s, abi.StatusOK)
		}
	}},
	{"v1_msg_set_payload", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		st := stateOf(ctx)
		switch n := u32(s[1]); {
		case st.hook != hookPublish:
			putI32(s, abi.StatusNotAllowed)
		case int(n) > p.host.opts.MaxMessageBytes:
			putI32(s, abi.StatusTooLarge)
		default:
			st.newPayload = append([]byte(nil), read(m, u32(s[0]), n)...)
			st.payloadSet = true
			putI32(s, abi.StatusOK)
		}
	}},
	{"v1_msg_set_header", params(4), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		inst := instOf(ctx)
		st := &inst.st
		k, v := inst.intern(m, u32(s[0]), u32(s[1])), inst.intern(m, u32(s[2]), u32(s[3]))
		switch {
		case st.hook != hookPublish && st.hook != hookRedeliver:
			putI32(s, abi.StatusNotAllowed)
		case k == "":
			putI32(s, abi.StatusInvalid)
		case len(k)+len(v) > p.host.opts.MaxHeaderBytes:
			putI32(s, abi.StatusTooLarge)
		default:
			st.changeHeader(headerChange{key: k, value: v})
			putI32(s, abi.StatusOK)
		}
	}},
	{"v1_msg_del_header", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		inst := instOf(ctx)
		st := &inst.st
		k := inst.intern(m, u32(s[0]), u32(s[1]))
		if st.hook != hookPublish && st.hook != hookRedeliver {
			putI32(s, abi.StatusNotAllowed)
			return
		}
		st.changeHeader(headerChange{key: k, deleted: true})
		putI32(s, abi.StatusOK)
	}},
	{"v1_event_subscription", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, stateOf(ctx).sub, u32(s[0]), u32(s[1])))
	}},
	{"v1_event_group", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, stateOf(ctx).group, u32(s[0]), u32(s[1])))
	}},
	{"v1_event_attempt", nil, params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, int32(stateOf(ctx).attempt))
	}},
	{"v1_event_in_flight_ns", nil, []api.ValueType{i64}, func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(stateOf(ctx).inFlight)
	}},
	{"v1_event_reason", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, stateOf(ctx).reason, u32(s[0]), u32(s[1])))
	}},
	{"v1_emit", params(4), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		inst := instOf(ctx)
		st := &inst.st
		topic := inst.intern(m, u32(s[0]), u32(s[1]))
		n := u32(s[3])
		switch {
		case st.hook == hookInit:
			putI32(s, abi.StatusNotAllowed)
		case len(st.emits) >= p.spec.MaxEmits:
			putI32(s, abi.StatusLimit)
		case broker.ValidateTopic(topic) != nil:
			putI32(s, abi.StatusInvalid)
		case int(n) > p.host.opts.MaxMessageBytes:
			putI32(s, abi.StatusTooLarge)
		default:
			payload := append([]byte(nil), read(m, u32(s[2]), n)...)
			st.emits = append(st.emits, broker.Draft{Topic: topic, Payload: payload})
			putI32(s, int32(len(st.emits)-1))
		}
	}},
	{"v1_emit_header", params(5), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		inst := instOf(ctx)
		st := &inst.st
		h := int32(u32(s[0]))
		k, v := inst.intern(m, u32(s[1]), u32(s[2])), inst.intern(m, u32(s[3]), u32(s[4]))
		switch {
		case h < 0 || int(h) >= len(st.emits):
			putI32(s, abi.StatusInvalid)
		case k == "":
			putI32(s, abi.StatusInvalid)
		case len(k)+len(v) > p.host.opts.MaxHeaderBytes:
			putI32(s, abi.StatusTooLarge)
		default:
			d := &st.emits[h]
			if d.Headers == nil {
				d.Headers = make(map[string]string)
			}
			d.Headers[k] = v
			putI32(s, abi.StatusOK)
		}
	}},
}

var hostFuncIndex = func() map[string]*hostFunc {
	m := make(map[string]*hostFunc, len(hostFuncs))
	for i := range hostFuncs {
		m[hostFuncs[i].name] = &hostFuncs[i]
	}
	return m
}()

// instantiateHostModule defines the "tinybroker" module in r, bound to p.
func instantiateHostModule(ctx context.Context, r wazero.Runtime, p *plugin) error {
	b := r.NewHostModuleBuilder(hostModule)
	for i := range hostFuncs {
		f := &hostFuncs[i]
		b = b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			f.fn(p, ctx, m, stack)
		}), f.params, f.results).Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}
