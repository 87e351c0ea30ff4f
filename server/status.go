package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
)

// codes of the errors every engine returns (broker/errors.go), and of the context's.
var errorCodes = []struct {
	code codes.Code
	errs []error
}{
	{codes.InvalidArgument, []error{broker.ErrInvalidTopic, broker.ErrInvalidPattern, broker.ErrInvalidSubscription, broker.ErrInvalidMessage}},
	{codes.ResourceExhausted, []error{broker.ErrGroupFull, broker.ErrSlowConsumer, broker.ErrLimit}},
	{codes.Unavailable, []error{broker.ErrShuttingDown, broker.ErrHookFailed, broker.ErrUnavailable}},
	{codes.Unimplemented, []error{errors.ErrUnsupported}},
	{codes.NotFound, []error{broker.ErrUnknownSubscription, broker.ErrUnknownMessage, broker.ErrGroupDeleted}},
	{codes.AlreadyExists, []error{broker.ErrSubscriptionExists}},
	{codes.FailedPrecondition, []error{broker.ErrGroupMismatch}},
	{codes.Canceled, []error{broker.ErrSubscriptionClosed, context.Canceled}},
	{codes.DeadlineExceeded, []error{context.DeadlineExceeded}},
}

// codeOf maps each broker error to its one gRPC status code.
func codeOf(err error) codes.Code {
	var reject *broker.RejectError
	var withStatus interface{ GRPCStatus() *status.Status }
	if errors.As(err, &withStatus) { // the edge's refusals (server/auth)
		return withStatus.GRPCStatus().Code()
	}
	if errors.As(err, &reject) {
		if reject.Code > 0 && reject.Code <= 16 {
			return codes.Code(reject.Code)
		}
		return codes.InvalidArgument
	}
	for _, c := range errorCodes {
		for _, e := range c.errs {
			if errors.Is(err, e) {
				return c.code
			}
		}
	}
	return codes.Internal
}

// toStatus turns a broker error into a gRPC status error; nil stays nil.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}
