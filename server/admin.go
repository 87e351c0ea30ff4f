package server

import (
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server/auth"
)

// The tinybroker.admin.v1.Admin service: consumer groups, dead letters and streams, through
// the engine seam (broker.Engine), on the same gRPC server as the Broker service.

// adminPrefix starts the full method name of every admin RPC.
var adminPrefix = "/" + adminpb.Admin_ServiceDesc.ServiceName + "/"

// adminGate is the one place every admin RPC passes before its handler: Options.AdminAuthorize
// decides (access control, e.g. an "admin" grant, goes there and nowhere else). Every admin
// RPC is unary; a streaming one added later must get a stream interceptor doing the same.
func (s *Server) adminGate(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, adminPrefix) {
		return handler(ctx, req)
	}
	if s.opts.AdminAuthorize != nil {
		if err := s.opts.AdminAuthorize(ctx, info.FullMethod); err != nil {
			s.log.Warn("admin call refused", "method", info.FullMethod, "peer", peerOf(ctx), "error", err)
			return nil, toStatus(err)
		}
	}
	resp, err := handler(ctx, req)
	if err != nil {
		s.log.Debug("admin call failed", "method", info.FullMethod, "peer", peerOf(ctx), "error", err)
	} else if !strings.HasPrefix(info.FullMethod[len(adminPrefix):], "List") && !strings.HasPrefix(info.FullMethod[len(adminPrefix):], "Describe") {
		s.log.Info("admin call", "method", info.FullMethod, "peer", peerOf(ctx))
	}
	return resp, err
}

type adminServer struct {
	adminpb.UnimplementedAdminServer
	s *Server
}

// adminPageMax is the most entries one answer of a listing holds.
const adminPageMax = 1000

func pageSize(n uint32, def int) int {
	if n == 0 {
		return def
	}
	return min(int(n), adminPageMax)
}

func needGroup(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "subscription_id is required: the consumer group's subscription_id (tinybroker groups ls lists them)")
	}
	return nil
}

func (a *adminServer) ListGroups(_ context.Context, req *adminpb.ListGroupsRequest) (*adminpb.ListGroupsResponse, error) {
	all := a.s.b.Stats().Groups // sorted by id
	start := 0
	if tok := req.GetPageToken(); tok != "" {
		for start < len(all) && all[start].ID <= tok {
			start++
		}
	}
	n := pageSize(req.GetPageSize(), adminPageMax)
	end := min(start+n, len(all))
	resp := &adminpb.ListGroupsResponse{Total: uint32(len(all))}
	for _, g := range all[start:end] {
		resp.Groups = append(resp.Groups, groupMessage(g))
	}
	if end < len(all) {
		resp.NextPageToken = all[end-1].ID
	}
	return resp, nil
}

func groupMessage(g broker.GroupStats) *adminpb.Group {
	m := &adminpb.Group{SubscriptionId: g.ID, ConsumerGroup: g.Group, TopicPatterns: g.Patterns, Members: uint32(g.Members),
		Queued: uint32(g.Queued), InFlight: uint32(g.InFlight), Delayed: uint32(g.Delayed), Bytes: uint64(max(g.Bytes, 0)),
		Delivered: g.Delivered, Acked: g.Acked, Redelivered: g.Redelivered, DeadLettered: g.DeadLettered, Dropped: g.Dropped,
		Rejected: g.Rejected, Declared: g.Declared, Paused: g.Paused, DeadLetters: uint32(g.DeadLetters), DeadLetterBytes: uint64(max(g.DeadLetterBytes, 0)),
		DeadLettersDropped: g.DeadLettersDropped}
	if g.Oldest != 0 {
		m.OldestAge = durationpb.New(max(time.Since(time.Unix(0, g.Oldest)), 0))
	}
	m.Keys = uint32(g.Keys)
	for _, k := range g.Busiest {
		m.BusiestKeys = append(m.BusiestKeys, &adminpb.KeyLoad{Key: k.Key, Held: uint32(k.Held), Noisy: k.Noisy})
	}
	return m
}

