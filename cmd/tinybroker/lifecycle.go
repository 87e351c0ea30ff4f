package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/plugins"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	"github.com/tinybroker/tinybroker/server"
)

// The plugin lifecycle of the admin API (server.PluginLifecycle): every change reads the
// stored set, edits it, loads the chain it makes, stores it and installs the chain, under
// pluginManager.mu; a module that does not load changes nothing.

var _ server.PluginLifecycle = (*pluginManager)(nil)

// errStale: a canary's rollback came after its candidate was already gone.
var errStale = errors.New("the candidate is no longer deployed")

// change applies edit to the stored set and installs the chain of the result, and returns
// the plugin name as ListPlugins shows it (nil if it is gone).
func (pm *pluginManager) change(ctx context.Context, name string, edit func(set *pluginSet) error) (*adminpb.Plugin, error) {
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name: a plugin name is required")
	}
	if err := plugins.CheckName(name); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "name: %v", err)
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	set, rev, err := pm.store.load(ctx)
	if err != nil {
		return nil, err
	}
	next := set.clone()
	if err := edit(&next); err != nil {
		return nil, err
	}
	chain, err := pm.load(ctx, pm.cfgSpecs, next)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "refused, nothing changed: %v", err)
	}
	newRev, err := pm.store.save(ctx, next, rev)
	if err != nil {
		if chain != nil {
			_ = chain.Close(ctx)
		}
		if errors.Is(err, errSetChanged) {
			return nil, status.Error(codes.Aborted, err.Error())
		}
		return nil, err
	}
	pm.install(chain, next, newRev)
	return pm.describe(name), nil
}

// inConfig reports whether the config file declares the plugin. pm.mu must be held.
func (pm *pluginManager) inConfig(name string) bool {
	return slices.ContainsFunc(pm.cfgSpecs, func(s plugins.Spec) bool { return s.Name == name })
}

// known returns the stored plugin of that name, adding an empty one for a plugin the
// config file declares; NOT_FOUND for any other. pm.mu must be held.
func (pm *pluginManager) known(set *pluginSet, name string) (*storedPlugin, error) {
	if sp := set.find(name); sp != nil {
		return sp, nil
	}
	if !pm.inConfig(name) {
		return nil, status.Errorf(codes.NotFound, "no plugin %q: tinybroker plugin ls lists them", name)
	}
	set.Plugins = append(set.Plugins, storedPlugin{Name: name})
	return &set.Plugins[len(set.Plugins)-1], nil
}

func (pm *pluginManager) DeployPlugin(ctx context.Context, req *adminpb.DeployPluginRequest) (*adminpb.DeployPluginResponse, error) {
	wasm := req.GetModule()
	switch {
	case len(wasm) == 0:
		return nil, status.Error(codes.InvalidArgument, "module: the .wasm module is missing")
	case int64(len(wasm)) > pm.maxBytes:
		return nil, status.Errorf(codes.InvalidArgument, "module: %d bytes, over the limit of %d (limits { max_plugin_bytes })", len(wasm), pm.maxBytes)
	}
	cand, err := candidateOf(req)
	if err != nil {
		return nil, err
	}
	hash := moduleHash(wasm)
	p, err := pm.change(ctx, req.GetName(), func(set *pluginSet) error {
		sp := set.find(req.GetName())
		if pm.inConfig(req.GetName()) {
			if req.GetSettings() != nil {
				return status.Errorf(codes.InvalidArgument, "settings: plugin %q is declared in the config file, whose settings it keeps: deploy its module without settings, or change the file", req.GetName())
			}
		} else if sp == nil && req.GetSettings() == nil {
			return status.Errorf(codes.InvalidArgument, "settings: plugin %q is new: give its settings (at least its hooks)", req.GetName())
		}
		if sp == nil {
			set.Plugins = append(set.Plugins, storedPlugin{Name: req.GetName()})
			sp = &set.Plugins[len(set.Plugins)-1]
		}
		if req.GetSettings() != nil {
			st, err := settingsOf(req.GetSettings())
			if err != nil {
				return err
			}
			sp.Settings = st
		}
		n := 1
		if len(sp.Versions) > 0 {
			n = sp.Versions[len(sp.Versions)-1].Version + 1
		}
		sp.Versions = append(sp.Versions, storedVersion{Version: n, Hash: hash, Deployed: time.Now().UnixNano()})
		if cand != nil {
			cand.Version = n
			sp.Candidate = cand
		} else {
			sp.Current, sp.Candidate = n, nil
		}
		// The module is stored before the set that names it, so a set never names a
		// module that is not there; one stored for a change refused is unused, not harmful.
		pm.modules[hash] = wasm
		return pm.store.putModule(ctx, hash, wasm)
	})
	if err != nil {
		return nil, err
	}
	if pm.store.where() == "" {
		pm.log.Warn("plugin deployed in memory only: a restart forgets it (memory { state_dir } keeps it)", "plugin", req.GetName(), "hash", hash)
	} else {
		pm.log.Info("plugin deployed", "plugin", req.GetName(), "hash", hash, "mode", modeName(req.GetMode()))
	}
	return &adminpb.DeployPluginResponse{Plugin: p}, nil
}

