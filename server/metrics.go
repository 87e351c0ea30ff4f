package server

import (
	"sync/atomic"

	"google.golang.org/grpc/codes"
)

// Traffic is what the server counted since it started, for the metrics: what the engine's
// Stats cannot know (bytes on the wire side, refusals by status code, open streams).
type Traffic struct {
	PublishedBytes uint64 // payload bytes of the messages published (accepted by the engine)
	DeliveredBytes uint64 // payload bytes of the messages sent to subscribers
	// Refused counts publishes (unary or one message of a PublishStream frame) refused, and
	// RefusedSubscriptions opens of subscriptions refused, by gRPC status code.
	Refused, RefusedSubscriptions    [numCodes]uint64
	PublishStreams, SubscribeStreams int // open now
	// AuthFailures counts calls refused for their credentials (a wrong token, an unknown
	// certificate, one refused in the TLS handshake), Denials calls and messages refused by
	// a user's rules or limits; both 0 without users.
	AuthFailures, Denials uint64
}

// numCodes is the number of gRPC status codes (OK to UNAUTHENTICATED).
const numCodes = int(codes.Unauthenticated) + 1

// traffic holds the server's counters. Each is updated once per frame or per refusal, never
// per message delivered, so that counting costs the hot path nothing measurable; the
// counters are read only when metrics are scraped.
type traffic struct {
	_                                [64]byte // off the cache line of the Server's other fields
	publishedBytes, deliveredBytes   atomic.Uint64
	refused, refusedSubs             [numCodes]atomic.Uint64
	publishStreams, subscribeStreams atomic.Int64
}

func (t *traffic) refuse(c codes.Code) {
	if int(c) < numCodes {
		t.refused[c].Add(1)
	}
}

func (t *traffic) refuseSub(c codes.Code) {
	if int(c) < numCodes {
		t.refusedSubs[c].Add(1)
	}
}

// Traffic returns the server's counters.
func (s *Server) Traffic() Traffic {
	t := &s.traffic
	out := Traffic{PublishedBytes: t.publishedBytes.Load(), DeliveredBytes: t.deliveredBytes.Load(),
		PublishStreams: int(t.publishStreams.Load()), SubscribeStreams: int(t.subscribeStreams.Load())}
	for i := range numCodes {
		out.Refused[i] = t.refused[i].Load()
		out.RefusedSubscriptions[i] = t.refusedSubs[i].Load()
	}
	if s.opts.Auth != nil {
		out.AuthFailures, out.Denials = s.opts.Auth.Counts()
	}
	return out
}
