package plugins

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
	"github.com/tinybroker/tinybroker/plugins/internal/meter"
)

// HostOptions configure a Host.
type HostOptions struct {
	// CacheDir keeps compiled plugins on disk, so that a restart does not compile them again.
	// Empty: compile in memory only.
	CacheDir        string
	Logger          hclog.Logger
	MaxMessageBytes int // the broker's limits, which plugin output must respect (default:
	MaxHeaderBytes  int // broker.Limits' defaults)
	// MaxHeaders is the most headers a message may have (broker.Limits' default): a
	// plugin whose header changes leave more fails its call.
	MaxHeaders int
	// MaxPluginBytes is the largest .wasm file read (DefaultMaxPluginBytes, 64 MiB).
	MaxPluginBytes int64
	// CountHostCalls counts the host calls plugins make, in PluginStats.HostCalls: for
	// `tinybroker plugin test --bench` and benchmarks. Off, calls skip one atomic add.
	CountHostCalls bool
	// KV keeps the plugins' key-value stores (kv.go); nil: NewMemoryKV, in this process.
	KV KVBackend
}

// Host loads plugins. One Host serves every reload: they share its compilation cache.
type Host struct {
	opts  HostOptions
	log   hclog.Logger
	cache wazero.CompilationCache
	cores *cores // the goroutines guest code may run on at once (bounds.go)
	kv    kvStores

	mu      sync.Mutex
	defined map[string]*definedMetrics // by plugin name, while a loaded plugin holds them (defined.go)
}

// NewHost returns a Host. Close it when done.
func NewHost(opts HostOptions) (*Host, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	def := broker.Limits{MaxMessageBytes: opts.MaxMessageBytes, MaxHeaderBytes: opts.MaxHeaderBytes, MaxHeaders: opts.MaxHeaders}.WithDefaults()
	opts.MaxMessageBytes, opts.MaxHeaderBytes, opts.MaxHeaders = def.MaxMessageBytes, def.MaxHeaderBytes, def.MaxHeaders
	if opts.MaxPluginBytes <= 0 {
		opts.MaxPluginBytes = DefaultMaxPluginBytes
	}
	if opts.KV == nil {
		opts.KV = NewMemoryKV()
	}
	h := &Host{opts: opts, log: opts.Logger, cores: newCores(), kv: kvStores{backend: opts.KV, open: map[string]*kvRef{}},
		defined: map[string]*definedMetrics{}}
	if opts.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("plugin compilation cache %s: %w", opts.CacheDir, err)
		}
		h.cache = c
	} else {
		h.cache = wazero.NewCompilationCache()
	}
	return h, nil
}

// Close releases the compilation cache. Chains loaded by h must be closed first.
func (h *Host) Close(ctx context.Context) error { return h.cache.Close(ctx) }

// Load compiles, checks and warms up every plugin of specs (one instance each, its tb_v1_init
// run), and returns them as a chain in the order given. On any error nothing is kept.
func (h *Host) Load(ctx context.Context, specs []Spec) (*Chain, error) {
	c := &Chain{}
	names := map[string]bool{}
	for i := range specs {
		s := specs[i]
		if names[s.Name] {
			return nil, errors.Join(fmt.Errorf("plugin %q is declared twice", s.Name), c.Close(ctx))
		}
		names[s.Name] = true
		p, err := h.load(ctx, s, 0)
		if err == nil && s.Candidate != nil {
			if p.cand, err = h.loadCandidate(ctx, p, p.spec); err != nil {
				err = errors.Join(err, p.close(ctx))
			}
		}
		if err != nil {
			return nil, errors.Join(err, c.Close(ctx))
		}
		c.add(p)
	}
	return c, nil
}

