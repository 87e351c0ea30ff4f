package plugin

import (
	"runtime"
	"strconv"
	"unsafe"

	"github.com/tinybroker/tinybroker/internal/abi"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"
)

// call is the current call from the broker: its hook, abi.HookNone between calls. gen
// numbers the calls, so that an Event kept past its call, or a Message used in a call of
// another hook, is caught rather than silently reading another call's message.
var call struct {
	hook abi.Hook
	gen  uint32
}

// begin starts a call of hook h and returns its generation.
func begin(h abi.Hook) uint32 {
	beginWrites()
	call.gen++
	if call.gen == 0 { // never 0: the zero Message and Event are never current
		call.gen = 1
	}
	call.hook = h
	return call.gen
}

func end() { call.hook = abi.HookNone }

func init() {
	bridge.Run[bridge.Publish] = runPublish
	bridge.Run[bridge.Ack] = func(fn any) int64 {
		f, _ := fn.(func(*Message, Event))
		return runAck(f)
	}
	bridge.Run[bridge.Redeliver] = func(fn any) int64 {
		f, _ := fn.(func(*Message, Event) RedeliverVerdict)
		return runRedeliver(f)
	}
	bridge.Run[bridge.Tick] = func(fn any) int64 {
		f, _ := fn.(func())
		return run(abi.HookTick, func(uint32) int64 {
			if f != nil {
				f()
			}
			return 0
		})
	}
}

// messages are the Messages of the three hooks, reused from call to call: a heap allocation
// costs a Go plugin a few hundred ns, more than the rest of a simple hook call. Each hook has
// its own, so that a Message kept from one hook and used in another is caught.
var messages [3]Message

// message makes the Message of hook h the one of the call gen. It is reset, keeping its
// storage, only if the last call left something in it: a hook that only reads headers one by
// one (Header) leaves nothing, and its next call costs one store.
func message(h abi.Hook, gen uint32) *Message {
	m := &messages[h-abi.HookPublish]
	if m.have != 0 || len(m.changes) != 0 || len(m.headers) != 0 {
		m.reset()
	}
	m.gen = gen
	return m
}

// reset empties m for its next call, keeping its storage. A map is cleared only if it was
// used: clearing even an empty map costs a Go plugin a random reseed. A few changes are
// zeroed in a loop, cheaper than clear's three function calls (as assigning a whole Message
// would be: the loop sets each change's fields, and reset each field, because assigning zero
// values in whole is compiled into clear).
func (m *Message) reset() {
	if len(m.headers) > 0 {
		clear(m.headers)
	}
	if len(m.changes) <= maxLinear {
		for i := range m.changes {
			c := &m.changes[i]
			c.key, c.value = "", ""
		}
	} else {
		clear(m.changes)
	}
	if len(m.changed) > 0 {
		clear(m.changed)
	}
	m.have, m.topic, m.payload, m.id, m.key, m.changes = 0, "", nil, "", "", m.changes[:0]
}

// The hooks' functions run between begin and end: each defers finish, which ends the call
// and, only if the hook did not return (it panicked), logs the panic.
func run(h abi.Hook, body func(gen uint32) int64) (v int64) {
	gen := begin(h)
	returned := false
	defer finish(&returned)
	v = body(gen)
	endWrites()
	returned = true
	return v
}

// finish ends the call whose function deferred it; *returned says whether the hook returned.
// It calls recover only if it did not: calling recover on every call would cost every call.
func finish(returned *bool) {
	if !*returned {
		repanic(recover())
	}
	end()
}

// runPublish is run written out for on_publish, the hook every message may pay for: each
// function call costs a Go plugin some 20–30 ns (Go's WebAssembly code keeps its own stack in
// linear memory and can unwind and resume any call), so the common path makes few. It is
// bridge.Run[bridge.Publish] itself, fn the function given to onpublish.Handle (nil if none
// was), with no wrapper between; its deferred function is a literal, called directly, where
// defer finish(&returned) would call a wrapper that calls finish.
func runPublish(fn any) (v int64) {
	f, _ := fn.(func(*Message) Verdict)
	gen := begin(abi.HookPublish)
	returned := false
	defer func() {
		if !returned {
			repanic(recover())
		}
		end()
	}()
	if f != nil {
		vd := f(message(abi.HookPublish, gen))
		if vd.reason != "" {
			setReason(vd.reason)
		}
		v = int64(uint64(vd.action) | uint64(vd.arg)<<32)
	}
	endWrites()
	returned = true
	return v
}

func runAck(f func(*Message, Event)) int64 {
	return run(abi.HookAck, func(gen uint32) int64 {
		if f != nil {
			f(message(abi.HookAck, gen), Event{gen: gen})
		}
		return 0
	})
}

func runRedeliver(f func(*Message, Event) RedeliverVerdict) int64 {
	return run(abi.HookRedeliver, func(gen uint32) int64 {
		if f == nil {
			return 0
		}
		return f(message(abi.HookRedeliver, gen), Event{gen: gen}).encode()
	})
}

// initFn is the function registered with Init.
var initFn func(cfg map[string]string) error