func (a *adminServer) DescribeGroup(_ context.Context, req *adminpb.DescribeGroupRequest) (*adminpb.Group, error) {
	gi, err := onGroup(req.GetSubscriptionId(), a.s.b.Group)
	if err != nil {
		return nil, err
	}
	m := groupMessage(gi.GroupStats)
	overflow := "reject"
	if gi.Limits.Overflow == broker.OverflowDropOldest {
		overflow = "drop_oldest"
	}
	m.Settings = &adminpb.GroupSettings{MaxDeliveries: uint32(gi.MaxDeliveries), DeadLetterTopic: gi.DeadLetterTopic,
		MaxQueued: uint32(gi.Limits.MaxQueued), MaxQueuedBytes: uint64(gi.Limits.MaxQueuedBytes), Overflow: overflow,
		DeadLettersMax: uint32(gi.Limits.DeadLetterMax), DeadLettersMaxBytes: uint64(gi.Limits.DeadLetterMaxBytes),
		Replicas: uint32(gi.Replicas), Ordering: gi.Dispatch.Ordering.String(), FairBy: gi.Dispatch.FairBy,
		MaxPriority: uint32(gi.Dispatch.MaxPriority), OnExpire: "dead_letter"}
	if gi.Limits.MaxAge > 0 {
		m.Settings.MaxAge = durationpb.New(gi.Limits.MaxAge)
	}
	if gi.Limits.DropExpired() {
		m.Settings.OnExpire = "drop"
	}
	if n := gi.Limits.DeadLetterBreaker; n > 0 {
		m.Settings.DeadLetterBreaker = uint32(n)
		m.Settings.DeadLetterBreakerWindow = durationpb.New(gi.Limits.DeadLetterBreakerWindow)
	}
	setRedelivery(m.Settings, gi.Limits)
	for _, mb := range gi.MemberList {
		m.MemberList = append(m.MemberList, &adminpb.Member{MemberId: mb.ID, Peer: mb.Peer, InFlight: uint32(mb.InFlight),
			MaxInFlight: uint32(mb.MaxInFlight), AckDeadline: durationpb.New(mb.AckDeadline), JoinedUnixNano: mb.Joined,
			Priority: uint32(mb.Priority)})
	}
	return m, nil
}

// setRedelivery echoes the redelivery back-off in force (broker.GroupLimits.RedeliveryDelay):
// the list, or the doubling's min and max; nothing when it is off.
func setRedelivery(s *adminpb.GroupSettings, l broker.GroupLimits) {
	switch {
	case len(l.RedeliveryBackoff) > 0:
		for _, d := range l.RedeliveryBackoff {
			s.RedeliveryBackoff = append(s.RedeliveryBackoff, durationpb.New(d))
		}
	case l.RedeliveryDelayMin > 0:
		s.RedeliveryDelayMin, s.RedeliveryDelayMax = durationpb.New(l.RedeliveryDelayMin), durationpb.New(max(l.RedeliveryDelayMax, l.RedeliveryDelayMin))
	default:
		return
	}
	s.RedeliveryJitter = max(l.RedeliveryJitter, 0) // NoJitter is none
}

func (a *adminServer) DeleteGroup(_ context.Context, req *adminpb.DeleteGroupRequest) (*adminpb.DeleteGroupResponse, error) {
	id := req.GetSubscriptionId()
	gi, err := onGroup(id, a.s.b.Group) // for the answer's counts: the group may change before it goes
	if err != nil {
		return nil, err
	}
	if err := a.s.b.DeleteGroup(id); err != nil {
		return nil, toStatus(err)
	}
	return &adminpb.DeleteGroupResponse{MembersEnded: uint32(gi.Members), MessagesDropped: uint32(gi.Queued + gi.InFlight + gi.Delayed),
		DeadLettersDropped: uint32(gi.DeadLetters)}, nil
}