// plugin is one loaded plugin: its own runtime (for its memory limit), the compiled module,
// a pool of instances, its circuit breaker and counters.
type plugin struct {
	spec       Spec
	host       *Host
	log        hclog.Logger
	rt         wazero.Runtime
	compiled   wazero.CompiledModule
	has        [abi.NumHooks]bool
	exportName [abi.NumHooks]string // the export of each hook the module has: its versioned name, or its first
	hasInbox   bool                 // it exports tb_v1_inbox (inbox.go)
	hasBatch   bool                 // it exports tb_v1_on_publish_batch, and its on_publish is on (batch.go)
	topics     []topicPattern       // spec.Topics, compiled
	anyTopic   bool                 // one of them is ">"
	configText string
	pool       pool
	kv         KVStore // the store of its name, shared with every plugin loaded with that name (kv.go)

	// role is Shadow or Canary for a candidate version (candidate.go), 0 for a plugin's
	// current version, which has its candidate, if any, in cand. recordKV: its instances
	// record their key-value writes, to compare with a shadow candidate's.
	role     CandidateMode
	cand     *candidate
	recordKV bool

	consecutive  atomic.Int32
	openUntil    atomic.Int64  // circuit breaker open until (Unix ns); 0: closed
	hostCalls    atomic.Uint64 // with HostOptions.CountHostCalls
	batched      atomic.Uint64 // on_publish calls made in batches that succeeded
	failures     atomic.Uint64
	skipped      atomic.Uint64 // calls not made because the breaker was open
	ticksSkipped atomic.Uint64 // ticks due while the one before still ran (tick.go)
	metrics      callMetrics   // per hook, for Chain.Metrics (metrics.go)

	// logs is its chain's queue of lines for log topics, with a log_topic (logtopic.go);
	// logBucket bounds the lines it publishes, and logDropped counts those over the bound.
	logs       *logTopics
	logBucket  tokenBucket
	logDropped atomic.Uint64

	defined *definedMetrics // the host's, for this plugin's name (defined.go)

	// base is the parent of every instance's context: cancelled when the plugin is closed,
	// it stops the calls still running (bounds.go).
	base       context.Context
	cancelBase context.CancelFunc
	watch      watch
}

