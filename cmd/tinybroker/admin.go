package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/internal/nodes"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// The admin commands: groups, dlq, streams, stats (top is in top.go). Each speaks the
// tinybroker.admin.v1.Admin service (or Broker.Stats), prints a table for people or, with
// --json, the answers as JSON for scripts.

// adminFlags are every admin command's: where the broker is, how to print.
type adminFlags struct {
	addr    string
	json    bool
	timeout time.Duration
	dial    *dialFlags // TLS and token, as pub and sub take them (dial.go)
}

func (f *adminFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.addr, "addr", defaultAddr(), addrUsage)
	c.Flags().BoolVar(&f.json, "json", false, "print JSON (the protocol's messages, snake_case fields) instead of a table")
	c.Flags().DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
	f.dial = addDialFlags(c.Flags())
}

// conn connects to the broker the flags name. Every admin command dials through it.
func (f *adminFlags) conn() (*grpc.ClientConn, error) {
	opts, err := f.dial.grpcOptions()
	if err != nil {
		return nil, err
	}
	if !hasCreds(f.dial) {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	target, nodesOpt, err := nodes.Target(f.addr)
	if err != nil {
		return nil, err
	}
	if nodesOpt != nil {
		opts = append(opts, nodesOpt)
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.addr, err)
	}
	return conn, nil
}

// hasCreds reports whether the dial flags ask for TLS.
func hasCreds(d *dialFlags) bool {
	cfg, _ := d.tlsConfig()
	return cfg != nil
}

// call runs f with the Admin and Broker clients of the broker f.addr names.
func (f *adminFlags) call(ctx context.Context, do func(ctx context.Context, a adminpb.AdminClient, b pb.BrokerClient) error) error {
	conn, err := f.conn()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := do(ctx, adminpb.NewAdminClient(conn), pb.NewBrokerClient(conn)); err != nil {
		return f.dial.explain(rpcError(err, f.addr), f.addr)
	}
	return nil
}

// rpcError says what a failed call means, with the hint the client library gives for an
// unreachable broker.
func rpcError(err error, addr string) error {
	if strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "Unavailable") {
		return fmt.Errorf("%w (is a broker running at %s? `tinybroker serve` starts one; --addr chooses another)", err, addr)
	}
	return err
}

// fetch gets an answer with get and prints it: as JSON with --json, else with text.
func fetch[M proto.Message](f *adminFlags, cmd *cobra.Command, w io.Writer, get func(context.Context, adminpb.AdminClient, pb.BrokerClient) (M, error), text func(M) error) error {
	var m M
	err := f.call(cmd.Context(), func(ctx context.Context, ac adminpb.AdminClient, bc pb.BrokerClient) (err error) {
		m, err = get(ctx, ac, bc)
		return err
	})
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(w, m)
	}
	return text(m)
}

// pages calls list with each page token it returns, from the first page, until the last.
func pages(list func(token string) (next string, err error)) error {
	tok := ""
	for {
		next, err := list(tok)
		if err != nil || next == "" {
			return err
		}
		tok = next
	}
}

// listAll gets a listing's pages with list, from the first to the last, and returns their
// items (items takes them from a page) and the total of the last.
func listAll[R interface {
	GetNextPageToken() string
	GetTotal() uint32
}, T any](list func(token string) (R, error), items func(R) []T) (all []T, total uint32, err error) {
	err = pages(func(tok string) (string, error) {
		r, err := list(tok)
		all, total = append(all, items(r)...), r.GetTotal()
		return r.GetNextPageToken(), err
	})
	return all, total, err
}

var jsonOpts = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// printJSON writes m in the protocol's JSON mapping (64-bit integers as strings), indented
// by encoding/json: protojson varies its spacing from run to run on purpose.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// listing starts a table of rows rows on a.stdout with its header line; with no rows it prints
// empty instead and returns nil.
func (a *app) listing(rows int, empty, header string) *tabwriter.Writer {
	if rows == 0 {
		fmt.Fprintln(a.stdout, empty)
		return nil
	}
	tw := table(a.stdout)
	fmt.Fprintln(tw, header)
	return tw
}

