package plugin

import (
	"strconv"
	"time"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// A Verdict is what an on_publish hook decides about its message: Pass, Drop or Reject. The
// zero Verdict is Pass.
type Verdict struct {
	action uint32
	arg    uint32
	reason string
}

// Pass lets the message continue, with the changes the hook made to it, to the next plugin
// and then to routing.
func Pass() Verdict { return Verdict{} }

// Drop drops the message silently: the broker counts it, logs reason, and tells the
// publisher it was accepted and routed to no one.
func Drop(reason string) Verdict { return Verdict{action: abi.ActDrop, reason: reason} }

// Reject refuses the publish: the publisher gets the gRPC status code with reason as its
// message. Code 0 stands for InvalidArgument; a code over 16 panics.
func Reject(code Code, reason string) Verdict {
	if code > Unauthenticated {
		panic("plugin.Reject: gRPC code " + strconv.Itoa(int(code)) + " is not between 1 and 16")
	}
	return Verdict{action: abi.ActReject, arg: uint32(code), reason: reason}
}

func (v Verdict) encode() int64 { return encode(v.action, v.arg, v.reason) }

// A RedeliverVerdict is what an on_redeliver hook decides about a message whose delivery
// failed: Redeliver, Delay, DeadLetter or DropMessage. The zero RedeliverVerdict is
// Redeliver.
type RedeliverVerdict struct {
	action uint32
	arg    uint32
	reason string
}

// Redeliver leaves the message to the broker's default: redeliver it (after the nack's delay,
// if it had one), or dead-letter it once the group's max_deliveries attempts are used up.
func Redeliver() RedeliverVerdict { return RedeliverVerdict{} }

// maxDelayMillis is the longest delay the ABI can carry, 2^31-1 ms (about 24.8 days).
const maxDelayMillis = 1<<31 - 1

// Delay redelivers the message after d, rounded up to a whole millisecond and kept between
// 1ms and 2^31-1 ms (about 24.8 days).
func Delay(d time.Duration) RedeliverVerdict {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	ms = min(max(ms, 1), maxDelayMillis)
	return RedeliverVerdict{action: abi.ActDelay, arg: uint32(ms)}
}

// DeadLetter sends the message to its consumer group's dead-letter topic now, with reason.
func DeadLetter(reason string) RedeliverVerdict {
	return RedeliverVerdict{action: abi.ActDeadLetter, reason: reason}
}

// DropMessage forgets the message: the broker counts it and logs reason.
func DropMessage(reason string) RedeliverVerdict {
	return RedeliverVerdict{action: abi.ActForget, reason: reason}
}

func (v RedeliverVerdict) encode() int64 { return encode(v.action, v.arg, v.reason) }

// encode gives the broker the reason, if any, and returns the verdict as the ABI's i64:
// action | arg<<32.
func encode(action, arg uint32, reason string) int64 {
	if reason != "" {
		setReason(reason)
	}
	return int64(uint64(action) | uint64(arg)<<32)
}

// A Code is a gRPC status code, for Reject. Its values are those of
// google.golang.org/grpc/codes, so plugin.Code(codes.PermissionDenied) works too.
type Code uint32

// The gRPC status codes a publish can be rejected with.
const (
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)
