package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// The plugin lifecycle commands: plugin deploy, ls, pause, resume, rollback, rm, promote,
// over the admin API's plugin RPCs (lifecycle.go serves them).

func (a *app) pluginLifecycleCmds() []*cobra.Command {
	return []*cobra.Command{a.pluginDeployCmd(), a.pluginLsCmd(),
		a.pluginNameCmd("pause", "Take a plugin out of the chain (it keeps its versions)", adminpb.AdminClient.PausePlugin),
		a.pluginNameCmd("resume", "Put a paused plugin back in the chain", adminpb.AdminClient.ResumePlugin),
		a.pluginNameCmd("rollback", "Drop a plugin's candidate, or go back to its previous version", adminpb.AdminClient.RollbackPlugin),
		a.pluginNameCmd("rm", "Remove a deployed plugin (of a config file's plugin, its deployed versions)", adminpb.AdminClient.RemovePlugin),
		a.pluginNameCmd("promote", "Make a plugin's candidate its current version", adminpb.AdminClient.PromotePlugin)}
}

func (a *app) pluginDeployCmd() *cobra.Command {
	var (
		req      adminpb.DeployPluginRequest
		set      adminpb.PluginSettings
		shadow   bool
		canary   float64
		keys     []string
		config   []string
		timeout  time.Duration
		settings bool
	)
	f := &adminFlags{}
	c := &cobra.Command{
		Use:   "deploy FILE.wasm --name NAME [--shadow | --canary PCT [--canary-keys k1,k2] [--max-error-rate R]]",
		Short: "Deploy a plugin module: live, in shadow, or as a canary",
		Long: `Stores the module on the broker (by its content hash) as the plugin's next version and
swaps the plugin chain at once, losing nothing. Live (the default), it runs from now on;
--shadow runs it beside the current version on the same messages, its results compared and
never applied; --canary PCT sends it PCT % of the messages (and those whose ordering key is
in --canary-keys), rolled back by itself over --max-error-rate. promote makes the candidate
current, rollback drops it.

A plugin the config file declares keeps the file's settings; a new plugin needs its settings
(--hooks at least), which later deploys may change.`,
		Args: exactArgs(1, "one FILE.wasm"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if shadow && cmd.Flags().Changed("canary") {
				return fmt.Errorf("--shadow and --canary: choose one")
			}
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			req.Module = wasm
			switch {
			case shadow:
				req.Mode = adminpb.DeployMode_DEPLOY_MODE_SHADOW
			case cmd.Flags().Changed("canary") || len(keys) > 0:
				req.Mode, req.CanaryPercent, req.CanaryKeys = adminpb.DeployMode_DEPLOY_MODE_CANARY, canary, keys
			}
			for _, name := range []string{"hooks", "topics", "groups", "config", "emit-topics", "pool-size", "memory-limit-mb", "call-timeout", "failure-policy", "max-emits"} {
				settings = settings || cmd.Flags().Changed(name)
			}
			if settings {
				if set.Config, err = keyValues(config); err != nil {
					return err
				}
				if timeout > 0 {
					set.CallTimeout = durationpb.New(timeout)
				}
				req.Settings = &set
			}
			return fetch(f, cmd, a.stdout, func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (*adminpb.DeployPluginResponse, error) {
				return ac.DeployPlugin(ctx, &req)
			}, func(r *adminpb.DeployPluginResponse) error {
				p := r.GetPlugin()
				if c := p.GetCandidate(); c != nil {
					_, err := fmt.Fprintf(a.stdout, "plugin %s: version %d (%s) deployed as %s beside version %d\n", p.GetName(), c.GetVersion(), c.GetHash(), modeWord(c.GetMode()), p.GetVersion())
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "plugin %s: version %d (%s) runs now\n", p.GetName(), p.GetVersion(), p.GetHash())
				return err
			})
		},
	}
	fl := c.Flags()
	fl.StringVar(&req.Name, "name", "", "the plugin's name (required)")
	_ = c.MarkFlagRequired("name")
	fl.BoolVar(&shadow, "shadow", false, "run it in shadow beside the current version")
	fl.Float64Var(&canary, "canary", 0, "run it as a canary on this percentage of the messages")
	fl.StringSliceVar(&keys, "canary-keys", nil, "canary: ordering keys whose messages always go to it")
	fl.Float64Var(&req.MaxErrorRate, "max-error-rate", 0, "canary: the share of failed calls (0-1) over which it is rolled back (default 0.05)")
	fl.StringSliceVar(&set.Hooks, "hooks", nil, "settings: on_publish, on_ack, on_redeliver")
	fl.StringSliceVar(&set.Topics, "topics", nil, "settings: the topic patterns on_publish sees (default \">\")")
	fl.StringSliceVar(&set.Groups, "groups", nil, "settings: the consumer groups whose acks and redeliveries it sees")
	fl.StringSliceVar(&config, "config", nil, "settings: the plugin's config, KEY=VALUE (repeat, or comma-separated)")
	fl.StringSliceVar(&set.EmitTopics, "emit-topics", nil, "settings: the topic patterns it may write to")
	fl.Uint32Var(&set.PoolSize, "pool-size", 0, "settings: instances, i.e. concurrent calls (default 4)")
	fl.Uint32Var(&set.MemoryLimitMb, "memory-limit-mb", 0, "settings: largest memory of one instance (default 64)")
	fl.DurationVar(&timeout, "call-timeout", 0, "settings: time limit per call")
	fl.StringVar(&set.FailurePolicy, "failure-policy", "", "settings: fail_open (default), fail_closed or dead_letter")
	fl.Uint32Var(&set.MaxEmits, "max-emits", 0, "settings: messages one call may emit (default 16)")
	f.register(c)
	return c
}

