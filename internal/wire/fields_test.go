package wire

import (
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// The tests that run a broker (batch_test.go) check that it leaves no goroutine behind, as
// they did in server/.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seed adds m, marshalled, to a fuzz target's seed corpus.
func seed(f *testing.F, m proto.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// Every field number of fields.go is the generated code's: a field renumbered in the .proto
// and not here fails this test.
func TestFieldNumbers(t *testing.T) {
	field := func(m proto.Message, name protoreflect.Name) protoreflect.FieldDescriptor {
		t.Helper()
		fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
		if fd == nil {
			t.Fatalf("%s has no field %s", m.ProtoReflect().Descriptor().FullName(), name)
		}
		return fd
	}
	number := func(m proto.Message, name protoreflect.Name) protowire.Number { return field(m, name).Number() }
	for _, c := range []struct {
		name      string
		got, want protowire.Number
	}{
		{"fieldStreamRequestSequence", fieldStreamRequestSequence, number(&pb.PublishStreamRequest{}, "sequence")},
		{"fieldStreamRequestMessages", fieldStreamRequestMessages, number(&pb.PublishStreamRequest{}, "messages")},
		{"fieldStreamRequestErrorsOnly", fieldStreamRequestErrorsOnly, number(&pb.PublishStreamRequest{}, "errors_only")},
		{"fieldStreamResponseSequence", fieldStreamResponseSequence, number(&pb.PublishStreamResponse{}, "sequence")},
		{"fieldStreamResponseResults", fieldStreamResponseResults, number(&pb.PublishStreamResponse{}, "results")},
		{"fieldPublishTopic", fieldPublishTopic, number(&pb.PublishRequest{}, "topic")},
		{"fieldPublishPayload", fieldPublishPayload, number(&pb.PublishRequest{}, "payload")},
		{"fieldPublishHeaders", fieldPublishHeaders, number(&pb.PublishRequest{}, "headers")},
		{"fieldPublishID", fieldPublishID, number(&pb.PublishRequest{}, "message_id")},
		{"fieldPublishKey", fieldPublishKey, number(&pb.PublishRequest{}, "key")},
		{"fieldPublishTTL", fieldPublishTTL, number(&pb.PublishRequest{}, "ttl")},
		{"fieldPublishAfter", fieldPublishAfter, number(&pb.PublishRequest{}, "deliver_after")},
		{"fieldPublishAt", fieldPublishAt, number(&pb.PublishRequest{}, "deliver_at")},
		{"fieldPublishPrio", fieldPublishPrio, number(&pb.PublishRequest{}, "priority")},
		{"fieldTimestampSeconds", fieldTimestampSeconds, number(&timestamppb.Timestamp{}, "seconds")},
		{"fieldTimestampNanos", fieldTimestampNanos, number(&timestamppb.Timestamp{}, "nanos")},
		{"fieldDurationSeconds", fieldDurationSeconds, number(&durationpb.Duration{}, "seconds")},
		{"fieldDurationNanos", fieldDurationNanos, number(&durationpb.Duration{}, "nanos")},
		{"fieldResultSystemID", fieldResultSystemID, number(&pb.PublishResult{}, "system_id")},
		{"fieldResultRouted", fieldResultRouted, number(&pb.PublishResult{}, "routed")},
		{"fieldResultCode", fieldResultCode, number(&pb.PublishResult{}, "code")},
		{"fieldResultError", fieldResultError, number(&pb.PublishResult{}, "error")},
		{"fieldResultDup", fieldResultDup, number(&pb.PublishResult{}, "duplicate")},
		{"fieldResponseSubscribed", fieldResponseSubscribed, number(&pb.SubscribeResponse{}, "subscribed")},
		{"fieldResponseMessages", fieldResponseMessages, number(&pb.SubscribeResponse{}, "messages")},
		{"fieldResponseRefused", fieldResponseRefused, number(&pb.SubscribeResponse{}, "refused")},
		{"fieldResponseEnded", fieldResponseEnded, number(&pb.SubscribeResponse{}, "ended")},
		{"fieldBatchMessages", fieldBatchMessages, number(&pb.MessageBatch{}, "messages")},
		{"fieldMessageSystemID", fieldMessageSystemID, number(&pb.Message{}, "system_id")},
		{"fieldMessageTopic", fieldMessageTopic, number(&pb.Message{}, "topic")},
		{"fieldMessagePayload", fieldMessagePayload, number(&pb.Message{}, "payload")},
		{"fieldMessageHeaders", fieldMessageHeaders, number(&pb.Message{}, "headers")},
		{"fieldMessagePublishTime", fieldMessagePublishTime, number(&pb.Message{}, "publish_time_unix_nano")},
		{"fieldMessageAttempt", fieldMessageAttempt, number(&pb.Message{}, "attempt")},
		{"fieldMessageRedelivered", fieldMessageRedelivered, number(&pb.Message{}, "redelivered")},
		{"fieldMessageSubscriptionID", fieldMessageSubscriptionID, number(&pb.Message{}, "subscription_id")},
		{"fieldMessageKey", fieldMessageKey, number(&pb.Message{}, "key")},
		{"fieldMessagePriority", fieldMessagePriority, number(&pb.Message{}, "priority")},
		{"fieldMapKey (PublishRequest.headers)", fieldMapKey, field(&pb.PublishRequest{}, "headers").MapKey().Number()},
		{"fieldMapValue (PublishRequest.headers)", fieldMapValue, field(&pb.PublishRequest{}, "headers").MapValue().Number()},
		{"fieldMapKey (Message.headers)", fieldMapKey, field(&pb.Message{}, "headers").MapKey().Number()},
		{"fieldMapValue (Message.headers)", fieldMapValue, field(&pb.Message{}, "headers").MapValue().Number()},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, the generated code has %d", c.name, c.got, c.want)
		}
	}
	// Decoder.message takes Message's bytes fields as the numbers from system_id to headers,
	// and subscription_id.
	for _, num := range []protowire.Number{fieldMessageTopic, fieldMessagePayload} {
		if num < fieldMessageSystemID || num > fieldMessageHeaders {
			t.Errorf("Message field %d is outside system_id..headers: Decoder.message does not read it", num)
		}
	}
}
