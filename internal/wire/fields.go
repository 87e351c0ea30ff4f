// Package wire is the hand-written part of tinybroker.v1's protobuf wire format, both sides
// of it: the server's PublishStream decoder and answer encoder (publish.go), the server's
// MessageBatch encoder and the codec that passes its frames to gRPC (batch.go, codec.go), the
// size bound the engine keeps frames under (size.go), and the clients' decoder of message
// frames (decode.go). Each is on a hot path where generated messages and reflection cost most
// of the CPU; the files say how much. Every field number they use is declared once, in
// fields.go, and TestFieldNumbers checks each against the generated descriptors: a change to
// the .proto touches the .proto, the generated code and this package.
package wire

// Field numbers of the tinybroker.v1 messages this package reads or writes.
const (
	fieldStreamRequestSequence   = 1 // PublishStreamRequest.sequence
	fieldStreamRequestMessages   = 2 // PublishStreamRequest.messages
	fieldStreamRequestErrorsOnly = 3 // PublishStreamRequest.errors_only

	fieldStreamResponseSequence = 1 // PublishStreamResponse.sequence
	fieldStreamResponseResults  = 2 // PublishStreamResponse.results

	fieldPublishTopic   = 1 // PublishRequest.topic
	fieldPublishPayload = 2 // PublishRequest.payload
	fieldPublishHeaders = 3 // PublishRequest.headers
	fieldPublishID      = 4 // PublishRequest.message_id
	fieldPublishKey     = 5 // PublishRequest.key
	fieldPublishTTL     = 6 // PublishRequest.ttl
	fieldPublishAfter   = 7 // PublishRequest.deliver_after
	fieldPublishAt      = 8 // PublishRequest.deliver_at
	fieldPublishPrio    = 9 // PublishRequest.priority

	fieldDurationSeconds  = 1 // google.protobuf.Duration.seconds
	fieldDurationNanos    = 2 // google.protobuf.Duration.nanos
	fieldTimestampSeconds = 1 // google.protobuf.Timestamp.seconds
	fieldTimestampNanos   = 2 // google.protobuf.Timestamp.nanos

	fieldResultSystemID = 1 // PublishResult.system_id
	fieldResultRouted   = 2 // PublishResult.routed
	fieldResultCode     = 3 // PublishResult.code
	fieldResultError    = 4 // PublishResult.error
	fieldResultDup      = 5 // PublishResult.duplicate

	fieldResponseSubscribed = 1 // SubscribeResponse.subscribed
	fieldResponseMessages   = 2 // SubscribeResponse.messages
	fieldResponseRefused    = 3 // SubscribeResponse.refused
	fieldResponseEnded      = 4 // SubscribeResponse.ended

	fieldBatchMessages = 1 // MessageBatch.messages

	fieldMessageSystemID       = 1  // Message.system_id
	fieldMessageTopic          = 2  // Message.topic
	fieldMessagePayload        = 3  // Message.payload
	fieldMessageHeaders        = 4  // Message.headers
	fieldMessagePublishTime    = 5  // Message.publish_time_unix_nano
	fieldMessageAttempt        = 6  // Message.attempt
	fieldMessageRedelivered    = 7  // Message.redelivered
	fieldMessageSubscriptionID = 8  // Message.subscription_id
	fieldMessageKey            = 9  // Message.key
	fieldMessagePriority       = 10 // Message.priority

	fieldMapKey   = 1 // key of a map<string, string> entry (PublishRequest.headers, Message.headers)
	fieldMapValue = 2 // value of a map entry
)