// groupArg completes a group's subscription_id from the broker.
func (f *adminFlags) groupArg(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var ids []string
	_ = f.call(cmd.Context(), func(ctx context.Context, a adminpb.AdminClient, _ pb.BrokerClient) error {
		ls, err := a.ListGroups(ctx, &adminpb.ListGroupsRequest{})
		for _, g := range ls.GetGroups() {
			ids = append(ids, g.GetSubscriptionId())
		}
		return err
	})
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// listCmd makes c an admin command without arguments: it fetches an answer with get and
// prints it with text (fetch).
func listCmd[M proto.Message](a *app, c *cobra.Command, get func(context.Context, adminpb.AdminClient, pb.BrokerClient) (M, error), text func(M) error) *cobra.Command {
	f := &adminFlags{}
	c.Args = noArgs("")
	c.RunE = func(cmd *cobra.Command, _ []string) error { return fetch(f, cmd, a.stdout, get, text) }
	f.register(c)
	return c
}

// groupCmd makes c an admin command on one consumer group, its SUBSCRIPTION_ID argument: it
// fetches an answer with get and prints it with text (fetch), completing the argument from
// the broker.
func groupCmd[M proto.Message](a *app, c *cobra.Command, get func(ctx context.Context, ac adminpb.AdminClient, id string) (M, error),
	text func(id string, m M) error) *cobra.Command {
	f := &adminFlags{}
	c.Args, c.ValidArgsFunction = exactArgs(1, "one SUBSCRIPTION_ID"), f.groupArg
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return fetch(f, cmd, a.stdout, func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (M, error) {
			return get(ctx, ac, args[0])
		}, func(m M) error { return text(args[0], m) })
	}
	f.register(c)
	return c
}

func (a *app) groupsCmd() *cobra.Command {
	return a.parent("groups", "List, describe, delete, purge, pause and resume consumer groups",
		"Consumer groups, by subscription_id: ls lists them, show describes one with its members, rm\ndeletes one (its members' subscriptions end), purge drops what it has queued, pause stops\nits deliveries (it keeps taking publishes) until resume.",
		a.groupsLsCmd(), a.groupsShowCmd(), a.groupsRmCmd(), a.groupsPurgeCmd(), a.groupsPauseCmd(), a.groupsResumeCmd())
}

func (a *app) groupsLsCmd() *cobra.Command {
	return listCmd(a, &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the consumer groups",
		Long: `Lists every consumer group: members, messages queued, in flight and delayed, the age of
the oldest message it holds, and the dead letters it keeps.`,
	}, func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (*adminpb.ListGroupsResponse, error) {
		groups, total, err := listAll(func(tok string) (*adminpb.ListGroupsResponse, error) {
			return ac.ListGroups(ctx, &adminpb.ListGroupsRequest{PageToken: tok})
		}, (*adminpb.ListGroupsResponse).GetGroups)
		return &adminpb.ListGroupsResponse{Groups: groups, Total: total}, err
	}, func(all *adminpb.ListGroupsResponse) error {
		tw := a.listing(len(all.Groups), "no consumer groups", "SUBSCRIPTION\tGROUP\tPATTERNS\tMEMBERS\tQUEUED\tIN FLIGHT\tDELAYED\tOLDEST\tDEAD LETTERS\tBYTES")
		if tw == nil {
			return nil
		}
		for _, g := range all.Groups {
			id := g.GetSubscriptionId()
			if g.GetPaused() {
				id += " (paused)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", id, g.GetConsumerGroup(), strings.Join(g.GetTopicPatterns(), ","),
				g.GetMembers(), g.GetQueued(), g.GetInFlight(), g.GetDelayed(), age(g), g.GetDeadLetters(), bytesText(g.GetBytes()))
		}
		return tw.Flush()
	})
}

func age(g *adminpb.Group) string {
	if g.GetOldestAge() == nil {
		return "-"
	}
	return shortDuration(g.GetOldestAge().AsDuration())
}

