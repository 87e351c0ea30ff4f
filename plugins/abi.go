package plugins

import (
	"context"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/broker"
)

// The ABI v1 names (docs/ABI.md).
const (
	hostModule   = "tinybroker"
	abiMarker    = "tinybroker_abi_v1"
	markerPrefix = "tinybroker_abi_v"
)

// Status codes returned by writing host functions.
const (
	statusOK         = 0
	statusInvalid    = -1
	statusTooLarge   = -2
	statusNotAllowed = -3
	statusLimit      = -4
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
type callState struct {
	hook    hookKind
	topic   string
	payload []byte
	headers map[string]string
	id      string
	names   []string // sorted header names, built on first use

	sub, group, reason string
	attempt            uint32
	inFlight           int64

	newTopic   *string
	newPayload []byte
	payloadSet bool
	setH       map[string]string
	delH       []string
	emits      []broker.Draft
	why        string
}

// instKey carries the calling instance in the context wazero passes to host functions.
type instKey struct{}

func stateOf(ctx context.Context) *callState {
	return ctx.Value(instKey{}).(*instance).cur
}

// read returns a copy of guest memory [ptr, ptr+n), trapping the call if it is out of bounds.
func read(m api.Module, ptr, n uint32) []byte {
	b, ok := m.Memory().Read(ptr, n)
	if !ok {
		panic(fmt.Errorf("tinybroker ABI: pointer %d length %d is outside the plugin's memory (%d bytes)", ptr, n, m.Memory().Size()))
	}
	return b
}

func readString(m api.Module, ptr, n uint32) string { return string(read(m, ptr, n)) }

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
	if n > 0 && !m.Memory().Write(buf, []byte(v[:n])) {
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
		msg := readString(m, u32(s[1]), u32(s[2]))
		switch int32(u32(s[0])) {
		case 0:
			p.log.Trace(msg)
		case 1:
			p.log.Debug(msg)
		case 2:
			p.log.Info(msg)
		case 3:
			p.log.Warn(msg)
		default:
			p.log.Error(msg)
		}
	}},
	{"v1_now", nil, []api.ValueType{i64}, func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(nowNanos())
	}},
	{"v1_config", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, p.configText, u32(s[0]), u32(s[1])))
	}},
	{"v1_config_get", params(4), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		v, ok := p.spec.Config[readString(m, u32(s[0]), u32(s[1]))]
		if !ok {
			putI32(s, -1)
			return
		}
		putI32(s, giveString(m, v, u32(s[2]), u32(s[3])))
	}},
	{"v1_set_reason", params(2), nil, func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		stateOf(ctx).why = readString(m, u32(s[0]), u32(s[1]))
	}},
	{"v1_msg_topic", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, giveString(m, stateOf(ctx).topic, u32(s[0]), u32(s[1])))
	}},
	{"v1_msg_payload", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		putI32(s, give(m, stateOf(ctx).payload, u32(s[0]), u32(s[1])))
	}},
	{"v1_msg_header", params(4), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		v, ok := stateOf(ctx).headers[readString(m, u32(s[0]), u32(s[1]))]
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
		if st.names == nil && len(st.headers) > 0 {
			st.names = make([]string, 0, len(st.headers))
			for k := range st.headers {
				st.names = append(st.names, k)
			}
			slices.Sort(st.names)
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
		st := stateOf(ctx)
		topic := readString(m, u32(s[0]), u32(s[1]))
		switch {
		case st.hook != hookPublish:
			putI32(s, statusNotAllowed)
		case broker.ValidateTopic(topic) != nil:
			putI32(s, statusInvalid)
		default:
			st.newTopic = &topic
			putI32(s, statusOK)
		}
	}},
	{"v1_msg_set_payload", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		st := stateOf(ctx)
		switch n := u32(s[1]); {
		case st.hook != hookPublish:
			putI32(s, statusNotAllowed)
		case int(n) > p.host.opts.MaxMessageBytes:
			putI32(s, statusTooLarge)
		default:
			st.newPayload = append([]byte(nil), read(m, u32(s[0]), n)...)
			st.payloadSet = true
			putI32(s, statusOK)
		}
	}},
	{"v1_msg_set_header", params(4), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		st := stateOf(ctx)
		k, v := readString(m, u32(s[0]), u32(s[1])), readString(m, u32(s[2]), u32(s[3]))
		switch {
		case st.hook != hookPublish && st.hook != hookRedeliver:
			putI32(s, statusNotAllowed)
		case k == "":
			putI32(s, statusInvalid)
		case len(k)+len(v) > p.host.opts.MaxHeaderBytes:
			putI32(s, statusTooLarge)
		default:
			if st.setH == nil {
				st.setH = make(map[string]string)
			}
			st.setH[k] = v
			st.delH = slices.DeleteFunc(st.delH, func(d string) bool { return d == k })
			putI32(s, statusOK)
		}
	}},
	{"v1_msg_del_header", params(2), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		st := stateOf(ctx)
		k := readString(m, u32(s[0]), u32(s[1]))
		if st.hook != hookPublish && st.hook != hookRedeliver {
			putI32(s, statusNotAllowed)
			return
		}
		delete(st.setH, k)
		st.delH = append(st.delH, k)
		putI32(s, statusOK)
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
		st := stateOf(ctx)
		topic := readString(m, u32(s[0]), u32(s[1]))
		n := u32(s[3])
		switch {
		case st.hook == hookInit:
			putI32(s, statusNotAllowed)
		case len(st.emits) >= p.spec.MaxEmits:
			putI32(s, statusLimit)
		case broker.ValidateTopic(topic) != nil:
			putI32(s, statusInvalid)
		case int(n) > p.host.opts.MaxMessageBytes:
			putI32(s, statusTooLarge)
		default:
			payload := append([]byte(nil), read(m, u32(s[2]), n)...)
			st.emits = append(st.emits, broker.Draft{Topic: topic, Payload: payload})
			putI32(s, int32(len(st.emits)-1))
		}
	}},
	{"v1_emit_header", params(5), params(1), func(p *plugin, ctx context.Context, m api.Module, s []uint64) {
		st := stateOf(ctx)
		h := int32(u32(s[0]))
		k, v := readString(m, u32(s[1]), u32(s[2])), readString(m, u32(s[3]), u32(s[4]))
		switch {
		case h < 0 || int(h) >= len(st.emits):
			putI32(s, statusInvalid)
		case k == "":
			putI32(s, statusInvalid)
		case len(k)+len(v) > p.host.opts.MaxHeaderBytes:
			putI32(s, statusTooLarge)
		default:
			d := &st.emits[h]
			if d.Headers == nil {
				d.Headers = make(map[string]string)
			}
			d.Headers[k] = v
			putI32(s, statusOK)
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
