package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server"
)

func (tb *testBroker) admin() adminpb.AdminClient { return adminpb.NewAdminClient(tb.conn) }

// startWork starts a broker with one member of group "work" on jobs.>, its maxInFlight and
// maxDeliveries as given.
func startWork(t *testing.T, maxInFlight, maxDeliveries uint32) (*testBroker, adminpb.AdminClient, *sub) {
	tb := start(t, brokertest.Options{})
	o := balanced("work", "work", maxInFlight, "jobs.>")
	o.MaxDeliveries = maxDeliveries
	return tb, tb.admin(), tb.open(t, o)
}

// ListGroups and DescribeGroup report counters, settings and members with their peers;
// PurgeGroup drops what waits, not what is in flight.
func TestAdminListDescribePurgeGroups(t *testing.T) {
	tb, a, m := startWork(t, 1, 4)
	ctx := context.Background()
	tb.open(t, fanout("watch", "other.>"))
	for _, p := range []string{"1", "2", "3"} {
		tb.publish(t, "jobs.a", p)
	}
	m.next()
	brokertest.Eventually(t, "the group to hold 3", func() bool { return tb.group(t, "work").GetQueued() == 2 })

	ls, err := a.ListGroups(ctx, &adminpb.ListGroupsRequest{})
	if err != nil || ls.GetTotal() != 1 || len(ls.GetGroups()) != 1 || ls.GetNextPageToken() != "" {
		t.Fatalf("ListGroups: %v %v", ls, err)
	}
	g := ls.GetGroups()[0]
	if g.GetSubscriptionId() != "work" || g.GetMembers() != 1 || g.GetQueued() != 2 || g.GetInFlight() != 1 || g.GetOldestAge() == nil {
		t.Fatalf("listed %v", g)
	}
	d, err := a.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.GetMemberList()) != 1 || !strings.HasPrefix(d.GetMemberList()[0].GetPeer(), "127.0.0.1:") || d.GetMemberList()[0].GetMemberId() != "work-1" ||
		d.GetMemberList()[0].GetInFlight() != 1 || d.GetSettings().GetMaxDeliveries() != 4 || d.GetSettings().GetDeadLetterTopic() != "dlq.work" ||
		d.GetSettings().GetOverflow() != "reject" || (engine.DeadLetterStore && d.GetSettings().GetDeadLettersMax() != 10_000) || d.GetSettings().GetReplicas() != 1 {
		t.Fatalf("described %v", d)
	}
	_, err = a.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "nope"})
	wantCode(t, err, codes.NotFound, "nope")
	_, err = a.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{})
	wantCode(t, err, codes.InvalidArgument, "subscription_id")

	p, err := a.PurgeGroup(ctx, &adminpb.PurgeGroupRequest{SubscriptionId: "work"})
	if err != nil || p.GetPurged() != 2 {
		t.Fatalf("PurgeGroup: %v %v", p, err)
	}
	// The JetStream engine counts what a purge pulled back out of in-flight a moment later.
	brokertest.Eventually(t, "after purge: nothing queued, one in flight", func() bool {
		g := tb.group(t, "work")
		return g.GetQueued() == 0 && g.GetInFlight() == 1
	})

	// Paging: three groups, two a page.
	tb.open(t, balanced("a", "a", 1, "a"))
	tb.open(t, balanced("b", "b", 1, "b"))
	var ids []string
	tok := ""
	for {
		ls, err := a.ListGroups(ctx, &adminpb.ListGroupsRequest{PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range ls.GetGroups() {
			ids = append(ids, g.GetSubscriptionId())
		}
		if tok = ls.GetNextPageToken(); tok == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "a,b,work" {
		t.Fatalf("paged groups %v", ids)
	}
}

// Deleting a group with members ends them with NOT_FOUND "consumer group deleted": the
// stream of a member alone ends; a stream that also carries a fanout subscription gets an
// `ended` frame and goes on delivering.
func TestAdminDeleteGroupWithMembers(t *testing.T) {
	tb := start(t, brokertest.Options{})
	ctx := context.Background()
	alone := tb.open(t, balanced("work", "work", 1, "jobs.>"))
	shared := tb.open(t, fanout("watch", "jobs.>"))
	shared.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: balanced("work", "work", 1, "jobs.>")}})
	if ev := <-shared.events; ev.GetSubscribed() == nil {
		t.Fatalf("second open answered %v", ev)
	}
	tb.publish(t, "jobs.1", "x")
	tb.publish(t, "jobs.2", "y")
	shared.next() // the fanout copy of jobs.1
	brokertest.Eventually(t, "both members to hold one", func() bool { return tb.group(t, "work").GetInFlight() == 2 })

	resp, err := tb.admin().DeleteGroup(ctx, &adminpb.DeleteGroupRequest{SubscriptionId: "work"})
	if err != nil || resp.GetMembersEnded() != 2 || resp.GetMessagesDropped() != 2 {
		t.Fatalf("DeleteGroup: %v %v", resp, err)
	}
	st := alone.ended()
	if st.Code() != codes.NotFound || !strings.Contains(st.Message(), "deleted by an administrator") {
		t.Fatalf("the lone member's stream ended with %v", st)
	}
	var ended *pb.SubscriptionEnded
	for ended == nil {
		select {
		case ev := <-shared.events:
			ended = ev.GetEnded()
		case <-time.After(10 * time.Second):
			t.Fatal("no ended frame on the shared stream")
		}
	}
	if ended.GetSubscriptionId() != "work" || codes.Code(ended.GetCode()) != codes.NotFound || !strings.Contains(ended.GetError(), "consumer group deleted") {
		t.Fatalf("ended frame %v", ended)
	}
	tb.publish(t, "jobs.3", "z")
	// The fanout copies of jobs.1 and jobs.2, and the group's delivery the stream held, may
	// still be on their way (an engine orders a group's deliveries and fanout copies
	// independently); after them comes the fanout copy of jobs.3, and nothing of the group.
	for {
		m := shared.next()
		if m.GetSubscriptionId() == "watch" && m.GetTopic() == "jobs.3" {
			break
		}
		if m.GetTopic() == "jobs.3" {
			t.Fatalf("after the delete the shared stream got %v", m)
		}
	}
	if st := tb.stats(t); st.GetGroupsTotal() != 0 {
		t.Fatalf("groups after delete: %v", st.GetGroups())
	}
	_, err = tb.admin().DeleteGroup(ctx, &adminpb.DeleteGroupRequest{SubscriptionId: "work"})
	wantCode(t, err, codes.NotFound, "work")
}