// shortDuration rounds d for a table: 950ms, 12s, 3m4s, 2h5m.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// bytesText is n in B, KiB, MiB or GiB.
func bytesText(n uint64) string {
	switch {
	case n < 1<<10:
		return strconv.FormatUint(n, 10) + " B"
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func (a *app) groupsShowCmd() *cobra.Command {
	return groupCmd(a, &cobra.Command{
		Use:     "show SUBSCRIPTION_ID",
		Aliases: []string{"describe"},
		Short:   "Describe a consumer group: counters, settings, members and their addresses",
	}, func(ctx context.Context, ac adminpb.AdminClient, id string) (*adminpb.Group, error) {
		return ac.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: id})
	}, func(_ string, g *adminpb.Group) error { return a.printGroup(g) })
}

func (a *app) printGroup(g *adminpb.Group) error {
	s := g.GetSettings()
	tw := table(a.stdout)
	declared := ""
	if g.GetDeclared() {
		declared = " (declared in the configuration)"
	}
	maxDel := "unlimited"
	if s.GetMaxDeliveries() > 0 {
		maxDel = strconv.Itoa(int(s.GetMaxDeliveries()))
	}
	rows := [][2]string{
		{"subscription", g.GetSubscriptionId() + declared},
		{"group", g.GetConsumerGroup()},
		{"patterns", strings.Join(g.GetTopicPatterns(), " ")},
		{"members", strconv.Itoa(int(g.GetMembers()))},
		{"queued", fmt.Sprintf("%d (max %d, %s held of %s; overflow %s)", g.GetQueued(), s.GetMaxQueued(), bytesText(g.GetBytes()), bytesText(s.GetMaxQueuedBytes()), s.GetOverflow())},
		{"in flight", strconv.Itoa(int(g.GetInFlight()))},
		{"delayed", strconv.Itoa(int(g.GetDelayed()))},
		{"oldest", age(g)},
		{"delivered", fmt.Sprintf("%d (acked %d, redelivered %d, dropped %d, rejected %d)", g.GetDelivered(), g.GetAcked(), g.GetRedelivered(), g.GetDropped(), g.GetRejected())},
		{"max deliveries", maxDel},
		{"redelivery", redeliveryRow(s)},
		{"dead letters", fmt.Sprintf("%d kept (%s; max %d, %s), %d dead-lettered to %s, %d dropped from the store",
			g.GetDeadLetters(), bytesText(g.GetDeadLetterBytes()), s.GetDeadLettersMax(), bytesText(s.GetDeadLettersMaxBytes()), g.GetDeadLettered(), s.GetDeadLetterTopic(), g.GetDeadLettersDropped())},
	}
	if g.GetPaused() {
		rows = slices.Insert(rows, 3, [2]string{"paused", "delivers nothing until resumed (tinybroker groups resume " + g.GetSubscriptionId() + ")"})
	}
	if d := dispatchRow(s); d != "" {
		rows = append(rows, [2]string{"dispatch", d})
	}
	if s.GetOrdering() != "" || s.GetFairBy() != "" {
		rows = append(rows, [2]string{"keys", keysRow(g)})
	}
	if a := s.GetMaxAge(); a != nil {
		rows = append(rows, [2]string{"max age", fmt.Sprintf("%s (then %s)", a.AsDuration(), strings.ReplaceAll(s.GetOnExpire(), "_", "-"))})
	}
	if n := s.GetDeadLetterBreaker(); n > 0 {
		rows = append(rows, [2]string{"breaker", fmt.Sprintf("pauses the group at %d dead letters within %s", n, s.GetDeadLetterBreakerWindow().AsDuration())})
	}
	if n := s.GetReplicas(); n > 1 { // JetStream keeping several copies: one is the usual case
		rows = slices.Insert(rows, 3, [2]string{"replicas", fmt.Sprintf("%d (copies of its messages JetStream keeps)", n)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(g.GetMemberList()) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	tw = table(a.stdout)
	fmt.Fprintln(tw, "MEMBER\tPEER\tIN FLIGHT\tMAX IN FLIGHT\tACK DEADLINE\tPRIORITY\tJOINED")
	for _, m := range g.GetMemberList() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s ago\n", m.GetMemberId(), m.GetPeer(), m.GetInFlight(), m.GetMaxInFlight(),
			m.GetAckDeadline().AsDuration(), m.GetPriority(), shortDuration(time.Since(time.Unix(0, m.GetJoinedUnixNano()))))
	}
	return tw.Flush()
}

// redeliveryRow is groups show's line on the redelivery back-off in force.
func redeliveryRow(s *adminpb.GroupSettings) string {
	var row string
	switch list := s.GetRedeliveryBackoff(); {
	case len(list) > 0:
		ds := make([]string, len(list))
		for i, d := range list {
			ds[i] = d.AsDuration().String()
		}
		row = "after " + strings.Join(ds, ", ") + " (attempt n waits entry n, the last repeats)"
	case s.GetRedeliveryDelayMin() != nil:
		row = fmt.Sprintf("after %v, doubling up to %v", s.GetRedeliveryDelayMin().AsDuration(), s.GetRedeliveryDelayMax().AsDuration())
	default:
		return "at once, or after the nack's delay (no back-off)"
	}
	if j := s.GetRedeliveryJitter(); j > 0 {
		row += fmt.Sprintf(", each shortened by up to %g%% (jitter)", j*100)
	}
	return row
}

// dispatchRow is groups show's line on a group's ordering and fairness: "" for plain FIFO.
func dispatchRow(s *adminpb.GroupSettings) string {
	var parts []string
	switch o := s.GetOrdering(); o {
	case "":
	case "key":
		parts = append(parts, "ordering key (one message of a key at a time, keys in parallel)")
	case "group":
		parts = append(parts, "ordering group (one message at a time)")
	default:
		parts = append(parts, "ordering "+o)
	}
	if f := s.GetFairBy(); f != "" {
		parts = append(parts, "fair by "+f+" (tenants take turns)")
	}
	if p := s.GetMaxPriority(); p > 0 {
		parts = append(parts, fmt.Sprintf("priorities 0 to %d (highest first)", p))
	}
	return strings.Join(parts, "; ")
}

// keysRow is groups show's line on the keys a keyed group holds: how many, and the busiest
// with what each holds, "(noisy)" after one flooding the group.
func keysRow(g *adminpb.Group) string {
	s := strconv.Itoa(int(g.GetKeys())) + " held"
	if len(g.GetBusiestKeys()) == 0 {
		return s
	}
	busiest := make([]string, len(g.GetBusiestKeys()))
	for i, k := range g.GetBusiestKeys() {
		name := quoteIfNeeded(k.GetKey())
		busiest[i] = fmt.Sprintf("%s %d", name, k.GetHeld())
		if k.GetNoisy() {
			busiest[i] += " (noisy)"
		}
	}
	return s + "; busiest: " + strings.Join(busiest, ", ")
}

func (a *app) groupsRmCmd() *cobra.Command {
	return groupCmd(a, &cobra.Command{
		Use:     "rm SUBSCRIPTION_ID",
		Aliases: []string{"delete"},
		Short:   "Delete a consumer group, what it holds and its dead letters",
		Long: `Deletes a consumer group with the messages it holds (in flight too) and its dead letters.
Its members' subscriptions end with NOT_FOUND "consumer group deleted"; a member that
subscribes again creates a new, empty group.`,
	}, func(ctx context.Context, ac adminpb.AdminClient, id string) (*adminpb.DeleteGroupResponse, error) {
		return ac.DeleteGroup(ctx, &adminpb.DeleteGroupRequest{SubscriptionId: id})
	}, func(id string, r *adminpb.DeleteGroupResponse) error {
		_, err := fmt.Fprintf(a.stdout, "deleted group %s: %d members ended, %d messages and %d dead letters dropped\n",
			id, r.GetMembersEnded(), r.GetMessagesDropped(), r.GetDeadLettersDropped())
		return err
	})
}

func (a *app) groupsPurgeCmd() *cobra.Command {
	return groupCmd(a, &cobra.Command{
		Use:   "purge SUBSCRIPTION_ID",
		Short: "Drop the messages a group has queued or delayed (in-flight ones stay)",
	}, func(ctx context.Context, ac adminpb.AdminClient, id string) (*adminpb.PurgeGroupResponse, error) {
		return ac.PurgeGroup(ctx, &adminpb.PurgeGroupRequest{SubscriptionId: id})
	}, func(id string, r *adminpb.PurgeGroupResponse) error {
		_, err := fmt.Fprintf(a.stdout, "purged %d messages from group %s\n", r.GetPurged(), id)
		return err
	})
}

func (a *app) groupsPauseCmd() *cobra.Command {
	return groupCmd(a, &cobra.Command{
		Use:   "pause SUBSCRIPTION_ID",
		Short: "Stop a group's deliveries until it is resumed; it keeps taking publishes",
		Long: `Pauses a consumer group: it takes publishes as ever (within its bounds) and hands nothing
to its members until "groups resume"; what they hold stays theirs to ack or nack. On the
JetStream engine the pause survives a restart.`,
	}, func(ctx context.Context, ac adminpb.AdminClient, id string) (*adminpb.PauseGroupResponse, error) {
		return ac.PauseGroup(ctx, &adminpb.PauseGroupRequest{SubscriptionId: id})
	}, func(id string, r *adminpb.PauseGroupResponse) error {
		_, err := fmt.Fprintf(a.stdout, "paused group %s (%d messages queued)\n", id, r.GetQueued())
		return err
	})
}

func (a *app) groupsResumeCmd() *cobra.Command {
	return groupCmd(a, &cobra.Command{
		Use:   "resume SUBSCRIPTION_ID",
		Short: "Resume a paused group: it delivers what it kept",
	}, func(ctx context.Context, ac adminpb.AdminClient, id string) (*adminpb.ResumeGroupResponse, error) {
		return ac.ResumeGroup(ctx, &adminpb.ResumeGroupRequest{SubscriptionId: id})
	}, func(id string, _ *adminpb.ResumeGroupResponse) error {
		_, err := fmt.Fprintf(a.stdout, "resumed group %s\n", id)
		return err
	})
}

func (a *app) streamsCmd() *cobra.Command {
	ls := listCmd(a, &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the open Subscribe streams and their subscriptions",
	}, func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (*adminpb.ListStreamsResponse, error) {
		streams, total, err := listAll(func(tok string) (*adminpb.ListStreamsResponse, error) {
			return ac.ListStreams(ctx, &adminpb.ListStreamsRequest{PageToken: tok})
		}, (*adminpb.ListStreamsResponse).GetStreams)
		return &adminpb.ListStreamsResponse{Streams: streams, Total: total}, err
	}, a.printStreams)
	return a.parent("streams", "List the open streams", "Subscribe streams (client connections' subscriptions): ls lists them with their peers.", ls)
}