// load loads the plugin of s, as a plugin's current version (role 0) or as its candidate (role
// Shadow or Canary).
func (h *Host) load(ctx context.Context, s Spec, role CandidateMode) (*plugin, error) {
	s.setDefaults()
	if err := s.validate(); err != nil {
		return nil, s.located(err)
	}
	bin := s.Wasm
	if bin == nil {
		var err error
		if bin, err = readModule(ctx, s.Path, h.opts.MaxPluginBytes); err != nil {
			return nil, s.located(fmt.Errorf("plugin %q: %w", s.Name, err))
		}
	}
	// The hash names the version in every log line and metric about it; a hash given is a pin,
	// checked against the module.
	if hash := moduleHash(bin); s.Hash == "" {
		s.Hash = hash
	} else if s.Hash != hash {
		return nil, s.located(fmt.Errorf("plugin %q: its module's hash is %s, not the %s it is pinned to", s.Name, hash, s.Hash))
	}
	log := h.log.Named(s.Name).With("hash", s.Hash)
	if role != 0 {
		log = log.With("candidate", role.String())
	}
	// The module runs metered: its loops and calls come back to the host (meterYield) every
	// meter.Fuel turns, where a call can be stopped and the Go runtime can stop the guest for
	// a collection (bounds.go). Not wazero's WithCloseOnContextDone, which does the same at a
	// far higher price (RATIONALE.md).
	metered, err := meter.Instrument(bin)
	if err != nil {
		return nil, s.located(fmt.Errorf("plugin %q refused: not a valid WebAssembly module: %w", s.Name, err))
	}
	// The memory limit is not the runtime's (WithMemoryLimitPages): wazero would refuse a grow
	// past it without telling the host. Each instance's memory is a guardedMemory instead,
	// which refuses it and notes it, so that the call fails with the reason.
	cfg := wazero.NewRuntimeConfig().WithCompilationCache(h.cache)
	p := &plugin{spec: s, host: h, log: log, rt: wazero.NewRuntimeWithConfig(ctx, cfg),
		topics: compilePatterns(s.Topics), configText: configText(s.Config), role: role,
		recordKV: role == 0 && s.Candidate != nil && s.Candidate.Mode == Shadow}
	p.base, p.cancelBase = context.WithCancel(context.Background())
	p.acquireMetrics()
	p.anyTopic = slices.ContainsFunc(p.topics, func(tp topicPattern) bool { return tp.kind == kindAny })
	if p.kv, err = h.kv.acquire(s.Name, int64(s.KVMaxBytes)); err != nil {
		p.cancelBase()
		p.releaseMetrics()
		_ = p.rt.Close(ctx)
		return nil, s.located(fmt.Errorf("plugin %q: its key-value store: %w", s.Name, err))
	}
	fail := func(err error) (*plugin, error) {
		p.cancelBase()
		p.releaseMetrics()
		_ = p.rt.Close(ctx)
		h.kv.release(s.Name)
		return nil, s.located(fmt.Errorf("plugin %q refused: %w", s.Name, err))
	}
	if p.compiled, err = p.rt.CompileModule(ctx, metered); err != nil {
		// Whose fault: the module's, or the rewrite's (a bug of ours)?
		if orig, oerr := p.rt.CompileModule(ctx, bin); oerr != nil {
			err = oerr
		} else {
			_ = orig.Close(ctx)
			err = fmt.Errorf("%w (the module is valid, but the broker's metering of it is not: a tinybroker bug, please report it)", err)
		}
		return fail(fmt.Errorf("not a valid WebAssembly module: %w", err))
	}
	if err := p.check(); err != nil {
		return fail(err)
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, p.rt); err != nil {
		return fail(err)
	}
	if err := instantiateHostModule(ctx, p.rt); err != nil {
		return fail(err)
	}
	if err := instantiateMeter(ctx, p.rt); err != nil {
		return fail(err)
	}
	p.pool.init(s.PoolSize)
	p.pool.reserve() // warm up one instance now: a bad tb_v1_init refuses the load
	inst, err := p.newInstance(ctx)
	if err != nil {
		return fail(err)
	}
	p.pool.put(inst)
	p.startWatchdog()
	hooks := []string{}
	for k := abi.HookPublish; k < abi.NumHooks; k++ {
		if p.has[k] {
			hooks = append(hooks, abi.Names[k])
		}
	}
	limit := "none"
	if s.CallTimeout > 0 {
		limit = s.CallTimeout.String()
	}
	args := []any{"hooks", hooks, "pool_size", s.PoolSize, "memory_limit", s.MemoryLimitBytes, "call_timeout", limit}
	if p.has[abi.HookTick] {
		args = append(args, "tick_interval", s.TickInterval)
	}
	p.log.Info("plugin loaded", args...)
	return p, nil
}