// Dead letters are kept with nobody subscribed to the dead-letter topic, listed with their
// tb-dead-letter-* reasons, replayed to their topic with a replay count, and purged.
func TestAdminDeadLetters(t *testing.T) {
	needs(t, engine.DeadLetterStore, "dead-letter store for the admin API")
	tb, a, m := startWork(t, 10, 1)
	ctx := context.Background()
	var ids []string
	for _, p := range []string{"1", "2", "3"} {
		tb.publishH(t, "jobs.a", p, map[string]string{"traceparent": "00-abc-def-01"})
	}
	for range 3 {
		ids = append(ids, m.next().GetSystemId())
	}
	m.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: ids, Reason: "cannot parse"}}})
	brokertest.Eventually(t, "three dead letters", func() bool { return tb.group(t, "work").GetDeadLettered() == 3 })

	ls, err := a.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: "work", PageSize: 2})
	if err != nil || ls.GetTotal() != 3 || len(ls.GetDeadLetters()) != 2 || ls.GetNextPageToken() == "" {
		t.Fatalf("ListDeadLetters: %v %v", ls, err)
	}
	dl := ls.GetDeadLetters()[0]
	if dl.GetSystemId() != ids[0] || dl.GetTopic() != "jobs.a" || string(dl.GetPayload()) != "1" || dl.GetReason() != "cannot parse" ||
		dl.GetCode() != deadletter.CodeMaxDeliveries || dl.GetHeaders()[deadletter.HeaderReason] != "cannot parse" || dl.GetHeaders()[deadletter.HeaderAttempts] != "1" ||
		dl.GetHeaders()["traceparent"] != "00-abc-def-01" || dl.GetDeadLetteredUnixNano() == 0 {
		t.Fatalf("dead letter %v", dl)
	}
	rest, err := a.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: "work", PageToken: ls.GetNextPageToken()})
	if err != nil || len(rest.GetDeadLetters()) != 1 || rest.GetDeadLetters()[0].GetSystemId() != ids[2] || rest.GetNextPageToken() != "" {
		t.Fatalf("second page: %v %v", rest, err)
	}

	_, err = a.ReplayDeadLetters(ctx, &adminpb.ReplayDeadLettersRequest{SubscriptionId: "work"})
	wantCode(t, err, codes.InvalidArgument, "all")
	_, err = a.ReplayDeadLetters(ctx, &adminpb.ReplayDeadLettersRequest{SubscriptionId: "work", All: true, SystemIds: ids})
	wantCode(t, err, codes.InvalidArgument, "not both")

	rp, err := a.ReplayDeadLetters(ctx, &adminpb.ReplayDeadLettersRequest{SubscriptionId: "work", SystemIds: []string{ids[1], "AAAAAAAAAAAAAAAAAAAAAA"}})
	if err != nil || rp.GetReplayed() != 1 || rp.GetFailed() != 1 || codes.Code(rp.GetResults()[1].GetCode()) != codes.NotFound || rp.GetResults()[0].GetRouted() != 1 {
		t.Fatalf("replay: %v %v", rp, err)
	}
	got := m.next()
	if string(got.GetPayload()) != "2" || got.GetTopic() != "jobs.a" || got.GetHeaders()[deadletter.HeaderReplayCount] != "1" ||
		got.GetHeaders()[deadletter.HeaderReason] != "" || got.GetHeaders()[deadletter.HeaderCode] != "" || got.GetHeaders()["traceparent"] != "00-abc-def-01" ||
		got.GetSystemId() != rp.GetResults()[0].GetNewSystemId() {
		t.Fatalf("replayed message %v", got)
	}
	m.ack(got.GetSystemId())

	all, err := a.ReplayDeadLetters(ctx, &adminpb.ReplayDeadLettersRequest{SubscriptionId: "work", All: true})
	if err != nil || all.GetReplayed() != 2 {
		t.Fatalf("replay all: %v %v", all, err)
	}
	for range 2 {
		msg := m.next()
		if msg.GetHeaders()[deadletter.HeaderReplayCount] != "1" {
			t.Fatalf("replayed %v", msg)
		}
		// Nacked once more: dead-lettered again, with the replay count kept.
		m.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{msg.GetSystemId()}}}})
	}
	brokertest.Eventually(t, "two dead letters again", func() bool { return tb.group(t, "work").GetDeadLettered() == 5 })
	ls, _ = a.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: "work"})
	if len(ls.GetDeadLetters()) != 2 || ls.GetDeadLetters()[0].GetHeaders()[deadletter.HeaderReplayCount] != "1" {
		t.Fatalf("dead letters after a failed replay: %v", ls)
	}
	pg, err := a.PurgeDeadLetters(ctx, &adminpb.PurgeDeadLettersRequest{SubscriptionId: "work", SystemIds: []string{ls.GetDeadLetters()[0].GetSystemId()}})
	if err != nil || pg.GetPurged() != 1 {
		t.Fatalf("purge one: %v %v", pg, err)
	}
	pg, err = a.PurgeDeadLetters(ctx, &adminpb.PurgeDeadLettersRequest{SubscriptionId: "work", All: true})
	if err != nil || pg.GetPurged() != 1 {
		t.Fatalf("purge all: %v %v", pg, err)
	}
	_, err = a.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: "nope"})
	wantCode(t, err, codes.NotFound, "nope")
}

