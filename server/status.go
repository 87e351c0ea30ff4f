package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
)

// codeOf maps each broker error to its one gRPC status code.
func codeOf(err error) codes.Code {
	var reject *broker.RejectError
	switch {
	case errors.As(err, &reject):
		if reject.Code > 0 && reject.Code <= 16 {
			return codes.Code(reject.Code)
		}
		return codes.InvalidArgument
	case errors.Is(err, broker.ErrInvalidTopic), errors.Is(err, broker.ErrInvalidPattern),
		errors.Is(err, broker.ErrInvalidSubscription), errors.Is(err, broker.ErrInvalidMessage):
		return codes.InvalidArgument
	case errors.Is(err, broker.ErrGroupFull), errors.Is(err, broker.ErrSlowConsumer), errors.Is(err, broker.ErrLimit):
		return codes.ResourceExhausted
	case errors.Is(err, broker.ErrShuttingDown), errors.Is(err, broker.ErrHookFailed):
		return codes.Unavailable
	case errors.Is(err, broker.ErrUnknownSubscription), errors.Is(err, broker.ErrUnknownMessage), errors.Is(err, broker.ErrGroupDeleted):
		return codes.NotFound
	case errors.Is(err, broker.ErrSubscriptionExists):
		return codes.AlreadyExists
	case errors.Is(err, broker.ErrGroupMismatch), errors.Is(err, broker.ErrGroupInUse):
		return codes.FailedPrecondition
	case errors.Is(err, broker.ErrSubscriptionClosed), errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
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