func (a *adminServer) PurgeGroup(_ context.Context, req *adminpb.PurgeGroupRequest) (*adminpb.PurgeGroupResponse, error) {
	n, err := onGroup(req.GetSubscriptionId(), a.s.b.PurgeGroup)
	if err != nil {
		return nil, err
	}
	return &adminpb.PurgeGroupResponse{Purged: uint32(n)}, nil
}

func (a *adminServer) PauseGroup(_ context.Context, req *adminpb.PauseGroupRequest) (*adminpb.PauseGroupResponse, error) {
	gi, err := onGroup(req.GetSubscriptionId(), func(id string) (broker.GroupInfo, error) {
		if err := a.s.b.PauseGroup(id, true); err != nil {
			return broker.GroupInfo{}, err
		}
		return a.s.b.Group(id)
	})
	if err != nil {
		return nil, err
	}
	return &adminpb.PauseGroupResponse{Queued: uint32(gi.Queued)}, nil
}

func (a *adminServer) ResumeGroup(_ context.Context, req *adminpb.ResumeGroupRequest) (*adminpb.ResumeGroupResponse, error) {
	_, err := onGroup(req.GetSubscriptionId(), func(id string) (struct{}, error) { return struct{}{}, a.s.b.PauseGroup(id, false) })
	if err != nil {
		return nil, err
	}
	return &adminpb.ResumeGroupResponse{}, nil
}

// ListStreams pages by position: a stream that opens or closes between two pages may shift
// the listing by one.
func (a *adminServer) ListStreams(_ context.Context, req *adminpb.ListStreamsRequest) (*adminpb.ListStreamsResponse, error) {
	all := a.s.b.Streams()
	start := 0
	if tok := req.GetPageToken(); tok != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(tok, "at/"))
		if err != nil || !strings.HasPrefix(tok, "at/") || n < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "page_token %q is not a next_page_token of this broker; leave it empty to list from the start", tok)
		}
		start = min(n, len(all))
	}
	end := min(start+pageSize(req.GetPageSize(), adminPageMax), len(all))
	resp := &adminpb.ListStreamsResponse{Total: uint32(len(all))}
	for _, st := range all[start:end] {
		m := &adminpb.Stream{StreamId: st.ID, Peer: st.Peer, Buffered: uint32(st.Buffered)}
		for _, sub := range st.Subscriptions {
			mode := pb.DeliveryMode_DELIVERY_MODE_FANOUT
			if sub.Mode == broker.Balanced {
				mode = pb.DeliveryMode_DELIVERY_MODE_BALANCED
			}
			m.Subscriptions = append(m.Subscriptions, &adminpb.StreamSubscription{SubscriptionId: sub.ID, MemberId: sub.MemberID,
				Mode: mode, ConsumerGroup: sub.Group, TopicPatterns: sub.Patterns})
		}
		resp.Streams = append(resp.Streams, m)
	}
	if end < len(all) {
		resp.NextPageToken = "at/" + strconv.Itoa(end)
	}
	return resp, nil
}

func (a *adminServer) ListDeadLetters(_ context.Context, req *adminpb.ListDeadLettersRequest) (*adminpb.ListDeadLettersResponse, error) {
	id := req.GetSubscriptionId()
	gi, err := onGroup(id, a.s.b.Group)
	if err != nil {
		return nil, err
	}
	dls, next, err := a.s.b.DeadLetters(id, req.GetPageToken(), pageSize(req.GetPageSize(), 100))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &adminpb.ListDeadLettersResponse{NextPageToken: next, Total: uint32(gi.DeadLetters)}
	for _, dl := range dls {
		resp.DeadLetters = append(resp.DeadLetters, &adminpb.DeadLetter{SystemId: dl.ID, Topic: dl.Topic, Payload: dl.Payload,
			Headers: dl.Headers, Code: dl.Code, Reason: dl.Reason, Attempts: uint32(dl.Attempts), DeadLetteredUnixNano: dl.DeadAt, Key: dl.Key})
	}
	return resp, nil
}