// check verifies the module against ABI v1: marker, memory, hook signatures, imports.
func (p *plugin) check() error {
	exports := p.compiled.ExportedFunctions()
	if _, ok := exports[abi.Marker]; !ok {
		for name := range exports {
			if v, ok := strings.CutPrefix(name, abi.MarkerPrefix); ok {
				return fmt.Errorf("plugin built for ABI v%s; this broker speaks v1 (rebuild it with an SDK for ABI v1)", v)
			}
		}
		return fmt.Errorf("not a tinybroker plugin: it does not export %s (see docs/ABI.md)", abi.Marker)
	}
	if err := p.checkInbox(exports); err != nil {
		return err
	}
	mem, ok := p.compiled.ExportedMemories()["memory"]
	if !ok {
		return fmt.Errorf("it does not export its memory as \"memory\"")
	}
	if min := uint64(mem.Min()) * 65536; min > uint64(p.spec.MemoryLimitBytes) {
		return fmt.Errorf("its memory starts at %d bytes, over the plugin's memory limit of %d bytes (raise memory_limit_mb)", min, p.spec.MemoryLimitBytes)
	}
	for k := abi.HookInit; k < abi.NumHooks; k++ {
		// Every hook's export carries the version (tb_v1_on_publish); a plugin built before
		// they did exports the first name (tb_on_publish), still accepted. With both, the
		// versioned one is called (docs/ABI.md, "Export names").
		name, old := abi.HookExport(k)
		def, ok := exports[name]
		if !ok {
			name = old
			def, ok = exports[old]
		}
		if !ok {
			continue
		}
		p.exportName[k] = name
		want := api.ValueTypeI64
		if k == abi.HookInit {
			want = api.ValueTypeI32
		}
		if len(def.ParamTypes()) != 0 || !slices.Equal(def.ResultTypes(), []api.ValueType{want}) {
			return fmt.Errorf("export %s has signature %v -> %v; ABI v1 wants () -> %s", name, def.ParamTypes(), def.ResultTypes(), api.ValueTypeName(want))
		}
		p.has[k] = true
	}
	enabled := p.spec.Hooks
	if len(enabled) > 0 {
		for k := abi.HookPublish; k < abi.NumHooks; k++ {
			if p.has[k] && !slices.Contains(enabled, abi.Names[k]) {
				p.has[k] = false
			} else if !p.has[k] && slices.Contains(enabled, abi.Names[k]) {
				name, _ := abi.HookExport(k)
				return fmt.Errorf("hooks lists %s but the module does not export %s", abi.Names[k], name)
			}
		}
	}
	// on_tick runs only at the plugin's tick_interval: without one, an export of it is left
	// alone (a plugin built for ticks may be loaded without them).
	switch {
	case p.spec.TickInterval == 0:
		p.has[abi.HookTick] = false
	case !p.has[abi.HookTick]:
		name, _ := abi.HookExport(abi.HookTick)
		if p.exportName[abi.HookTick] == "" {
			return fmt.Errorf("tick_interval is set but the module does not export %s", name)
		}
		return fmt.Errorf("tick_interval is set but hooks leaves out %s", abi.NameTick)
	}
	if err := p.checkBatch(exports); err != nil {
		return err
	}
	if !p.has[abi.HookPublish] && !p.has[abi.HookAck] && !p.has[abi.HookRedeliver] && !p.has[abi.HookTick] {
		var names []string
		for k := abi.HookPublish; k < abi.NumHooks; k++ {
			name, _ := abi.HookExport(k)
			names = append(names, name)
		}
		return fmt.Errorf("it exports no hook: export at least one of %s", strings.Join(names, ", "))
	}
	imports := p.compiled.ImportedFunctions()
	imports = imports[:len(imports)-1] // the last is the meter's (meter.Instrument): the module's own come before it
	for _, def := range imports {
		mod, name, _ := def.Import()
		switch mod {
		case "wasi_snapshot_preview1":
		case abi.HostModule:
			f := hostFuncIndex[name]
			if f == nil {
				return fmt.Errorf("it imports %s.%s, which ABI v1 does not have", mod, name)
			}
			if !slices.Equal(def.ParamTypes(), f.params) || !slices.Equal(def.ResultTypes(), f.results) {
				return fmt.Errorf("it imports %s.%s as %v -> %v; ABI v1 defines %v -> %v", mod, name, def.ParamTypes(), def.ResultTypes(), f.params, f.results)
			}
		default:
			return fmt.Errorf("it imports %s.%s; plugins may import only %q and wasi_snapshot_preview1", mod, name, abi.HostModule)
		}
	}
	return nil
}