// ListStreams lists each Subscribe stream with its peer and subscriptions.
func TestAdminListStreams(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, fanout("watch", "a.>"))
	s.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: balanced("work", "work", 1, "jobs.>")}})
	<-s.events
	tb.open(t, fanout("other", "b"))
	ls, err := tb.admin().ListStreams(context.Background(), &adminpb.ListStreamsRequest{PageSize: 1})
	if err != nil || ls.GetTotal() != 2 || len(ls.GetStreams()) != 1 || ls.GetNextPageToken() == "" {
		t.Fatalf("ListStreams: %v %v", ls, err)
	}
	st := ls.GetStreams()[0]
	if !strings.HasPrefix(st.GetPeer(), "127.0.0.1:") || len(st.GetSubscriptions()) != 2 ||
		st.GetSubscriptions()[0].GetSubscriptionId() != "watch" || st.GetSubscriptions()[0].GetMode() != pb.DeliveryMode_DELIVERY_MODE_FANOUT ||
		st.GetSubscriptions()[1].GetConsumerGroup() != "work" || st.GetSubscriptions()[1].GetMemberId() != "work-1" {
		t.Fatalf("stream %v", st)
	}
	next, err := tb.admin().ListStreams(context.Background(), &adminpb.ListStreamsRequest{PageToken: ls.GetNextPageToken()})
	if err != nil || len(next.GetStreams()) != 1 || next.GetStreams()[0].GetSubscriptions()[0].GetSubscriptionId() != "other" || next.GetNextPageToken() != "" {
		t.Fatalf("second page: %v %v", next, err)
	}
	_, err = tb.admin().ListStreams(context.Background(), &adminpb.ListStreamsRequest{PageToken: "bogus"})
	wantCode(t, err, codes.InvalidArgument, "page_token")
}