// ListUsers lists the users in force with their rules, limits and usage; never a token.
func (a *adminServer) ListUsers(context.Context, *adminpb.ListUsersRequest) (*adminpb.ListUsersResponse, error) {
	rules := func(r auth.Rules) *adminpb.Rules { return &adminpb.Rules{Allow: r.Allow, Deny: r.Deny} }
	resp := &adminpb.ListUsersResponse{}
	for _, u := range a.s.opts.Auth.Users() {
		l := u.Limits
		resp.Users = append(resp.Users, &adminpb.User{Name: u.Name, Admin: u.Admin, Token: u.HasToken,
			Certificate: u.Certificate, Publish: rules(u.Publish), Subscribe: rules(u.Subscribe), Groups: rules(u.Groups),
			Limits: &adminpb.UserLimits{MaxConnections: uint32(l.MaxConnections), MaxStreams: uint32(l.MaxStreams),
				MaxSubscriptions: uint32(l.MaxSubscriptions), MaxGroups: uint32(l.MaxGroups), MaxQueuedBytes: uint64(l.MaxQueuedBytes)},
			Usage: &adminpb.UserUsage{Connections: uint32(u.Connections), Streams: uint32(u.Streams), Subscriptions: uint32(u.Subscriptions),
				Groups: uint32(u.GroupsHeld), QueuedBytes: uint64(u.QueuedBytes)},
		})
	}
	return resp, nil
}

// onGroup runs do, an engine operation, on the consumer group id names, answering the
// engine's error as a status.
func onGroup[T any](id string, do func(id string) (T, error)) (T, error) {
	var v T
	err := needGroup(id)
	if err == nil {
		v, err = do(id)
	}
	return v, toStatus(err)
}

// deadLetterChoice is a request for dead letters of a group: named by system_ids, or all.
type deadLetterChoice interface {
	GetSubscriptionId() string
	GetSystemIds() []string
	GetAll() bool
}

// onDeadLetters runs do, an engine operation, on the dead letters req chooses (ids nil or
// empty: all) once it has checked that req names them or sets all, not both; what names the
// call in the error. The engine's error is answered as a status.
func onDeadLetters[T any](req deadLetterChoice, what string, do func(id string, ids []string) (T, error)) (T, error) {
	return onGroup(req.GetSubscriptionId(), func(id string) (T, error) {
		var none T
		ids, all := req.GetSystemIds(), req.GetAll()
		switch {
		case all && len(ids) > 0:
			return none, status.Errorf(codes.InvalidArgument, "%s: set system_ids or all, not both", what)
		case !all && len(ids) == 0:
			return none, status.Errorf(codes.InvalidArgument, "%s: name the dead letters by system_ids, or set all to take every one", what)
		}
		return do(id, ids)
	})
}

func (a *adminServer) ReplayDeadLetters(_ context.Context, req *adminpb.ReplayDeadLettersRequest) (*adminpb.ReplayDeadLettersResponse, error) {
	res, err := onDeadLetters(req, "ReplayDeadLetters", a.s.b.ReplayDeadLetters)
	if err != nil {
		return nil, err
	}
	resp := &adminpb.ReplayDeadLettersResponse{}
	for _, r := range res {
		m := &adminpb.ReplayResult{SystemId: r.ID, NewSystemId: r.SystemID, Routed: uint32(r.Routed)}
		if r.Err != nil {
			m.Code, m.Error = int32(codeOf(r.Err)), r.Err.Error()
			resp.Failed++
		} else {
			resp.Replayed++
		}
		resp.Results = append(resp.Results, m)
	}
	return resp, nil
}

func (a *adminServer) PurgeDeadLetters(_ context.Context, req *adminpb.PurgeDeadLettersRequest) (*adminpb.PurgeDeadLettersResponse, error) {
	n, err := onDeadLetters(req, "PurgeDeadLetters", a.s.b.PurgeDeadLetters)
	if err != nil {
		return nil, err
	}
	return &adminpb.PurgeDeadLettersResponse{Purged: uint32(n)}, nil
}
