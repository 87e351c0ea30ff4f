from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DELIVERY_MODE_BALANCED: DeliveryMode
DELIVERY_MODE_FANOUT: DeliveryMode
DELIVERY_MODE_UNSPECIFIED: DeliveryMode
DESCRIPTOR: _descriptor.FileDescriptor
ORDERING_GROUP: Ordering
ORDERING_KEY: Ordering
ORDERING_UNSPECIFIED: Ordering

class Ack(_message.Message):
    __slots__ = ["subscription_id", "system_id"]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_ID_FIELD_NUMBER: _ClassVar[int]
    subscription_id: str
    system_id: str
    def __init__(self, subscription_id: _Optional[str] = ..., system_id: _Optional[str] = ...) -> None: ...

class AckBatch(_message.Message):
    __slots__ = ["subscription_id", "system_ids"]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_IDS_FIELD_NUMBER: _ClassVar[int]
    subscription_id: str
    system_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, system_ids: _Optional[_Iterable[str]] = ..., subscription_id: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CloseSubscription(_message.Message):
    __slots__ = ["subscription_id"]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    subscription_id: str
    def __init__(self, subscription_id: _Optional[str] = ...) -> None: ...

class GroupStats(_message.Message):
    __slots__ = ["acked", "bytes", "consumer_group", "dead_lettered", "declared", "delayed", "delivered", "dropped", "in_flight", "members", "queued", "redelivered", "rejected", "subscription_id", "topic_patterns"]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    DECLARED_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    REDELIVERED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_PATTERNS_FIELD_NUMBER: _ClassVar[int]
    acked: int
    bytes: int
    consumer_group: str
    dead_lettered: int
    declared: bool
    delayed: int
    delivered: int
    dropped: int
    in_flight: int
    members: int
    queued: int
    redelivered: int
    rejected: int
    subscription_id: str
    topic_patterns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscription_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., topic_patterns: _Optional[_Iterable[str]] = ..., members: _Optional[int] = ..., queued: _Optional[int] = ..., in_flight: _Optional[int] = ..., delayed: _Optional[int] = ..., delivered: _Optional[int] = ..., acked: _Optional[int] = ..., redelivered: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., dropped: _Optional[int] = ..., bytes: _Optional[int] = ..., rejected: _Optional[int] = ..., declared: bool = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ["attempt", "headers", "key", "payload", "priority", "publish_time_unix_nano", "redelivered", "subscription_id", "system_id", "topic"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    REDELIVERED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    headers: _containers.ScalarMap[str, str]
    key: str
    payload: bytes
    priority: int
    publish_time_unix_nano: int
    redelivered: bool
    subscription_id: str
    system_id: str
    topic: str
    def __init__(self, system_id: _Optional[str] = ..., topic: _Optional[str] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., publish_time_unix_nano: _Optional[int] = ..., attempt: _Optional[int] = ..., redelivered: bool = ..., subscription_id: _Optional[str] = ..., key: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class MessageBatch(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class Nack(_message.Message):
    __slots__ = ["delay", "reason", "subscription_id", "system_id"]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_ID_FIELD_NUMBER: _ClassVar[int]
    delay: _duration_pb2.Duration
    reason: str
    subscription_id: str
    system_id: str
    def __init__(self, subscription_id: _Optional[str] = ..., system_id: _Optional[str] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class NackBatch(_message.Message):
    __slots__ = ["delay", "reason", "subscription_id", "system_ids"]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_IDS_FIELD_NUMBER: _ClassVar[int]
    delay: _duration_pb2.Duration
    reason: str
    subscription_id: str
    system_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, system_ids: _Optional[_Iterable[str]] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ..., subscription_id: _Optional[str] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class OpenSubscription(_message.Message):
    __slots__ = ["ack_deadline", "consumer_group", "dead_letter_topic", "fair_by", "max_deliveries", "max_in_flight", "max_priority", "mode", "ordering", "priority", "subscription_id", "topic_patterns"]
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    FAIR_BY_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_PATTERNS_FIELD_NUMBER: _ClassVar[int]
    ack_deadline: _duration_pb2.Duration
    consumer_group: str
    dead_letter_topic: str
    fair_by: str
    max_deliveries: int
    max_in_flight: int
    max_priority: int
    mode: DeliveryMode
    ordering: Ordering
    priority: int
    subscription_id: str
    topic_patterns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscription_id: _Optional[str] = ..., topic_patterns: _Optional[_Iterable[str]] = ..., mode: _Optional[_Union[DeliveryMode, str]] = ..., consumer_group: _Optional[str] = ..., max_in_flight: _Optional[int] = ..., ack_deadline: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_deliveries: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., ordering: _Optional[_Union[Ordering, str]] = ..., fair_by: _Optional[str] = ..., max_priority: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class PluginStats(_message.Message):
    __slots__ = ["breaker_open", "calls", "failures", "name", "skipped"]
    BREAKER_OPEN_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    breaker_open: bool
    calls: int
    failures: int
    name: str
    skipped: int
    def __init__(self, name: _Optional[str] = ..., calls: _Optional[int] = ..., failures: _Optional[int] = ..., skipped: _Optional[int] = ..., breaker_open: bool = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ["deliver_after", "deliver_at", "headers", "key", "message_id", "payload", "priority", "topic", "ttl"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DELIVER_AFTER_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    deliver_after: _duration_pb2.Duration
    deliver_at: _timestamp_pb2.Timestamp
    headers: _containers.ScalarMap[str, str]
    key: str
    message_id: str
    payload: bytes
    priority: int
    topic: str
    ttl: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., message_id: _Optional[str] = ..., key: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., deliver_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[int] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ["drop_reason", "dropped_by", "duplicate", "routed", "system_id"]
    DROPPED_BY_FIELD_NUMBER: _ClassVar[int]
    DROP_REASON_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ROUTED_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_ID_FIELD_NUMBER: _ClassVar[int]
    drop_reason: str
    dropped_by: str
    duplicate: bool
    routed: int
    system_id: str
    def __init__(self, system_id: _Optional[str] = ..., routed: _Optional[int] = ..., dropped_by: _Optional[str] = ..., drop_reason: _Optional[str] = ..., duplicate: bool = ...) -> None: ...

class PublishResult(_message.Message):
    __slots__ = ["code", "duplicate", "error", "routed", "system_id"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ROUTED_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    duplicate: bool
    error: str
    routed: int
    system_id: str
    def __init__(self, system_id: _Optional[str] = ..., routed: _Optional[int] = ..., code: _Optional[int] = ..., error: _Optional[str] = ..., duplicate: bool = ...) -> None: ...

class PublishStreamRequest(_message.Message):
    __slots__ = ["errors_only", "messages", "sequence"]
    ERRORS_ONLY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    errors_only: bool
    messages: _containers.RepeatedCompositeFieldContainer[PublishRequest]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[PublishRequest, _Mapping]]] = ..., errors_only: bool = ...) -> None: ...

class PublishStreamResponse(_message.Message):
    __slots__ = ["results", "sequence"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PublishResult]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ..., results: _Optional[_Iterable[_Union[PublishResult, _Mapping]]] = ...) -> None: ...

class Refused(_message.Message):
    __slots__ = ["code", "error", "subscription_id"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    error: str
    subscription_id: str
    def __init__(self, subscription_id: _Optional[str] = ..., code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class ReloadRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ["plugins"]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    plugins: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, plugins: _Optional[_Iterable[str]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ["page_size", "page_token"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ["acked", "dead_lettered", "delivered", "dropped", "groups", "groups_total", "memory_budget_bytes", "memory_used_bytes", "next_page_token", "plugins", "published", "redelivered", "refused", "subscriptions", "subscriptions_total", "unrouted"]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    REDELIVERED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    UNROUTED_FIELD_NUMBER: _ClassVar[int]
    acked: int
    dead_lettered: int
    delivered: int
    dropped: int
    groups: _containers.RepeatedCompositeFieldContainer[GroupStats]
    groups_total: int
    memory_budget_bytes: int
    memory_used_bytes: int
    next_page_token: str
    plugins: _containers.RepeatedCompositeFieldContainer[PluginStats]
    published: int
    redelivered: int
    refused: int
    subscriptions: _containers.RepeatedCompositeFieldContainer[SubscriptionStats]
    subscriptions_total: int
    unrouted: int
    def __init__(self, published: _Optional[int] = ..., delivered: _Optional[int] = ..., acked: _Optional[int] = ..., redelivered: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., unrouted: _Optional[int] = ..., subscriptions: _Optional[_Iterable[_Union[SubscriptionStats, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[GroupStats, _Mapping]]] = ..., dropped: _Optional[int] = ..., plugins: _Optional[_Iterable[_Union[PluginStats, _Mapping]]] = ..., subscriptions_total: _Optional[int] = ..., groups_total: _Optional[int] = ..., next_page_token: _Optional[str] = ..., memory_used_bytes: _Optional[int] = ..., memory_budget_bytes: _Optional[int] = ..., refused: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ["ack", "close", "nack", "open", "touch"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    NACK_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    TOUCH_FIELD_NUMBER: _ClassVar[int]
    ack: AckBatch
    close: CloseSubscription
    nack: NackBatch
    open: OpenSubscription
    touch: TouchBatch
    def __init__(self, open: _Optional[_Union[OpenSubscription, _Mapping]] = ..., ack: _Optional[_Union[AckBatch, _Mapping]] = ..., nack: _Optional[_Union[NackBatch, _Mapping]] = ..., touch: _Optional[_Union[TouchBatch, _Mapping]] = ..., close: _Optional[_Union[CloseSubscription, _Mapping]] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ["ended", "messages", "refused", "subscribed"]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    ended: SubscriptionEnded
    messages: MessageBatch
    refused: Refused
    subscribed: Subscribed
    def __init__(self, subscribed: _Optional[_Union[Subscribed, _Mapping]] = ..., messages: _Optional[_Union[MessageBatch, _Mapping]] = ..., refused: _Optional[_Union[Refused, _Mapping]] = ..., ended: _Optional[_Union[SubscriptionEnded, _Mapping]] = ...) -> None: ...

class Subscribed(_message.Message):
    __slots__ = ["ack_deadline", "dead_letter_topic", "fair_by", "max_deliveries", "max_in_flight", "max_priority", "member_id", "ordering", "priority", "subscription_id"]
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    FAIR_BY_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    ack_deadline: _duration_pb2.Duration
    dead_letter_topic: str
    fair_by: str
    max_deliveries: int
    max_in_flight: int
    max_priority: int
    member_id: str
    ordering: Ordering
    priority: int
    subscription_id: str
    def __init__(self, subscription_id: _Optional[str] = ..., member_id: _Optional[str] = ..., max_in_flight: _Optional[int] = ..., ack_deadline: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_deliveries: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., ordering: _Optional[_Union[Ordering, str]] = ..., fair_by: _Optional[str] = ..., max_priority: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class SubscriptionEnded(_message.Message):
    __slots__ = ["code", "error", "subscription_id"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    error: str
    subscription_id: str
    def __init__(self, subscription_id: _Optional[str] = ..., code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class SubscriptionStats(_message.Message):
    __slots__ = ["buffered", "delivered", "dropped", "subscription_id", "topic_patterns"]
    BUFFERED_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_PATTERNS_FIELD_NUMBER: _ClassVar[int]
    buffered: int
    delivered: int
    dropped: int
    subscription_id: str
    topic_patterns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscription_id: _Optional[str] = ..., topic_patterns: _Optional[_Iterable[str]] = ..., delivered: _Optional[int] = ..., dropped: _Optional[int] = ..., buffered: _Optional[int] = ...) -> None: ...

class TouchBatch(_message.Message):
    __slots__ = ["subscription_id", "system_ids"]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_IDS_FIELD_NUMBER: _ClassVar[int]
    subscription_id: str
    system_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, system_ids: _Optional[_Iterable[str]] = ..., subscription_id: _Optional[str] = ...) -> None: ...

class DeliveryMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Ordering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