// Every admin call passes Options.AdminAuthorize; the Broker service does not.
func TestAdminAuthorizeHook(t *testing.T) {
	var asked []string
	tb := startWith(t, brokertest.Options{}, server.Options{AdminAuthorize: func(_ context.Context, method string) error {
		asked = append(asked, method)
		return status.Error(codes.PermissionDenied, "needs the admin grant")
	}})
	_, err := tb.admin().ListGroups(context.Background(), &adminpb.ListGroupsRequest{})
	wantCode(t, err, codes.PermissionDenied, "admin grant")
	_, err = tb.admin().PurgeDeadLetters(context.Background(), &adminpb.PurgeDeadLettersRequest{SubscriptionId: "x", All: true})
	wantCode(t, err, codes.PermissionDenied, "admin grant")
	if _, err := tb.c.Stats(context.Background(), &pb.StatsRequest{}); err != nil {
		t.Fatalf("Stats went through the admin gate: %v", err)
	}
	if strings.Join(asked, ",") != "/tinybroker.admin.v1.Admin/ListGroups,/tinybroker.admin.v1.Admin/PurgeDeadLetters" {
		t.Fatalf("asked for %v", asked)
	}
}

// With users, the Admin service needs authentication and admin = true, like Stats.
func TestAdminNeedsAdminUser(t *testing.T) {
	s := startSecure(t, testUsers(t), false, false)
	ctx := context.Background()
	adminAs := func(token string) adminpb.AdminClient {
		_, conn := s.conn(t, token, nil)
		return adminpb.NewAdminClient(conn)
	}
	_, err := adminAs("").ListGroups(ctx, &adminpb.ListGroupsRequest{})
	wantCode(t, err, codes.Unauthenticated, "requires authentication")
	_, err = adminAs("alice:a-token").DeleteGroup(ctx, &adminpb.DeleteGroupRequest{SubscriptionId: "billing"})
	wantCode(t, err, codes.PermissionDenied, "call DeleteGroup")
	if _, err := adminAs("root:r-token").ListGroups(ctx, &adminpb.ListGroupsRequest{}); err != nil {
		t.Fatalf("an admin's ListGroups: %v", err)
	}
}

