// Package nodes turns the address of a broker, or the comma list of a cluster's nodes (as
// NATS clients take them), into a gRPC target: the Go client's and the CLI's.
package nodes

import (
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Target turns an address ("host:port", or several separated by commas) into a gRPC target:
// one address as it is; a comma list into a resolver of the connection's own that gives the
// nodes in order, for gRPC's pick_first policy (the first node that answers; the next one
// when its connection breaks). Each node's TLS name is its host.
func Target(addr string) (string, grpc.DialOption, error) {
	if !strings.Contains(addr, ",") {
		return addr, nil, nil
	}
	var state resolver.State
	for a := range strings.SplitSeq(addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return "", nil, fmt.Errorf("dial %q: node %q: %v (want host:port, commas between nodes)", addr, a, err)
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	if len(state.Addresses) == 0 {
		return "", nil, fmt.Errorf("dial %q: no address (want host:port, commas between nodes)", addr)
	}
	r := manual.NewBuilderWithScheme("tinybroker-nodes")
	r.InitialState(state)
	return r.Scheme() + ":///nodes", grpc.WithResolvers(r), nil
}