func (a *app) printStreams(all *adminpb.ListStreamsResponse) error {
	tw := a.listing(len(all.Streams), "no streams", "STREAM\tPEER\tBUFFERED\tSUBSCRIPTION\tMODE\tGROUP\tMEMBER\tPATTERNS")
	if tw == nil {
		return nil
	}
	for _, st := range all.Streams {
		for i, s := range st.GetSubscriptions() {
			id, peer, buffered := st.GetStreamId(), st.GetPeer(), strconv.Itoa(int(st.GetBuffered()))
			if i > 0 {
				id, peer, buffered = "", "", ""
			}
			mode, group, member := "fanout", "-", "-"
			if s.GetMode() == pb.DeliveryMode_DELIVERY_MODE_BALANCED {
				mode, group, member = "balanced", s.GetConsumerGroup(), s.GetMemberId()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, peer, buffered, s.GetSubscriptionId(), mode, group, member, strings.Join(s.GetTopicPatterns(), ","))
		}
	}
	return tw.Flush()
}

func (a *app) usersCmd() *cobra.Command {
	ls := listCmd(a, &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the users in force, with what each may do and holds now",
		Long: `Lists the users of the configuration in force (after the last reload), sorted by name:
how each authenticates, whether it is an admin, its publish, subscribe and groups rules
(deny overrides allow; no allow rule allows nothing), its own limits (- where only the
broker-wide one applies) and what it holds now (counted where it has a limit). Tokens and
their hashes are never shown.`,
	}, func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (*adminpb.ListUsersResponse, error) {
		return ac.ListUsers(ctx, &adminpb.ListUsersRequest{})
	}, a.printUsers)
	return a.parent("users", "List users and their permissions", "Users of the broker's configuration: ls lists them with their rules, limits and usage (admins only).", ls)
}

