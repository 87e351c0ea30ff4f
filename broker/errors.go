package broker

import "errors"

// Errors returned by every engine. Each is wrapped with %w and a message that says what was
// wrong and how to fix it; compare with errors.Is. The gRPC server maps each to one status code
// (see server/status.go). An engine that does not implement a call returns
// errors.ErrUnsupported (UNIMPLEMENTED).
var (
	// ErrInvalidTopic: a topic to publish to is empty, too long, has an empty token,
	// whitespace or a wildcard. (INVALID_ARGUMENT)
	ErrInvalidTopic = errors.New("invalid topic")
	// ErrInvalidPattern: a subscription pattern is malformed. (INVALID_ARGUMENT)
	ErrInvalidPattern = errors.New("invalid topic pattern")
	// ErrInvalidSubscription: an OpenSubscription is incomplete or inconsistent, e.g. balanced
	// without a consumer group. (INVALID_ARGUMENT)
	ErrInvalidSubscription = errors.New("invalid subscription")
	// ErrInvalidMessage: a payload or headers exceed the limits. (INVALID_ARGUMENT)
	ErrInvalidMessage = errors.New("invalid message")
	// ErrGroupFull: a consumer group's queue is at its bound and its overflow policy is
	// "reject". (RESOURCE_EXHAUSTED)
	ErrGroupFull = errors.New("consumer group queue full")
	// ErrSlowConsumer: a fanout subscriber fell too far behind and was disconnected.
	// (RESOURCE_EXHAUSTED)
	ErrSlowConsumer = errors.New("slow consumer")
	// ErrShuttingDown: the broker no longer accepts work. (UNAVAILABLE)
	ErrShuttingDown = errors.New("broker shutting down")
	// ErrUnknownSubscription: no open subscription or consumer group has this id. (NOT_FOUND)
	ErrUnknownSubscription = errors.New("unknown subscription")
	// ErrUnknownMessage: the system_id is not held by the subscription: never delivered,
	// already acked, dead-lettered, or from an earlier broker process. (NOT_FOUND)
	ErrUnknownMessage = errors.New("unknown message")
	// ErrSubscriptionExists: a fanout subscription with this id is already open.
	// (ALREADY_EXISTS)
	ErrSubscriptionExists = errors.New("subscription already exists")
	// ErrGroupMismatch: a member's settings differ from its consumer group's, or the id is
	// in use by a subscription of the other mode. (FAILED_PRECONDITION)
	ErrGroupMismatch = errors.New("subscription does not match its consumer group")
	// ErrHookFailed: a plugin failed on this message and its failure policy is fail_closed.
	// (UNAVAILABLE: a retry may succeed once the plugin recovers)
	ErrHookFailed = errors.New("plugin failed")
	// ErrLimit: a request would take the broker past one of its limits on what one client
	// can make it hold: subscriptions per stream, consumer groups. (RESOURCE_EXHAUSTED)
	ErrLimit = errors.New("limit reached")
	// ErrSubscriptionClosed: the subscription was closed by its owner.
	ErrSubscriptionClosed = errors.New("subscription closed")
	// ErrGroupDeleted ends the subscriptions of a consumer group's members when the group is
	// deleted (Engine.DeleteGroup). (NOT_FOUND: the group is gone; re-subscribing creates a
	// new, empty one)
	ErrGroupDeleted = errors.New("consumer group deleted")
	// ErrUnavailable: the engine cannot reach what it stores messages in (the JetStream
	// engine's NATS server); a retry may succeed. (UNAVAILABLE)
	ErrUnavailable = errors.New("engine unavailable")
)