// instance is one instantiation of a plugin's module; it serves one call at a time.
type instance struct {
	p     *plugin
	mod   api.Module
	gmem  *guardedMemory // its memory, which host functions read and write
	fns   [abi.NumHooks]api.Function
	ctx   callCtx // carries the instance to host functions
	stack []uint64
	st    *callState // the state of the call in progress: own, or in a batch the current message's
	own   callState  // the state of a call of one message, reset after each call
	box   inbox      // with the plugin's hasInbox
	batch batchState // with the plugin's hasBatch
	// kv is the plugin's store (host functions v1_kv_*), or with a shadow candidate a
	// kvRecorder of it (the current version's) or a kvOverlay over it (the candidate's), whose
	// log of writes is kvLog, and overlay the candidate's (candidate.go).
	kv      KVStore
	kvLog   *kvLog
	overlay *kvOverlay

	// The instance counts its calls (per hook) and the host calls they made itself, without
	// an atomic operation per call; the plugin adds them to its counters when it collects
	// the idle instances (plugin.collect, for Stats and Metrics) and when one is discarded.
	// Only the goroutine that holds the instance touches them.
	uncounted [abi.NumHooks]uint64
	hostCalls uint64
	batched   uint64 // calls made in batches that succeeded
	sampled   uint64 // calls made, for the latency sample (one in latencySample)

	strs [8]string // recently interned strings (instance.intern)

	// Its context, which wazero watches during its calls: cancelled, with a cause, by the
	// watchdog when a call runs past call_timeout, and when the plugin is closed (bounds.go).
	ictx   context.Context
	cancel context.CancelCauseFunc
	// phase is counted up as each call starts and ends (odd: a call runs); seenPhase and
	// seenFor are the watchdog's, under watch.mu.
	phase     atomic.Uint64
	seenPhase uint64
	seenFor   time.Duration
	nextStr   uint8
}

