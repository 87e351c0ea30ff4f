package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// dlqPage is how many dead letters a listing, a replay or a purge of --all takes per call:
// each page is one call, and its progress line.
const dlqPage = 100

func (a *app) dlqCmd() *cobra.Command {
	return a.parent("dlq", "List, replay and purge a consumer group's dead letters",
		`Every consumer group keeps the messages it dead-letters (besides publishing them to its
dead-letter topic) until they are replayed or purged: ls lists them with their
tb-dead-letter-* code and reason, replay publishes them again to their original topic with a
tb-replay-count header, purge drops them.`,
		a.dlqLsCmd(), a.dlqReplayCmd(), a.dlqPurgeCmd())
}

func (a *app) dlqLsCmd() *cobra.Command {
	var limit int
	c := groupCmd(a, &cobra.Command{
		Use:     "ls SUBSCRIPTION_ID",
		Aliases: []string{"list"},
		Short:   "List a group's dead letters, oldest first",
	}, func(ctx context.Context, ac adminpb.AdminClient, id string) (*adminpb.ListDeadLettersResponse, error) {
		all := &adminpb.ListDeadLettersResponse{}
		return all, pages(func(tok string) (string, error) {
			n := dlqPage
			if limit > 0 {
				n = min(n, limit-len(all.DeadLetters))
			}
			ls, err := ac.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: id, PageSize: uint32(n), PageToken: tok})
			all.DeadLetters, all.Total, all.NextPageToken = append(all.DeadLetters, ls.GetDeadLetters()...), ls.GetTotal(), ls.GetNextPageToken()
			if limit > 0 && len(all.DeadLetters) >= limit {
				return "", err
			}
			return all.NextPageToken, err
		})
	}, func(id string, all *adminpb.ListDeadLettersResponse) error {
		tw := a.listing(len(all.DeadLetters), "group "+id+" keeps no dead letters", "SYSTEM ID\tTOPIC\tATTEMPTS\tAGE\tCODE\tREASON\tPAYLOAD")
		if tw == nil {
			return nil
		}
		for _, dl := range all.DeadLetters {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", dl.GetSystemId(), dl.GetTopic(), dl.GetAttempts(),
				shortDuration(time.Since(time.Unix(0, dl.GetDeadLetteredUnixNano()))), dl.GetCode(), dl.GetReason(), clip(payloadText(dl.GetPayload()), 40))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if n := int(all.Total) - len(all.DeadLetters); n > 0 {
			fmt.Fprintf(a.stdout, "... and %d more (--limit 0 lists them all)\n", n)
		}
		return nil
	})
	c.Flags().IntVar(&limit, "limit", 100, "list at most this many (0: all)")
	return c
}

// clip shortens s to n runes for a table.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// chosenLetters checks a replay's or purge's arguments: ids, or --all.
func chosenLetters(cmd *cobra.Command, args []string, all bool) ([]string, error) {
	switch {
	case len(args) == 0:
		return nil, usagef(cmd, "%s needs a group's SUBSCRIPTION_ID", cmd.Name())
	case len(args) == 1 && !all:
		return nil, usagef(cmd, "name the dead letters to %s by SYSTEM_ID, or give --all", cmd.Name())
	case len(args) > 1 && all:
		return nil, usagef(cmd, "give SYSTEM_IDs or --all, not both")
	}
	return args[1:], nil
}

// onLetters runs do on the dead letters args choose (chosenLetters), a page at a time with
// --all (eachPage), and returns what it counted.
func (a *app) onLetters(cmd *cobra.Command, f *adminFlags, args []string, all bool, verb string,
	do func(ctx context.Context, ac adminpb.AdminClient, ids []string) (int, error)) (int, error) {
	ids, err := chosenLetters(cmd, args, all)
	if err != nil {
		return 0, err
	}
	var n int
	err = f.call(cmd.Context(), func(ctx context.Context, ac adminpb.AdminClient, _ pb.BrokerClient) (err error) {
		n, err = a.eachPage(ctx, ac, args[0], ids, verb, func(ids []string) (int, error) { return do(ctx, ac, ids) })
		return err
	})
	return n, err
}

// eachPage runs do on the given ids, or, with none, on every dead letter of group a page at a
// time, printing progress; it returns what do counted.
func (a *app) eachPage(ctx context.Context, ac adminpb.AdminClient, group string, ids []string, verb string,
	do func(ids []string) (done int, err error)) (int, error) {
	if len(ids) > 0 {
		return do(ids)
	}
	first, err := ac.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: group, PageSize: 1})
	if err != nil {
		return 0, err
	}
	total, done, tried := int(first.GetTotal()), 0, make(map[string]bool)
	for {
		// Always the first page: what was done leaves the store (a refused replay stays, and
		// is skipped as tried).
		ls, err := ac.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: group, PageSize: dlqPage * 10})
		if err != nil {
			return done, err
		}
		var page []string
		for _, dl := range ls.GetDeadLetters() {
			if !tried[dl.GetSystemId()] && len(page) < dlqPage {
				page = append(page, dl.GetSystemId())
				tried[dl.GetSystemId()] = true
			}
		}
		if len(page) == 0 {
			return done, nil
		}
		n, err := do(page)
		done += n
		if err != nil {
			return done, err
		}
		fmt.Fprintf(a.stderr, "%s %d of %d dead letters\n", verb, len(tried), max(total, len(tried)))
	}
}