// candidateOf returns the candidate a deploy asks for (nil: live).
func candidateOf(req *adminpb.DeployPluginRequest) (*storedCandidate, error) {
	switch req.GetMode() {
	case adminpb.DeployMode_DEPLOY_MODE_UNSPECIFIED, adminpb.DeployMode_DEPLOY_MODE_LIVE:
		return nil, nil
	case adminpb.DeployMode_DEPLOY_MODE_SHADOW:
		return &storedCandidate{Mode: "shadow"}, nil
	case adminpb.DeployMode_DEPLOY_MODE_CANARY:
		c := &storedCandidate{Mode: "canary", Percent: req.GetCanaryPercent(), Keys: req.GetCanaryKeys(), MaxErrorRate: req.GetMaxErrorRate()}
		switch {
		case c.Percent < 0 || c.Percent > 100:
			return nil, status.Errorf(codes.InvalidArgument, "canary_percent: %g is not a percentage (0-100)", c.Percent)
		case c.MaxErrorRate < 0 || c.MaxErrorRate > 1:
			return nil, status.Errorf(codes.InvalidArgument, "max_error_rate: %g is not a share (0-1)", c.MaxErrorRate)
		case c.Percent == 0 && len(c.Keys) == 0:
			return nil, status.Error(codes.InvalidArgument, "a canary needs canary_percent or canary_keys: which messages it takes")
		}
		return c, nil
	}
	return nil, status.Errorf(codes.InvalidArgument, "mode: unknown %v", req.GetMode())
}

func modeName(m adminpb.DeployMode) string {
	switch m {
	case adminpb.DeployMode_DEPLOY_MODE_SHADOW:
		return "shadow"
	case adminpb.DeployMode_DEPLOY_MODE_CANARY:
		return "canary"
	}
	return "live"
}

var failurePolicies = map[string]plugins.FailurePolicy{"": plugins.FailOpen, "fail_open": plugins.FailOpen,
	"fail_closed": plugins.FailClosed, "dead_letter": plugins.FailDeadLetter}

func settingsOf(m *adminpb.PluginSettings) (*deploySettings, error) {
	if _, ok := failurePolicies[m.GetFailurePolicy()]; !ok {
		return nil, status.Errorf(codes.InvalidArgument, "failure_policy: %q; use fail_open, fail_closed or dead_letter", m.GetFailurePolicy())
	}
	return &deploySettings{Hooks: m.GetHooks(), Topics: m.GetTopics(), Groups: m.GetGroups(), Config: m.GetConfig(),
		EmitTopics: m.GetEmitTopics(), PoolSize: int(m.GetPoolSize()), MemoryLimitMB: int(m.GetMemoryLimitMb()),
		CallTimeout: m.GetCallTimeout().AsDuration(), FailurePolicy: m.GetFailurePolicy(), MaxEmits: int(m.GetMaxEmits())}, nil
}