func (p *plugin) newInstance(ctx context.Context) (*instance, error) {
	inst := &instance{p: p, stack: make([]uint64, 1)}
	inst.st = &inst.own
	inst.kv = p.kv
	switch {
	case p.role == Shadow:
		inst.overlay = &kvOverlay{base: p.kv}
		inst.kv, inst.kvLog = inst.overlay, &inst.overlay.log
	case p.recordKV:
		r := &kvRecorder{KVStore: p.kv}
		inst.kv, inst.kvLog = r, &r.log
	}
	inst.ictx, inst.cancel = context.WithCancelCause(p.base)
	inst.ctx = callCtx{Context: inst.ictx, inst: inst, bare: true}
	inst.st.hook = abi.HookInit
	mcfg := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize").
		WithSysWalltime().WithSysNanotime().WithRandSource(rand.Reader).
		WithStderr(stderrLog{p}) // a Go guest's fatal errors ("out of memory") land here
	limit := uint64(p.spec.MemoryLimitBytes)
	ictx := experimental.WithMemoryAllocator(inst.ictx, experimental.MemoryAllocatorFunc(func(_, _ uint64) experimental.LinearMemory {
		inst.gmem = &guardedMemory{limit: limit}
		return inst.gmem
	}))
	// Instantiation (_initialize and tb_v1_init) has a limit of its own, at least 5 s: a
	// runtime's start-up takes longer than a message's call.
	ictx, cancel := context.WithTimeout(ictx, max(p.spec.CallTimeout, 5*time.Second))
	defer cancel()
	cctx := &callCtx{Context: ictx, inst: inst}
	mod, err := p.rt.InstantiateModule(cctx, p.compiled, mcfg)
	if err == nil {
		err = inst.memoryRefused()
		if err != nil {
			_ = mod.Close(context.Background())
		}
	}
	if err != nil {
		inst.cancel(nil)
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	inst.mod = mod
	if p.hasInbox {
		inst.box.alloc = mod.ExportedFunction(abi.InboxExport)
	}
	if p.hasBatch {
		inst.batch.fn = mod.ExportedFunction(abi.BatchExport)
	}
	for k := abi.HookInit; k < abi.NumHooks; k++ {
		if name := p.exportName[k]; name != "" && (p.has[k] || k == abi.HookInit) {
			inst.fns[k] = mod.ExportedFunction(name)
		}
	}
	if f := inst.fns[abi.HookInit]; f != nil {
		var err error
		if p.hasInbox {
			err = inst.fillInbox(cctx)
		}
		if err == nil {
			err = f.CallWithStack(cctx, inst.stack)
		}
		if merr := inst.memoryRefused(); merr != nil {
			err = merr
		}
		if err == nil && p.hasInbox {
			err = inst.takeWrites()
		}
		if err != nil {
			_ = mod.Close(context.Background())
			inst.cancel(nil)
			return nil, fmt.Errorf("tb_v1_init failed: %w", err)
		}
		if rc := int32(uint32(inst.stack[0])); rc != 0 {
			_ = mod.Close(context.Background())
			inst.cancel(nil)
			why := inst.st.why
			if why == "" {
				why = "no reason given (call v1_set_reason before returning)"
			}
			return nil, fmt.Errorf("tb_v1_init returned %d: %s", rc, why)
		}
	}
	inst.st.reset()
	inst.hostCalls = 0
	if inst.kvLog != nil {
		inst.resetKV() // tb_v1_init's writes are no message's
	}
	p.track(inst)
	return inst, nil
}

// invokeSampled is run's call of the guest when its latency is measured (one call in
// latencySample): its deferred observation is kept off the common path.
func (p *plugin) invokeSampled(inst *instance, k abi.Hook) (uint64, error) {
	defer p.metrics.observe(k, time.Now())
	return p.called(inst, p.callHook(&inst.ctx, inst, k))
}

// callHook fills the inbox, if the plugin has one, and calls hook k (written out in run, for
// the common path).
func (p *plugin) callHook(ctx *callCtx, inst *instance, k abi.Hook) error {
	if p.hasInbox && !inst.writeInbox() {
		if err := inst.fillInbox(ctx); err != nil {
			return err
		}
	}
	inst.stack[0] = 0
	return inst.fns[k].CallWithStack(ctx, inst.stack)
}

// called completes a call of the guest: err is what CallWithStack returned. A failed call
// discards inst.
func (p *plugin) called(inst *instance, err error) (uint64, error) {
	if err != nil || inst.gmem.refused != 0 {
		return 0, p.callFailed(inst, err)
	}
	return inst.stack[0], nil
}

// callFailed discards inst, whose call failed with err or tried to grow its memory past the
// limit, and returns why the call failed.
func (p *plugin) callFailed(inst *instance, err error) error {
	if inst.gmem.refused != 0 {
		err = inst.memoryRefused()
	} else {
		err = inst.stoppedWhy(err)
	}
	p.pool.discard(inst) // its calls counted first
	return err
}

// flush adds the calls inst counted, and the host calls they made, to the plugin's counters.
// The caller holds inst (or the pool's lock while inst is idle).
func (p *plugin) flush(inst *instance) {
	for k, n := range inst.uncounted {
		if n > 0 {
			p.metrics.hooks[k].calls.Add(n)
			inst.uncounted[k] = 0
		}
	}
	if inst.batched > 0 {
		p.batched.Add(inst.batched)
		inst.batched = 0
	}
	if inst.hostCalls > 0 {
		if p.host.opts.CountHostCalls {
			p.hostCalls.Add(inst.hostCalls)
		}
		inst.hostCalls = 0
	}
}

// collect brings the plugin's counters up to date with its idle instances' (a busy one's
// calls are added once it is idle again, by the next collect): every call made so far when no
// call is in progress.
func (p *plugin) collect() {
	pl := &p.pool
	pl.mu.Lock()
	for _, inst := range pl.idle {
		p.flush(inst)
	}
	pl.mu.Unlock()
	if inst := pl.hot.Swap(nil); inst != nil {
		p.flush(inst)
		pl.put(inst)
	}
}

// errMemoryLimit is the failure of a call that tried to grow the memory past its limit.
var errMemoryLimit = errors.New("memory limit exceeded")

// memoryRefused returns, if the instance tried to grow its memory past its limit, the
// failure that says so, and clears the note.
func (inst *instance) memoryRefused() error {
	g := inst.gmem
	if g == nil || g.refused == 0 {
		return nil
	}
	want := g.refused
	g.refused = 0
	return fmt.Errorf("%w: the plugin tried to grow its memory to %d bytes, over its memory limit of %d bytes (memory_limit_mb)", errMemoryLimit, want, g.limit)
}

// guardedMemory is an instance's linear memory: wazero asks it to grow, and it refuses past
// the plugin's memory limit, noting the size that was asked for (memory.grow returns -1 to
// the plugin). Only the goroutine that calls the instance touches it.
type guardedMemory struct {
	buf     []byte
	limit   uint64
	refused uint64 // the size last refused, until memoryRefused reports it; 0: none
}

var _ experimental.LinearMemory = (*guardedMemory)(nil)

// Reallocate implements experimental.LinearMemory.
func (g *guardedMemory) Reallocate(size uint64) []byte {
	if size > g.limit {
		g.refused = size
		return nil
	}
	if size <= uint64(cap(g.buf)) { // bytes past len were never used: still zero
		g.buf = g.buf[:size]
		return g.buf
	}
	b := make([]byte, size, max(size, min(2*uint64(cap(g.buf)), g.limit)))
	copy(b, g.buf)
	g.buf = b
	return b
}

// Free implements experimental.LinearMemory.
func (g *guardedMemory) Free() { g.buf = nil }

// breakerOpen reports whether calls are suspended; past the cool-down it lets calls through
// again (a failure reopens it at once, since the count of failures in a row is kept).
func (p *plugin) breakerOpen() bool {
	until := p.openUntil.Load()
	if until == 0 { // closed: the common case, inlined
		return false
	}
	return p.breakerStillOpen(until)
}

func (p *plugin) breakerStillOpen(until int64) bool {
	if nowNanos() < until {
		p.skipped.Add(1)
		return true
	}
	p.openUntil.CompareAndSwap(until, 0)
	return false
}

func (p *plugin) failed(k abi.Hook, err error) {
	p.failures.Add(1)
	p.metrics.failed(k, err)
	n := p.consecutive.Add(1)
	p.log.Warn("plugin call failed; instance discarded", "hook", abi.Names[k], "policy", p.policy(), "error", err)
	if int(n) >= p.spec.BreakerFailures && p.openUntil.Load() == 0 {
		p.openUntil.Store(nowNanos() + int64(p.spec.BreakerCooldown))
		p.log.Error("CIRCUIT BREAKER OPEN: plugin failed too often; applying its failure policy without calling it",
			"failures_in_a_row", n, "cooldown", p.spec.BreakerCooldown, "policy", p.policy())
	}
}

func (p *plugin) succeeded() {
	if p.consecutive.Load() != 0 {
		p.consecutive.Store(0)
	}
}

// close unloads p: calls still running when ctx is done are stopped.
func (p *plugin) close(ctx context.Context) error {
	p.pool.close(ctx)
	p.cancelBase()
	p.stopWatchdog()
	p.host.kv.release(p.spec.Name) // after its calls; a reload's plugin of this name, loaded before, keeps the store
	p.releaseMetrics()
	err := p.rt.Close(ctx)
	if p.cand != nil {
		err = errors.Join(err, p.cand.p.close(ctx))
	}
	return err
}

func (f FailurePolicy) String() string {
	switch f {
	case FailClosed:
		return "fail_closed"
	case FailDeadLetter:
		return "dead_letter"
	}
	return "fail_open"
}

// pool holds at most size instances; get creates one when none is idle and the limit allows,
// and otherwise waits for one to be put back or discarded. A mutex and a slice rather than
// channels: an uncontended get and put cost a few atomic operations, against about 100 ns for
// a channel receive and send, on every plugin call. In front of them, one idle instance
// waits in hot: taking it is one atomic swap and putting it back one compare-and-swap, half
// the atomic operations of the mutex, so a stream of calls from one goroutine (a publishing
// stream) keeps using the same instance, warm in the CPU's caches.
type pool struct {
	hot     atomic.Pointer[instance]
	mu      sync.Mutex
	freed   sync.Cond // signalled when an instance is put back or discarded
	idle    []*instance
	alive   int // instances created and not discarded: idle, busy or being created
	size    int
	waiting atomic.Int32 // callers waiting in get (changed with mu held)
	closed  bool
}

func (pl *pool) init(size int) {
	pl.freed.L = &pl.mu
	pl.size = size
	pl.idle = make([]*instance, 0, size)
}

var errPoolClosed = errors.New("plugin unloaded")

// reserve counts one more instance alive, for the load's warm-up instance.
func (pl *pool) reserve() {
	pl.mu.Lock()
	pl.alive++
	pl.mu.Unlock()
}

func (pl *pool) get(p *plugin) (*instance, error) {
	if inst := pl.hot.Swap(nil); inst != nil { // even when closing, as below
		return inst, nil
	}
	pl.mu.Lock()
	for {
		if n := len(pl.idle); n > 0 { // even when closing: a call that started before still runs
			inst := pl.idle[n-1]
			pl.idle[n-1] = nil
			pl.idle = pl.idle[:n-1]
			pl.mu.Unlock()
			return inst, nil
		}
		if pl.closed {
			pl.mu.Unlock()
			return nil, instanceError{errPoolClosed}
		}
		if pl.alive < pl.size {
			break
		}
		pl.waiting.Add(1)
		if inst := pl.hot.Swap(nil); inst != nil { // put there before waiting was counted
			pl.waiting.Add(-1)
			pl.mu.Unlock()
			return inst, nil
		}
		pl.freed.Wait()
		pl.waiting.Add(-1)
	}
	pl.alive++
	pl.mu.Unlock()
	inst, err := p.newInstance(context.Background())
	if err != nil {
		pl.release()
		return nil, instanceError{err}
	}
	return inst, nil
}

// release forgets one instance alive, and wakes a caller waiting to create one.
func (pl *pool) release() {
	pl.mu.Lock()
	pl.alive--
	if pl.waiting.Load() > 0 {
		pl.freed.Signal()
	}
	pl.mu.Unlock()
}

// put returns a healthy instance to the pool. An instance put in hot after close has taken
// the idle ones is found by close's next round, which waits for every instance alive.
func (pl *pool) put(inst *instance) {
	if pl.waiting.Load() == 0 && pl.hot.CompareAndSwap(nil, inst) {
		if pl.waiting.Load() == 0 {
			return
		}
		// A caller began to wait after it last looked in hot: wake it through the mutex.
		if inst = pl.hot.Swap(nil); inst == nil {
			return // another caller took it
		}
	}
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		pl.discard(inst)
		return
	}
	pl.idle = append(pl.idle, inst)
	if pl.waiting.Load() > 0 {
		pl.freed.Signal()
	}
	pl.mu.Unlock()
}