// lettersCmd makes c an admin command on some dead letters of one consumer group, named by
// SYSTEM_ID after its SUBSCRIPTION_ID or all of them with --all (allUsage), as run does with
// them (onLetters); it completes the SUBSCRIPTION_ID from the broker.
func lettersCmd(c *cobra.Command, allUsage string, run func(cmd *cobra.Command, args []string, f *adminFlags, all bool) error) *cobra.Command {
	f := &adminFlags{}
	var all bool
	c.Args, c.ValidArgsFunction = cobra.ArbitraryArgs, f.groupArg
	c.RunE = func(cmd *cobra.Command, args []string) error { return run(cmd, args, f, all) }
	f.register(c)
	c.Flags().BoolVar(&all, "all", false, allUsage)
	return c
}

func (a *app) dlqReplayCmd() *cobra.Command {
	return lettersCmd(&cobra.Command{
		Use:   "replay SUBSCRIPTION_ID [SYSTEM_ID...] [--all]",
		Short: "Publish dead letters again to their original topic",
		Long: `Publishes the named dead letters (or, with --all, every one the group keeps) again to their
original topic, as a new message through the plugins, without the tb-dead-letter-* headers and
with tb-replay-count one higher. A replayed dead letter leaves the store; one the broker
refuses stays. --all goes a page of 100 at a time and reports its progress on standard error.
Exits 1 if any was refused.`,
		Example: `  tinybroker dlq replay resizers q0ZlNv2S8xE1c3Wm9aPjYg
  tinybroker dlq replay resizers --all`,
	}, "replay every dead letter the group keeps", func(cmd *cobra.Command, args []string, f *adminFlags, all bool) error {
		res := &adminpb.ReplayDeadLettersResponse{}
		_, err := a.onLetters(cmd, f, args, all, "replayed", func(ctx context.Context, ac adminpb.AdminClient, ids []string) (int, error) {
			r, err := ac.ReplayDeadLetters(ctx, &adminpb.ReplayDeadLettersRequest{SubscriptionId: args[0], SystemIds: ids})
			res.Results = append(res.Results, r.GetResults()...)
			res.Replayed += r.GetReplayed()
			res.Failed += r.GetFailed()
			return int(r.GetReplayed()), err
		})
		if err != nil {
			return err
		}
		if f.json {
			if err := printJSON(a.stdout, res); err != nil {
				return err
			}
		} else {
			for _, r := range res.GetResults() {
				if r.GetCode() != 0 {
					fmt.Fprintf(a.stdout, "%s: not replayed: %s: %s\n", r.GetSystemId(), codes.Code(r.GetCode()), r.GetError())
				} else {
					fmt.Fprintf(a.stdout, "%s: replayed as %s (routed to %d)\n", r.GetSystemId(), r.GetNewSystemId(), r.GetRouted())
				}
			}
			fmt.Fprintf(a.stdout, "replayed %d dead letters of group %s, %d failed\n", res.GetReplayed(), args[0], res.GetFailed())
		}
		if res.GetFailed() > 0 {
			return fmt.Errorf("%d of %d dead letters were not replayed", res.GetFailed(), len(res.GetResults()))
		}
		return nil
	})
}

func (a *app) dlqPurgeCmd() *cobra.Command {
	return lettersCmd(&cobra.Command{
		Use:   "purge SUBSCRIPTION_ID [SYSTEM_ID...] [--all]",
		Short: "Drop dead letters from a group's store",
		Long: `Drops the named dead letters (or, with --all, every one the group keeps) from the group's
store. --all goes a page of 100 at a time and reports its progress on standard error.`,
	}, "purge every dead letter the group keeps", func(cmd *cobra.Command, args []string, f *adminFlags, all bool) error {
		purged, err := a.onLetters(cmd, f, args, all, "purged", func(ctx context.Context, ac adminpb.AdminClient, ids []string) (int, error) {
			r, err := ac.PurgeDeadLetters(ctx, &adminpb.PurgeDeadLettersRequest{SubscriptionId: args[0], SystemIds: ids})
			return int(r.GetPurged()), err
		})
		if err != nil {
			return err
		}
		if f.json {
			return printJSON(a.stdout, &adminpb.PurgeDeadLettersResponse{Purged: uint32(purged)})
		}
		fmt.Fprintf(a.stdout, "purged %d dead letters of group %s\n", purged, args[0])
		return nil
	})
}