// keyValues parses KEY=VALUE pairs.
func keyValues(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--config %q: write KEY=VALUE", p)
		}
		m[k] = v
	}
	return m, nil
}

func modeWord(m adminpb.DeployMode) string {
	switch m {
	case adminpb.DeployMode_DEPLOY_MODE_SHADOW:
		return "shadow"
	case adminpb.DeployMode_DEPLOY_MODE_CANARY:
		return "canary"
	}
	return "live"
}

func (a *app) pluginLsCmd() *cobra.Command {
	return listCmd(a, &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the plugins: the config file's and the deployed, in chain order",
	}, func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (*adminpb.ListPluginsResponse, error) {
		return ac.ListPlugins(ctx, &adminpb.ListPluginsRequest{})
	}, func(all *adminpb.ListPluginsResponse) error {
		tw := a.listing(len(all.GetPlugins()), "no plugins", "NAME\tSOURCE\tVERSION\tHASH\tCALLS\tFAILURES\tCANDIDATE")
		if tw == nil {
			return nil
		}
		for _, p := range all.GetPlugins() {
			name := p.GetName()
			if p.GetPaused() {
				name += " (paused)"
			}
			cand := "-"
			if c := p.GetCandidate(); c != nil {
				cand = fmt.Sprintf("v%d %s %s: %d calls, %d failures, %d differences", c.GetVersion(), modeWord(c.GetMode()), shortHash(c.GetHash()), c.GetCalls(), c.GetFailures(), c.GetDifferences())
			} else if r := p.GetLastRollback(); r != "" {
				cand = "rolled back: " + r
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", name, p.GetSource(), p.GetVersion(), shortHash(p.GetHash()), p.GetCalls(), p.GetFailures(), cand)
		}
		return tw.Flush()
	})
}

// shortHash is a hash's first 12 hex digits, as a table shows it (--json: the whole).
func shortHash(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[:len("sha256:")+12]
	}
	if h == "" {
		return "-"
	}
	return h
}

// pluginNameCmd is a command on one plugin, its NAME argument.
func (a *app) pluginNameCmd(verb, short string, call func(adminpb.AdminClient, context.Context, *adminpb.PluginRequest, ...grpc.CallOption) (*adminpb.PluginResponse, error)) *cobra.Command {
	f := &adminFlags{}
	c := &cobra.Command{Use: verb + " NAME", Short: short, Args: exactArgs(1, "one plugin NAME")}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return fetch(f, cmd, a.stdout, func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (*adminpb.PluginResponse, error) {
			return call(ac, ctx, &adminpb.PluginRequest{Name: args[0]})
		}, func(r *adminpb.PluginResponse) error {
			p := r.GetPlugin()
			if p == nil {
				_, err := fmt.Fprintf(a.stdout, "plugin %s: removed\n", args[0])
				return err
			}
			state := "running"
			if p.GetPaused() {
				state = "paused"
			}
			_, err := fmt.Fprintf(a.stdout, "plugin %s: %s, version %d (%s)\n", p.GetName(), state, p.GetVersion(), shortHash(p.GetHash()))
			return err
		})
	}
	f.register(c)
	return c
}
