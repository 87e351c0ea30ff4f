package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// topOptions are `tinybroker top`'s.
type topOptions struct {
	interval   time.Duration
	iterations int
	rows       int
}

func (a *app) topCmd() *cobra.Command {
	var f adminFlags
	var o topOptions
	var once bool
	c := &cobra.Command{
		Use:   "top",
		Short: "A live view of the broker's rates and backlogs",
		Long: `Shows the broker's rates (published, delivered, acked, redelivered, dead-lettered per
second) and its consumer groups with the largest backlogs, refreshed every --interval from
Stats, until interrupted or q is pressed. On a terminal each view replaces the last and its
lines are cut to the terminal's width; otherwise (or with --iterations N, --once) views are
printed one after the other, whole, for scripts and tests.`,
		Example: `  tinybroker top
  tinybroker top --once --addr 10.0.0.5:7878`,
		Args: noArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if once {
				o.iterations = 1
			}
			if o.interval <= 0 {
				return usagef(cmd, "--interval %v: want a positive duration such as 1s", o.interval)
			}
			conn, err := f.conn()
			if err != nil {
				return err
			}
			defer conn.Close()
			err = a.top(cmd.Context(), pb.NewBrokerClient(conn), f.addr, o)
			if err != nil {
				return f.dial.explain(rpcError(err, f.addr), f.addr)
			}
			return nil
		},
	}
	f.register(c)
	c.Flags().Lookup("json").Hidden = true // a live view has no JSON: use stats --json
	c.Flags().DurationVar(&o.interval, "interval", time.Second, "time between two views")
	c.Flags().IntVar(&o.iterations, "iterations", 0, "stop after this many views (0: until interrupted)")
	c.Flags().BoolVar(&once, "once", false, "print one view (after one --interval, to measure rates) and exit")
	c.Flags().IntVar(&o.rows, "groups", 20, "consumer groups shown, largest backlog first")
	return c
}

// sample is one Stats answer and when it came.
type sample struct {
	at     time.Time
	st     *pb.StatsResponse
	groups map[string]*pb.GroupStats
}

func takeSample(ctx context.Context, bc pb.BrokerClient, timeout time.Duration) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s := sample{groups: make(map[string]*pb.GroupStats)}
	tok := ""
	for {
		st, err := bc.Stats(ctx, &pb.StatsRequest{PageToken: tok})
		if err != nil {
			return s, err
		}
		if s.st == nil {
			s.st = st
		}
		for _, g := range st.GetGroups() {
			s.groups[g.GetSubscriptionId()] = g
		}
		if tok = st.GetNextPageToken(); tok == "" {
			break
		}
	}
	s.at = time.Now()
	return s, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// top prints a view every o.interval: rates between the last two samples, and the groups
// with the largest backlogs.
func (a *app) top(ctx context.Context, bc pb.BrokerClient, addr string, o topOptions) error {
	live := isTerminal(a.stdout) && o.iterations == 0
	out := a.stdout
	if live {
		width := 0
		if f, ok := a.stdout.(*os.File); ok {
			width, _, _ = term.GetSize(int(f.Fd()))
		}
		// Keys: q (or Ctrl-C, in raw mode no longer a signal) ends the view. Raw mode also
		// stops the terminal from turning "\n" into "\r\n", so the view writes both.
		if f, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			if old, err := term.MakeRaw(int(f.Fd())); err == nil {
				defer func() { _ = term.Restore(int(f.Fd()), old) }()
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				defer watchKeys(int(f.Fd()), cancel)()
				out = &clipWriter{w: out, width: width, crlf: true}
			}
		}
		if cw, ok := out.(*clipWriter); !ok {
			out = &clipWriter{w: out, width: width}
		} else {
			cw.width = width
		}
	}
	prev, err := takeSample(ctx, bc, 10*time.Second)
	if err != nil {
		return err
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for n := 0; o.iterations == 0 || n < o.iterations; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := takeSample(ctx, bc, 10*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if live {
			fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // not through out: not a line to cut
		} else if n > 0 {
			fmt.Fprintln(out)
		}
		printTop(out, addr, prev, cur, o.rows)
		prev = cur
	}
	return nil
}

