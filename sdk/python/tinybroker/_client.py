"""The connection to the broker, and publishing."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar, Union, cast

import grpc
from tinybroker._common import BrokerError, ClosedError, publish_request
from tinybroker._publisher import Publisher
from tinybroker._subscription import Handler, Subscription
from tinybroker.v1 import broker_pb2, broker_pb2_grpc

_T = TypeVar("_T")

# How many times publish sends a message whose confirmation was lost (as the Go client).
_PUBLISH_ATTEMPTS = 4


@dataclasses.dataclass(frozen=True)
class PublishResult:
    """What became of a published message."""

    system_id: str
    """Identifies the message in this broker process."""
    routed: int
    """How many fanout subscriptions and groups it went to; 0: none matched, a plugin dropped it
    (``dropped_by``, ``drop_reason``), or it is delayed."""
    dropped_by: str = ""
    drop_reason: str = ""
    duplicate: bool = False
    """The broker had the message already (its message id, within the dedupe window): nothing
    was published again; the rest is the first publish's result."""


class Client:
    """A connection to a broker, or to the nodes of a cluster. Safe to use from many threads.

    ``addrs`` is ``"host:port"``, a comma-separated list of them, or a sequence: the client
    uses the first, and moves to the next when a call finds the current one UNAVAILABLE.
    ``token`` (``"USER:TOKEN"``) is sent with every call as ``authorization: Bearer …``; use
    it with TLS unless the broker is on this machine. ``tls`` is ``True`` (the system's
    roots), ``grpc.ssl_channel_credentials(...)`` for a private CA or a client certificate,
    or ``None`` for plaintext; ``server_name`` overrides the name checked in the broker's
    certificate. A failed publish and a broken subscription wait ``backoff`` seconds
    (min, max; doubling) before they try again.
    """

    def __init__(
        self,
        addrs: Union[str, Sequence[str]],
        token: Optional[str] = None,
        tls: Union[bool, grpc.ChannelCredentials, None] = None,
        server_name: Optional[str] = None,
        backoff: tuple[float, float] = (0.05, 5.0),
    ) -> None:
        if isinstance(addrs, str):
            addrs = addrs.split(",")
        self._addrs = [a.strip() for a in addrs if a.strip()]
        if not self._addrs:
            raise ValueError("tinybroker: Client needs at least one address (host:port)")
        if not 0 < backoff[0] <= backoff[1]:
            raise ValueError(f"tinybroker: backoff {backoff}: need 0 < min <= max")
        self._backoff = backoff
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self._creds: Optional[grpc.ChannelCredentials] = None
        if tls is True:
            self._creds = grpc.ssl_channel_credentials()
        elif isinstance(tls, grpc.ChannelCredentials):
            self._creds = tls
        # gRPC's own reconnection backoff starts at 1s and grows to 120s: capped here, a broker
        # back after a restart is found as soon as the publish retries and re-opens look for it.
        self._options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.initial_reconnect_backoff_ms", int(backoff[0] * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(backoff[0] * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(backoff[1] * 1000)),
        ]
        if server_name:
            self._options.append(("grpc.ssl_target_name_override", server_name))
        self._lock = threading.Lock()
        self._current = 0
        self._channels: dict[int, grpc.Channel] = {}
        self._closers: set[Callable[[], None]] = set()
        self._closed = False

    def _stub(self) -> tuple[int, broker_pb2_grpc.BrokerStub]:
        """The current node's index and a stub on its channel (opened on first use)."""
        with self._lock:
            if self._closed:
                raise ClosedError("tinybroker: client closed")
            i = self._current
            ch = self._channels.get(i)
            if ch is None:
                addr = self._addrs[i]
                if self._creds is not None:
                    ch = grpc.secure_channel(addr, self._creds, self._options)
                else:
                    ch = grpc.insecure_channel(addr, self._options)
                self._channels[i] = ch
            return i, broker_pb2_grpc.BrokerStub(ch)  # type: ignore[no-untyped-call]  # generated, untyped

    def _unavailable(self, i: int) -> None:
        """Node i did not answer: the next call goes to the next node, unless another caller
        moved on already."""
        with self._lock:
            if self._current == i:
                self._current = (i + 1) % len(self._addrs)

    def _call(self, what: str, fn: Callable[[broker_pb2_grpc.BrokerStub], _T], attempts: int = 1) -> _T:
        """Runs fn on the current node, trying again (next node, back-off) on UNAVAILABLE."""
        wait = self._backoff[0]
        for attempt in range(1, attempts + 1):
            i, stub = self._stub()
            try:
                return fn(stub)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise self._error(what, e) from None
                self._unavailable(i)
                if attempt == attempts:
                    raise self._error(what, e) from None
            time.sleep(wait)
            wait = min(2 * wait, self._backoff[1])
        raise AssertionError("unreachable")

    def _error(self, what: str, e: grpc.RpcError) -> BrokerError:
        """e as a BrokerError saying what was being done, with a hint at the usual cause of
        UNAVAILABLE: no broker there, or TLS settings that do not match the broker's."""
        code, details = e.code(), e.details() or ""
        msg = f"tinybroker: {what}: {code.name}: {details}"
        if code == grpc.StatusCode.UNAVAILABLE and "handshake" in details:
            msg += (" (the TLS handshake failed: check tls= against the broker's tls block: plaintext against a TLS "
                    "broker, a root certificate that is not its CA's, or server_name)")
        elif code == grpc.StatusCode.UNAVAILABLE and "shutting down" not in details:
            msg += f" (is a broker running at {','.join(self._addrs)}? `tinybroker serve` starts one)"
        return BrokerError(msg, code)

    def publish(
        self,
        topic: str,
        payload: bytes,
        headers: Optional[Mapping[str, str]] = None,
        key: Optional[str] = None,
        message_id: Optional[str] = None,
        ttl: Optional[float] = None,
        priority: Optional[int] = None,
        timeout: Optional[float] = 30.0,
    ) -> PublishResult:
        """Publishes one message and waits for the broker to accept it.

        The message carries ``message_id``, a random one by default: a publish that fails with
        UNAVAILABLE (the broker restarting, the answer lost) is sent again with the same id, up
        to 4 times in all, and the broker publishes it once (``PublishResult.duplicate`` says a
        retry found it published). ``key`` is the ordering and fairness key, ``ttl`` seconds
        until it expires, ``priority`` 0 to 9. Raises BrokerError.
        """
        req = publish_request(topic, payload, headers, key, message_id, ttl, priority)
        def call(stub: broker_pb2_grpc.BrokerStub) -> broker_pb2.PublishResponse:
            return cast(broker_pb2.PublishResponse, stub.Publish(req, timeout=timeout, metadata=self._metadata))

        resp = self._call(f"publish to {topic!r}", call, _PUBLISH_ATTEMPTS)
        return PublishResult(resp.system_id, resp.routed, resp.dropped_by, resp.drop_reason, resp.duplicate)

    def publisher(self, max_in_flight: int = 1024, max_batch: int = 256) -> Publisher:
        """A pipelined Publisher on this client: many messages in flight, each confirmed by a
        Future (see Publisher)."""
        return Publisher(self, max_in_flight=max_in_flight, max_batch=max_batch)

    def subscribe(
        self,
        patterns: Union[str, Sequence[str]],
        handler: Handler,
        group: Optional[str] = None,
        id: Optional[str] = None,
        max_in_flight: Optional[int] = None,
        concurrency: int = 1,
        ack_deadline: Optional[float] = None,
        nack_delay: float = 0.0,
        max_deliveries: int = 0,
        dead_letter_topic: str = "",
    ) -> Subscription:
        """Opens a subscription that runs ``handler`` on each message (see Subscription for the
        parameters). Returns once the broker confirmed it: a bad pattern or an unreachable
        broker raises BrokerError here, a bad parameter ValueError."""
        return Subscription(self, patterns, handler, group=group, id=id, max_in_flight=max_in_flight,
                            concurrency=concurrency, ack_deadline=ack_deadline, nack_delay=nack_delay,
                            max_deliveries=max_deliveries, dead_letter_topic=dead_letter_topic)

    def _track(self, close: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise ClosedError("tinybroker: client closed")
            self._closers.add(close)

    def _untrack(self, close: Callable[[], None]) -> None:
        with self._lock:
            self._closers.discard(close)

    def close(self) -> None:
        """Closes every subscription opened on the client, then its connections. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            closers = list(self._closers)
        for c in closers:
            c()
        for ch in self._channels.values():
            ch.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