func (a *app) printUsers(all *adminpb.ListUsersResponse) error {
	tw := a.listing(len(all.GetUsers()), "no users: every client on loopback may do anything (README.md, \"Securing tinybroker\")",
		"USER\tADMIN\tAUTH\tPUBLISH\tSUBSCRIBE\tGROUPS\tLIMITS\tNOW")
	if tw == nil {
		return nil
	}
	rules := func(r *adminpb.Rules) string {
		s := strings.Join(r.GetAllow(), ",")
		if s == "" {
			s = "(none)"
		}
		if d := r.GetDeny(); len(d) > 0 {
			s += " -" + strings.Join(d, ",-")
		}
		return s
	}
	limit := func(v uint64) string {
		if v == 0 {
			return "-"
		}
		return strconv.FormatUint(v, 10)
	}
	for _, u := range all.GetUsers() {
		var auth []string
		if u.GetToken() {
			auth = append(auth, "token")
		}
		if c := u.GetCertificate(); c != "" {
			auth = append(auth, "cert "+c)
		}
		l, n := u.GetLimits(), u.GetUsage()
		qb := "-"
		if l.GetMaxQueuedBytes() > 0 {
			qb = bytesText(l.GetMaxQueuedBytes())
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\tconn %s stream %s sub %s group %s bytes %s\tconn %d stream %d sub %d group %d bytes %s\n",
			u.GetName(), u.GetAdmin(), strings.Join(auth, "+"), rules(u.GetPublish()), rules(u.GetSubscribe()), rules(u.GetGroups()),
			limit(uint64(l.GetMaxConnections())), limit(uint64(l.GetMaxStreams())), limit(uint64(l.GetMaxSubscriptions())), limit(uint64(l.GetMaxGroups())), qb,
			n.GetConnections(), n.GetStreams(), n.GetSubscriptions(), n.GetGroups(), bytesText(n.GetQueuedBytes()))
	}
	return tw.Flush()
}

