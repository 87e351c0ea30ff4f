package server

import (
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/broker"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Stats lists subscriptions and groups a page at a time: 100,000 subscriptions made an
// answer of more than 4 MiB, which ordinary gRPC clients (grpcurl) refuse to read. A page
// holds at most statsPageMax entries of each list and stops after statsPageBytes (but always
// lists one entry, whose size is bounded by max_patterns_per_subscription), so an answer
// stays near 1 MiB. The counters are always totals.
const (
	statsPageMax   = 1000
	statsPageBytes = 1 << 20
)

// A page token is "v1/<sub>/<group>": the last subscription and group ids listed so far
// ("" : none yet, "*": that list is complete). Ids never contain '/' or '*'.
const (
	tokenPrefix = "v1"
	tokenDone   = "*"
)

// statsPage selects and measures one page of a Stats answer.
type statsPage struct {
	limit                int
	afterSub, afterGroup string // from the request's token
	budget               int    // bytes left for entries
	n                    int    // entries of the current list on this page
	listed               int    // entries of both lists on this page
	last                 string // id of the last entry taken in the current list
	subState             string // the token's subscription part, once subsDone has run
}

func newStatsPage(req *pb.StatsRequest) (*statsPage, error) {
	p := &statsPage{limit: int(req.GetPageSize()), budget: statsPageBytes}
	if p.limit <= 0 || p.limit > statsPageMax {
		p.limit = statsPageMax
	}
	if tok := req.GetPageToken(); tok != "" {
		v, rest, ok1 := strings.Cut(tok, "/")
		sub, group, ok2 := strings.Cut(rest, "/")
		if !ok1 || !ok2 || v != tokenPrefix || strings.Contains(group, "/") {
			return nil, status.Errorf(codes.InvalidArgument, "page_token %q is not a next_page_token of this broker; leave it empty to list from the start", tok)
		}
		p.afterSub, p.afterGroup = sub, group
	}
	return p, nil
}

// subscriptions returns the subscriptions after the token's, sorted by id as all is.
func (p *statsPage) subscriptions(all []broker.SubscriptionStats) []broker.SubscriptionStats {
	if p.afterSub == tokenDone {
		return nil
	}
	return all[sort.Search(len(all), func(i int) bool { return all[i].ID > p.afterSub }):]
}

// groups returns the groups after the token's, sorted by id as all is.
func (p *statsPage) groups(all []broker.GroupStats) []broker.GroupStats {
	if p.afterGroup == tokenDone {
		return nil
	}
	return all[sort.Search(len(all), func(i int) bool { return all[i].ID > p.afterGroup }):]
}

// take reports whether entry e, of id, fits on the page, and counts it if so.
func (p *statsPage) take(id string, e proto.Message) bool {
	if p.n == p.limit {
		return false
	}
	size := proto.Size(e)
	if p.listed > 0 && size > p.budget {
		return false
	}
	p.budget -= size
	p.n++
	p.listed++
	p.last = id
	return true
}

// subsDone ends the subscription list of the page; all says whether it reached the end.
func (p *statsPage) subsDone(all bool) {
	p.subState = p.part(all, p.afterSub)
	p.n, p.last = 0, ""
}

// next returns the answer's next_page_token; allGroups says whether the group list reached
// the end. It is empty when both lists are complete.
func (p *statsPage) next(allGroups bool) string {
	g := p.part(allGroups, p.afterGroup)
	if p.subState == tokenDone && g == tokenDone {
		return ""
	}
	return tokenPrefix + "/" + p.subState + "/" + g
}

func (p *statsPage) part(all bool, after string) string {
	switch {
	case all:
		return tokenDone
	case p.last != "":
		return p.last
	}
	return after
}
