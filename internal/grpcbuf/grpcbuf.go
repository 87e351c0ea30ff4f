// Package grpcbuf holds the gRPC buffer pool the server and the clients share.
package grpcbuf

import "google.golang.org/grpc/mem"

// Pool has finer tiers than grpc's default, which jumps from 32 KiB buffers to 1 MiB ones and
// zeroes a whole 1 MiB buffer for every frame in between; batches of messages are mostly that
// size (13% of a fanout run's server CPU, BENCHMARKS.md).
var Pool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(8, 12, 14, 15, 16, 17, 18, 19, 20, 22, 24)
	if err != nil {
		panic(err)
	}
	return p
}()