func (a *app) statsCmd() *cobra.Command {
	return listCmd(a, &cobra.Command{
		Use:   "stats",
		Short: "Print the broker's counters, memory and plugins",
	}, func(ctx context.Context, _ adminpb.AdminClient, bc pb.BrokerClient) (*pb.StatsResponse, error) {
		st, err := bc.Stats(ctx, &pb.StatsRequest{PageSize: 1})
		if st != nil {
			st.Subscriptions, st.Groups, st.NextPageToken = nil, nil, "" // totals only: groups ls and streams ls list them
		}
		return st, err
	}, a.printStats)
}

func (a *app) printStats(st *pb.StatsResponse) error {
	tw := table(a.stdout)
	for _, r := range [][2]string{
		{"published", strconv.FormatUint(st.GetPublished(), 10)},
		{"delivered", strconv.FormatUint(st.GetDelivered(), 10)},
		{"acked", strconv.FormatUint(st.GetAcked(), 10)},
		{"redelivered", strconv.FormatUint(st.GetRedelivered(), 10)},
		{"dead-lettered", strconv.FormatUint(st.GetDeadLettered(), 10)},
		{"unrouted", strconv.FormatUint(st.GetUnrouted(), 10)},
		{"dropped by plugins", strconv.FormatUint(st.GetDropped(), 10)},
		{"refused", strconv.FormatUint(st.GetRefused(), 10)},
		{"subscriptions", strconv.Itoa(int(st.GetSubscriptionsTotal())) + " fanout"},
		{"groups", strconv.Itoa(int(st.GetGroupsTotal()))},
		{"memory", fmt.Sprintf("%s of %s", bytesText(st.GetMemoryUsedBytes()), bytesText(st.GetMemoryBudgetBytes()))},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	for _, p := range st.GetPlugins() {
		state := ""
		if p.GetBreakerOpen() {
			state = ", circuit breaker open"
		}
		fmt.Fprintf(tw, "plugin %s:\t%d calls, %d failures, %d skipped%s\n", p.GetName(), p.GetCalls(), p.GetFailures(), p.GetSkipped(), state)
	}
	return tw.Flush()
}