// Init registers f to check and take in the plugin's configuration (the config block of its
// plugin declaration in the broker's configuration file). The broker calls it once per
// instance, before the instance serves any hook; if it returns an error, the broker refuses
// to load the plugin and reports the error's text. Call Init at most once, in func init() (if
// f is nil or Init is called twice, the broker refuses to load the plugin, and says why).
//
// A plugin with no configuration to check need not call Init; it can still read its
// configuration in its hooks with Config and ConfigValue.
func Init(f func(cfg map[string]string) error) {
	switch {
	case f == nil:
		bridge.MisuseInit("plugin.Init was called with a nil function")
	case initFn != nil:
		bridge.MisuseInit("plugin.Init was called twice")
	default:
		initFn = f
	}
}

// runInit implements tb_v1_init.
//
//lint:ignore U1000 called by tb_v1_init in host_wasip1.go, which the host's pass does not build
func runInit() (rc int32) {
	begin(abi.HookInit)
	returned := false
	defer finish(&returned)
	rc = initCall()
	endWrites()
	returned = true
	return rc
}

func initCall() int32 {
	if bridge.Misuse != "" {
		setReason(bridge.Misuse)
		return 1
	}
	for h := range bridge.NumHooks {
		if bridge.Linked[h] && !bridge.Handled[h] {
			pkg := bridge.Packages[h]
			export, _ := abi.HookExport(abi.Hook(h))
			setReason("the plugin imports sdk/go/plugin/" + pkg + ", so it exports " + export +
				", but never calls " + pkg + ".Handle: call it in func init() (a plugin's main function is never run)")
			return 1
		}
	}
	if initFn == nil {
		return 0
	}
	if err := initFn(Config()); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "the plugin's Init function failed"
		}
		setReason(msg)
		return 1
	}
	return 0
}

// repanic is called, with what recover returned, when a call did not return normally. It
// logs a panic of the plugin at error level with its stack — the broker discards the
// plugin's stderr, where the Go runtime would print it — ends the call and panics again, so
// that the call traps and the broker applies the plugin's failure policy.
func repanic(r any) {
	if r == nil { // runtime.Goexit: nothing to log
		return
	}
	stack := make([]byte, 16<<10)
	stack = stack[:runtime.Stack(stack, false)]
	hook := abi.Names[call.hook]
	if call.hook == abi.HookInit {
		hook = "Init" // the function given to Init
	}
	hostLog(int32(LevelError), "panic in "+hook+": "+panicText(r)+"\n\n"+string(stack))
	end()
	panic(r)
}

func panicText(r any) string {
	switch v := r.(type) {
	case error:
		return v.Error()
	case string:
		return v
	case interface{ String() string }:
		return v.String()
	case int:
		return strconv.Itoa(v)
	default:
		return "(a value that is not an error or a string)"
	}
}

// Reading values from the broker. A reader fills buf with at most capacity bytes of the
// value and returns its full length, or a negative number if the value is absent.
type reader func(buf unsafe.Pointer, capacity uint32) int32

const (
	scratchMin = 1 << 10  // the scratch buffer's initial size
	scratchMax = 64 << 10 // values larger than this are read into a buffer of their own
)

// scratch is the buffer every value is first read into; it grows on demand up to
// scratchMax, and is reused by every read.
var scratch = make([]byte, scratchMin)

// read fetches a value: the broker copies it once if the scratch buffer is big enough,
// otherwise it reports the length and read calls again with a buffer big enough (the
// scratch, grown, or one of the value's own). own says whether b is a buffer of its own,
// which the caller may keep, rather than the scratch buffer, which the next read overwrites.
func read(r reader) (b []byte, own, ok bool) {
	buf := scratch
	for {
		n := r(unsafe.Pointer(unsafe.SliceData(buf)), uint32(len(buf)))
		if n < 0 {
			return nil, false, false
		}
		if int(n) <= len(buf) {
			return buf[:n], own, true
		}
		if n <= scratchMax {
			size := len(scratch)
			for size < int(n) {
				size *= 2
			}
			scratch = make([]byte, size)
			buf, own = scratch, false
		} else {
			buf, own = make([]byte, n), true
		}
	}
}

// readString reads a value as a string; ok is false if it is absent. A short value equal to
// one read recently is returned without allocating: a heap allocation costs a Go plugin
// several hundred ns (its share of the wasm runtime's allocator and GC), more than the rest of
// a filter's call, and a filter reads the same few header values, topics and config values
// again and again.
func readString(r reader) (s string, ok bool) {
	b, own, ok := read(r)
	if own {
		return unsafe.String(unsafe.SliceData(b), len(b)), ok
	}
	return intern(b), ok
}

// internMax is the longest value interned.
const internMax = 64

// interned are the last strings read (intern), replaced round-robin.
var (
	interned     [16]string
	nextInterned uint8
)

// intern returns b as a string, the same string as a recent call if they are equal.
func intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > internMax {
		return string(b)
	}
	for _, s := range interned { // the comparison written out: a function for it would not be inlined
		if len(s) == len(b) && sameBytes(unsafe.Pointer(unsafe.StringData(s)), unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))) {
			return s
		}
	}
	s := string(b)
	interned[nextInterned%uint8(len(interned))] = s
	nextInterned++
	return s
}

// readBytes reads a value into a slice of its own; ok is false if it is absent.
func readBytes(r reader) (p []byte, ok bool) {
	b, own, ok := read(r)
	if len(b) == 0 {
		return nil, ok
	}
	if own {
		return b, ok
	}
	return append([]byte(nil), b...), ok
}

// bytesPtr returns the address of p's first byte, as the host functions take it.
func bytesPtr(p []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(p)) }