func (pl *pool) discard(inst *instance) {
	inst.p.flush(inst)
	_ = inst.mod.Close(context.Background())
	inst.p.untrack(inst)
	pl.release()
}

// close discards idle instances and waits (until ctx is done) for busy ones to come back.
func (pl *pool) close(ctx context.Context) {
	pl.mu.Lock()
	pl.closed = true
	pl.freed.Broadcast() // callers waiting for an instance get errPoolClosed
	pl.mu.Unlock()
	for {
		pl.mu.Lock()
		idle := pl.idle
		pl.idle = nil
		pl.mu.Unlock()
		if inst := pl.hot.Swap(nil); inst != nil {
			idle = append(idle, inst)
		}
		for _, inst := range idle {
			pl.discard(inst)
		}
		pl.mu.Lock()
		alive := pl.alive
		pl.mu.Unlock()
		if alive == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// configText renders a config map as the ABI's "key=value\n" lines, sorted by key.
func configText(cfg map[string]string) string {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	esc := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(esc.Replace(k))
		b.WriteByte('=')
		b.WriteString(esc.Replace(cfg[k]))
		b.WriteByte('\n')
	}
	return b.String()
}

func nowNanos() int64 { return time.Now().UnixNano() }

// stderrLog logs what a plugin writes to stderr, one entry per write, and publishes it to
// the plugin's log topic, if it has one, as a line at level warn.
type stderrLog struct{ p *plugin }

func (w stderrLog) Write(b []byte) (int, error) {
	if msg := strings.TrimSpace(string(b)); msg != "" {
		w.p.log.Warn("plugin stderr", "output", msg)
		w.p.logToTopic(hclog.Warn, msg)
	}
	return len(b), nil
}