// PauseGroup stops a group's deliveries and keeps what it is given; what a member held
// stays its to settle, and one it nacks waits too. ResumeGroup delivers everything kept.
// Both are idempotent; DescribeGroup and ListGroups say paused.
func TestAdminPauseResumeGroup(t *testing.T) {
	tb, a, m := startWork(t, 10, 0)
	ctx := context.Background()
	held := tb.publish(t, "jobs.a", "held")
	if got := m.next(); got.GetSystemId() != held {
		t.Fatalf("got %q before the pause", got.GetPayload())
	}
	for range 2 {
		if p, err := a.PauseGroup(ctx, &adminpb.PauseGroupRequest{SubscriptionId: "work"}); err != nil || p.GetQueued() != 0 {
			t.Fatalf("PauseGroup: %v %v; want nothing queued", p, err)
		}
	}
	d, err := a.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "work"})
	if err != nil || !d.GetPaused() {
		t.Fatalf("DescribeGroup after the pause: paused %v, %v", d.GetPaused(), err)
	}
	tb.publish(t, "jobs.a", "2")
	tb.publish(t, "jobs.a", "3")
	m.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{held}}}})
	brokertest.Eventually(t, "the group to keep 3 and hold none out", func() bool {
		g := tb.group(t, "work")
		return g.GetQueued()+g.GetDelayed() == 3 && g.GetInFlight() == 0
	})
	m.none(500 * time.Millisecond)
	ls, err := a.ListGroups(ctx, &adminpb.ListGroupsRequest{})
	if err != nil || len(ls.GetGroups()) != 1 || !ls.GetGroups()[0].GetPaused() {
		t.Fatalf("ListGroups after the pause: %v %v", ls, err)
	}

	for range 2 {
		if _, err := a.ResumeGroup(ctx, &adminpb.ResumeGroupRequest{SubscriptionId: "work"}); err != nil {
			t.Fatalf("ResumeGroup: %v", err)
		}
	}
	got := map[string]bool{}
	for range 3 {
		msg := m.next()
		got[string(msg.GetPayload())] = true
		m.ack(msg.GetSystemId())
	}
	if !got["held"] || !got["2"] || !got["3"] {
		t.Fatalf("after the resume: %v; want held, 2 and 3", got)
	}
	if d, err := a.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "work"}); err != nil || d.GetPaused() {
		t.Fatalf("DescribeGroup after the resume: paused %v, %v", d.GetPaused(), err)
	}
	_, err = a.PauseGroup(ctx, &adminpb.PauseGroupRequest{SubscriptionId: "nope"})
	wantCode(t, err, codes.NotFound, "nope")
	_, err = a.ResumeGroup(ctx, &adminpb.ResumeGroupRequest{})
	wantCode(t, err, codes.InvalidArgument, "subscription_id")
}

// The dead-letter breaker: a group that dead-letters 3 messages within its window is paused
// (logged, counted) and keeps the rest until an operator resumes it.
func TestDeadLetterBreaker(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupDeadLetterBreaker: 3, GroupDeadLetterBreakerWindow: time.Minute}})
	ctx := context.Background()
	a := tb.admin()
	o := balanced("work", "work", 1, "jobs.>")
	o.MaxDeliveries = 1
	m := tb.open(t, o)
	for i := range 5 {
		tb.publish(t, "jobs.a", strconv.Itoa(i))
	}
	for range 3 { // each nack dead-letters its message: max_deliveries 1
		msg := m.next()
		m.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{msg.GetSystemId()}, Reason: "dependency down"}}})
	}
	brokertest.Eventually(t, "the group paused by its breaker, holding the other 2", func() bool {
		d, err := a.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "work"})
		return err == nil && d.GetPaused() && d.GetQueued() == 2 && d.GetDeadLettered() == 3
	})
	m.none(300 * time.Millisecond)
	if d, err := a.DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "work"}); err != nil ||
		d.GetSettings().GetDeadLetterBreaker() != 3 || d.GetSettings().GetDeadLetterBreakerWindow().AsDuration() != time.Minute {
		t.Fatalf("DescribeGroup's breaker settings: %v %v", d.GetSettings(), err)
	}
	if _, err := a.ResumeGroup(ctx, &adminpb.ResumeGroupRequest{SubscriptionId: "work"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		m.ack(m.next().GetSystemId())
	}
}