// spec is the plugin's spec, without its module.
func (d *deploySettings) spec(name string) (plugins.Spec, error) {
	if d == nil {
		return plugins.Spec{}, fmt.Errorf("plugin %q: its settings are not stored", name)
	}
	return plugins.Spec{Name: name, Hooks: d.Hooks, Topics: d.Topics, Groups: d.Groups, Config: d.Config,
		EmitTopics: d.EmitTopics, PoolSize: d.PoolSize, MemoryLimitBytes: d.MemoryLimitMB << 20, CallTimeout: d.CallTimeout,
		FailurePolicy: failurePolicies[d.FailurePolicy], MaxEmits: d.MaxEmits}, nil
}

func (d *deploySettings) message() *adminpb.PluginSettings {
	if d == nil {
		return nil
	}
	m := &adminpb.PluginSettings{Hooks: d.Hooks, Topics: d.Topics, Groups: d.Groups, Config: d.Config, EmitTopics: d.EmitTopics,
		PoolSize: uint32(d.PoolSize), MemoryLimitMb: uint32(d.MemoryLimitMB), FailurePolicy: d.FailurePolicy, MaxEmits: uint32(d.MaxEmits)}
	if d.CallTimeout != 0 {
		m.CallTimeout = durationpb.New(d.CallTimeout)
	}
	return m
}

func (pm *pluginManager) PausePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return pm.changeOne(ctx, req, func(sp *storedPlugin) error { sp.Paused = true; return nil })
}

func (pm *pluginManager) ResumePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return pm.changeOne(ctx, req, func(sp *storedPlugin) error { sp.Paused = false; return nil })
}

func (pm *pluginManager) PromotePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return pm.changeOne(ctx, req, func(sp *storedPlugin) error {
		if sp.Candidate == nil {
			return status.Errorf(codes.FailedPrecondition, "plugin %q has no candidate to promote", sp.Name)
		}
		sp.Current, sp.Candidate = sp.Candidate.Version, nil
		return nil
	})
}

func (pm *pluginManager) RollbackPlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return pm.changeOne(ctx, req, func(sp *storedPlugin) error {
		if sp.Candidate != nil {
			sp.Candidate = nil
			return nil
		}
		prev := 0
		for _, v := range sp.Versions {
			if v.Version < sp.Current {
				prev = v.Version
			}
		}
		switch {
		case sp.Current == 0:
			return status.Errorf(codes.FailedPrecondition, "plugin %q runs the config file's module: there is no earlier version", sp.Name)
		case prev == 0 && !pm.inConfig(sp.Name):
			return status.Errorf(codes.FailedPrecondition, "plugin %q runs its first version: there is no earlier one (tinybroker plugin rm removes it)", sp.Name)
		}
		sp.Current = prev // 0, for a config plugin: the file's module
		return nil
	})
}

