package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tinybroker/tinybroker/bench"
)

// benchCmd is `tinybroker bench`: the benchmark workloads of shared/bench/WORKLOADS.md.
func (a *app) benchCmd() *cobra.Command {
	var cfg bench.Config
	var workloads, subs, w4base string
	var dial *dialFlags
	c := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Run the benchmark workloads against a broker",
		Long: `Runs benchmark workloads against a broker and prints one line per repetition and a line of
medians for each on stdout (warm-ups and progress go to stderr):
  W1  1 publisher, 4 fanout subscribers            delivered_msgs_per_s
  W2  1 publisher, a consumer group of 4 with acks acked_msgs_per_s, redelivered
  W3  paced publisher, 1 subscriber                p50_us p99_us p999_us
  W4  W1 and W2 plain and with plugins             plain, plugins (msgs/s), ratio (target 0.80)
  W5  1k/10k/100k subscriptions, 4 of them match   msgs_per_s, rss_per_sub_b
  W6  10k fanout streams, a topic each, 1 msg/s    p99_us (target 5 ms), rss_per_stream_b,
                                                   server_cpu_pct, lost
  W7  99 quiet keys and 1 flooding key, a group    quiet_p50_us quiet_p99_us per phase (alone,
      of 4 slow members; fair_by off and on        fifo, fair), flood_delivered_per_s
W2 with -keys 10000 -ordering key is W2 with ordering keys on (10,000 keys in turn).
W4 compares two brokers and runs only when asked for: with -addr, -w4-addr is a second one
started with the plugins (tinybroker serve --config bench/w4-go.hcl); without -addr,
-w4-config FILE loads that file's plugins into a second in-process broker. bench/run.sh runs
every workload against fresh ` + "`tinybroker serve`" + ` processes. Flags may be written Go-style
with one dash (-reps 5), as bench/run.sh does.`,
		Args: noArgs(" (select workloads with -w W1,W2)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.DialOptions, err = dial.grpcOptions(); err != nil {
				return err
			}
			for _, w := range strings.Split(workloads, ",") {
				if w = strings.ToUpper(strings.TrimSpace(w)); w != "" {
					cfg.Workloads = append(cfg.Workloads, w)
				}
			}
			for _, w := range strings.Split(w4base, ",") {
				if w = strings.ToUpper(strings.TrimSpace(w)); w != "" {
					cfg.W4Base = append(cfg.W4Base, w)
				}
			}
			for _, s := range strings.Split(subs, ",") {
				k, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil {
					return usagef(cmd, "-subs %q: want comma-separated integers, e.g. 1000,10000", subs)
				}
				cfg.SubCounts = append(cfg.SubCounts, k)
			}
			return bench.Run(cmd.Context(), cfg, a.stdout, a.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&cfg.Addr, "addr", "", "the broker's `host:port`; empty starts a broker inside this process, sharing its CPU and runtime with the clients (for trying it out, not for figures)")
	fs.StringVarP(&workloads, "w", "w", "W1,W2,W3,W5,W6", "workloads to run, comma-separated (W4 too when given -w4-addr or -w4-config)")
	fs.IntVarP(&cfg.N, "n", "n", 0, "messages per repetition (default: W1/W2/W4 500000, W3 5 s at -rate, W5 200000; W6: see -duration)")
	fs.IntVar(&cfg.Size, "size", 256, "payload bytes (at least 8)")
	fs.IntVar(&cfg.Reps, "reps", 3, "measured repetitions, after one warm-up")
	fs.IntVar(&cfg.Rate, "rate", 20000, "W3: publish rate, msgs/s")
	fs.StringVar(&subs, "subs", "1000,10000,100000", "W5: subscription counts, comma-separated")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "W5, W6: the broker's process id, to read its RSS (and W6 its CPU use) from /proc")
	fs.DurationVar(&cfg.Timeout, "timeout", 3*time.Minute, "give up on a repetition (or W5's subscribing) after this long")
	fs.IntVar(&cfg.Batch, "batch", 128, "most messages per PublishStream frame")
	fs.IntVar(&cfg.Window, "window", 16, "most PublishStream frames sent and not yet confirmed")
	fs.StringVar(&cfg.W3Publish, "w3-publish", "frame", "W3: how to publish: frame (a PublishStream frame per message, answered only on failure, as NATS core publishes), frame-ack (the same, every frame answered), unary (Publish, one at a time) or sdk (the Go SDK's Publisher, batching what queues up)")
	fs.StringVar(&cfg.W4Addr, "w4-addr", "", "W4 with -addr: a second broker's `host:port`, running with the W4 plugins")
	fs.StringVar(&cfg.W4Config, "w4-config", "", "W4 without -addr: a config `file` whose plugins a second in-process broker loads (e.g. bench/w4-go.hcl)")
	fs.StringVar(&cfg.W4Lang, "w4-lang", "", "W4: the plugins' language, for the output lines (default: <lang> of a -w4-config named w4-<lang>.hcl, else go)")
	fs.StringVar(&w4base, "w4-workloads", "W1,W2", "W4: the workloads to run plain and with plugins")
	fs.IntVar(&cfg.Streams, "streams", 10000, "W6: fanout subscriber streams, each on a topic of its own")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "W6: measured time per repetition; every topic gets a message a second; W7: publishing time per phase")
	fs.IntVar(&cfg.W6Conns, "w6-conns", 8, "W6: connections the streams are spread over")
	fs.IntVar(&cfg.Keys, "keys", 0, "W1, W2, W5: give the messages keys, key-0 to key-<N-1> in turn (0: none)")
	fs.DurationVar(&cfg.TTL, "ttl", 0, "W1, W2: give the messages this time to live (0: none); none should expire: W2 with expiry paid for")
	fs.StringVar(&cfg.Ordering, "ordering", "", "W2: the members' ordering: key (one message of a key at a time) or group (default: none)")
	fs.StringVar(&cfg.FairBy, "fair-by", "key", "W7: the fair phases' fair_by: key or header:tenant")
	fs.IntVar(&cfg.W7Quiet, "w7-quiet", 99, "W7: quiet keys")
	fs.IntVar(&cfg.W7Rate, "w7-rate", 10, "W7: messages a second of each quiet key")
	fs.IntVar(&cfg.W7FloodRate, "w7-flood-rate", 0, "W7: the flooding key's messages a second (0: as fast as it can)")
	fs.IntVar(&cfg.W7Members, "w7-members", 4, "W7: the group's members")
	fs.IntVar(&cfg.W7InFlight, "w7-in-flight", 16, "W7: each member's max_in_flight")
	fs.DurationVar(&cfg.W7Work, "w7-work", 5*time.Millisecond, "W7: how long a member holds a message before it acks it (its work)")
	fs.StringVar(&cfg.Scrape, "scrape", "", "GET this `URL` (the broker's http://HOST:PORT/metrics, serve --http-listen) every -scrape-every during the run, as Prometheus would: the cost of metrics")
	fs.DurationVar(&cfg.ScrapeEvery, "scrape-every", time.Second, "how often -scrape scrapes")
	fs.BoolVar(&cfg.JSON, "json", false, "print each result as a JSON object (workload, labels, rep or median, figures) instead of a line of name=value")
	dial = addDialFlags(fs)
	dial.explicitContext = true
	return c
}