// quitOnKey reads keys from r until q, Q, Ctrl-C or Ctrl-D, then calls quit; at the end of r
// (or an error) it returns without.
func quitOnKey(r io.Reader, quit func()) {
	b := make([]byte, 16)
	for {
		n, err := r.Read(b)
		for _, c := range b[:n] {
			if c == 'q' || c == 'Q' || c == 0x03 || c == 0x04 {
				quit()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// clipWriter cuts every line written through it to width characters (none with width 0),
// so that a live view does not wrap, and with crlf ends lines with "\r\n" (a terminal in
// raw mode). A line is written out at its end.
type clipWriter struct {
	w     io.Writer
	width int
	crlf  bool
	line  []rune
	buf   []byte
}

func (c *clipWriter) Write(p []byte) (int, error) {
	c.buf = c.buf[:0]
	for _, r := range string(p) {
		switch {
		case r == '\n':
			c.buf = append(c.buf, string(c.line)...)
			if c.crlf {
				c.buf = append(c.buf, '\r')
			}
			c.buf = append(c.buf, '\n')
			c.line = c.line[:0]
		case c.width == 0 || len(c.line) < c.width:
			c.line = append(c.line, r)
		}
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

func printTop(w io.Writer, addr string, prev, cur sample, rows int) {
	secs := cur.at.Sub(prev.at).Seconds()
	rate := func(now, before uint64) float64 {
		if now < before || secs <= 0 {
			return 0
		}
		return float64(now-before) / secs
	}
	p, c := prev.st, cur.st
	fmt.Fprintf(w, "tinybroker top: %s at %s\n", addr, cur.at.Format("15:04:05"))
	fmt.Fprintf(w, "msgs/s: published %.1f  delivered %.1f  acked %.1f\n",
		rate(c.GetPublished(), p.GetPublished()), rate(c.GetDelivered(), p.GetDelivered()), rate(c.GetAcked(), p.GetAcked()))
	fmt.Fprintf(w, "        redelivered %.1f  dead-lettered %.1f  unrouted %.1f\n",
		rate(c.GetRedelivered(), p.GetRedelivered()), rate(c.GetDeadLettered(), p.GetDeadLettered()), rate(c.GetUnrouted(), p.GetUnrouted()))
	fmt.Fprintf(w, "memory %s of %s  fanout subscriptions %d  groups %d\n\n", bytesText(c.GetMemoryUsedBytes()), bytesText(c.GetMemoryBudgetBytes()),
		c.GetSubscriptionsTotal(), c.GetGroupsTotal())
	groups := make([]*pb.GroupStats, 0, len(cur.groups))
	for _, g := range cur.groups {
		groups = append(groups, g)
	}
	backlog := func(g *pb.GroupStats) uint32 { return g.GetQueued() + g.GetInFlight() + g.GetDelayed() }
	slices.SortFunc(groups, func(x, y *pb.GroupStats) int {
		return cmp.Or(cmp.Compare(backlog(y), backlog(x)), cmp.Compare(x.GetSubscriptionId(), y.GetSubscriptionId()))
	})
	if len(groups) == 0 {
		fmt.Fprintln(w, "no consumer groups")
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "GROUP\tMEMBERS\tQUEUED\tIN FLIGHT\tDELAYED\tDELIVERED/S\tACKED/S\tDEAD-LETTERED/S\tBYTES")
	for i, g := range groups {
		if i == rows {
			fmt.Fprintf(tw, "... %d more\n", len(groups)-rows)
			break
		}
		before := prev.groups[g.GetSubscriptionId()]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%s\n", g.GetSubscriptionId(), g.GetMembers(), g.GetQueued(), g.GetInFlight(), g.GetDelayed(),
			rate(g.GetDelivered(), before.GetDelivered()), rate(g.GetAcked(), before.GetAcked()), rate(g.GetDeadLettered(), before.GetDeadLettered()),
			bytesText(g.GetBytes()))
	}
	_ = tw.Flush()
}