func (pm *pluginManager) RemovePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	p, err := pm.change(ctx, req.GetName(), func(set *pluginSet) error {
		i := slices.IndexFunc(set.Plugins, func(sp storedPlugin) bool { return sp.Name == req.GetName() })
		switch {
		case pm.inConfig(req.GetName()) && (i < 0 || len(set.Plugins[i].Versions) == 0):
			return status.Errorf(codes.FailedPrecondition, "plugin %q is declared in the config file alone: remove it there", req.GetName())
		case i < 0:
			return status.Errorf(codes.NotFound, "no plugin %q: tinybroker plugin ls lists them", req.GetName())
		}
		set.Plugins = slices.Delete(set.Plugins, i, i+1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &adminpb.PluginResponse{Plugin: p}, nil
}

// changeOne edits the stored state of one plugin.
func (pm *pluginManager) changeOne(ctx context.Context, req *adminpb.PluginRequest, edit func(sp *storedPlugin) error) (*adminpb.PluginResponse, error) {
	p, err := pm.change(ctx, req.GetName(), func(set *pluginSet) error {
		sp, err := pm.known(set, req.GetName())
		if err != nil {
			return err
		}
		return edit(sp)
	})
	if err != nil {
		return nil, err
	}
	return &adminpb.PluginResponse{Plugin: p}, nil
}

// rolledBack is a canary's OnRollback: it stores the rollback (candidate dropped, reason
// kept) on a goroutine of its own, since it is called from a plugin call, which must not
// wait for the store.
func (pm *pluginManager) rolledBack(name string, version int) func(reason string) {
	return func(reason string) {
		if !pm.background(func() { pm.storeRollback(name, version, reason) }) {
			pm.log.Warn("canary rolled back while the broker stops: not stored, it is deployed again at the next start", "plugin", name, "version", version, "reason", reason)
		}
	}
}

func (pm *pluginManager) storeRollback(name string, version int, reason string) {
	ctx, cancel := context.WithTimeout(pm.stopping, 30*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		_, err := pm.change(ctx, name, func(set *pluginSet) error {
			sp := set.find(name)
			if sp == nil || sp.Candidate == nil || sp.Candidate.Version != version {
				return errStale
			}
			sp.Candidate = nil
			sp.LastRollback = fmt.Sprintf("version %d rolled back by itself at %s: %s", version, time.Now().UTC().Format(time.RFC3339), reason)
			return nil
		})
		switch {
		case err == nil:
			pm.log.Warn("canary rolled back", "plugin", name, "version", version, "reason", reason)
			return
		case errors.Is(err, errStale):
			return
		case status.Code(err) == codes.Aborted && attempt < 5 && ctx.Err() == nil:
			continue // another node changed the set meanwhile: read it again
		}
		pm.log.Error("canary rolled back, and storing it failed: it stays deployed for the next load", "plugin", name, "version", version, "reason", reason, "error", err)
		return
	}
}

func (pm *pluginManager) ListPlugins(context.Context, *adminpb.ListPluginsRequest) (*adminpb.ListPluginsResponse, error) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	resp := &adminpb.ListPluginsResponse{}
	for _, s := range pm.cfgSpecs {
		resp.Plugins = append(resp.Plugins, pm.describe(s.Name))
	}
	for _, sp := range pm.set.Plugins {
		if !pm.inConfig(sp.Name) && len(sp.Versions) > 0 {
			resp.Plugins = append(resp.Plugins, pm.describe(sp.Name))
		}
	}
	return resp, nil
}

// describe returns the plugin as ListPlugins shows it, nil if it is neither in the config
// nor deployed. pm.mu must be held.
func (pm *pluginManager) describe(name string) *adminpb.Plugin {
	p := &adminpb.Plugin{Name: name, Source: "deployed"}
	cfgIdx := slices.IndexFunc(pm.cfgSpecs, func(s plugins.Spec) bool { return s.Name == name })
	if cfgIdx >= 0 {
		p.Source = "config"
		p.Hash = pm.cfgSpecs[cfgIdx].Hash
	}
	sp := pm.set.find(name)
	switch {
	case sp == nil && cfgIdx < 0:
		return nil
	case cfgIdx < 0 && sp.Settings == nil:
		p.Source = "dormant"
	}
	if sp != nil {
		p.Paused, p.Version, p.LastRollback = sp.Paused, uint32(sp.Current), sp.LastRollback
		if cfgIdx < 0 {
			p.Settings = sp.Settings.message()
		}
		if sp.Current > 0 {
			p.Hash = sp.version(sp.Current)
		}
		for _, v := range sp.Versions {
			p.History = append(p.History, &adminpb.PluginVersion{Version: uint32(v.Version), Hash: v.Hash, DeployedUnixNano: v.Deployed})
		}
		if c := sp.Candidate; c != nil {
			mode := adminpb.DeployMode_DEPLOY_MODE_SHADOW
			if c.Mode == "canary" {
				mode = adminpb.DeployMode_DEPLOY_MODE_CANARY
			}
			p.Candidate = &adminpb.PluginCandidate{Version: uint32(c.Version), Hash: sp.version(c.Version), Mode: mode,
				CanaryPercent: c.Percent, CanaryKeys: c.Keys, MaxErrorRate: c.MaxErrorRate}
		}
	}
	if pm.chain == nil {
		return p
	}
	for _, st := range pm.chain.Stats() {
		if st.Name != name {
			continue
		}
		p.Calls, p.Failures = st.Calls, st.Failures
		if st.Hash != "" {
			p.Hash = st.Hash
		}
		if c := st.Candidate; c != nil && p.Candidate != nil {
			p.Candidate.Calls, p.Candidate.Failures, p.Candidate.Differences = c.Calls, c.Failures, c.Differences
			p.Candidate.RolledBack, p.Candidate.Reason = c.RolledBack, c.Reason
		}
	}
	return p
}
