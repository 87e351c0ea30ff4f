"""Subscriptions: one Subscribe stream, a reader thread and a bounded pool of handler threads."""

from __future__ import annotations

import dataclasses
import queue
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, Union, cast

import grpc

from tinybroker._common import BrokerError, ClosedError, duration
from tinybroker.v1 import broker_pb2

if TYPE_CHECKING:
    from tinybroker._client import Client

# Codes that re-opening the stream cannot fix: the subscription ends with them (as the Go
# client's retryable). ALREADY_EXISTS is retried only when re-opening: the broker may not have
# noticed yet that the previous stream of a named fanout subscription is gone.
_FATAL = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.OUT_OF_RANGE,
}

# How many times the first open is tried while the broker answers UNAVAILABLE.
_OPEN_ATTEMPTS = 4

# Bounds the ids of one AckBatch, NackBatch or TouchBatch frame.
_MAX_IDS_PER_FRAME = 4096


class AlreadySettledError(Exception):
    """The message was acked or nacked already."""


@dataclasses.dataclass
class _Settlement:
    kind: str  # "ack", "nack" or "touch"
    system_id: str
    gen: int  # the generation of the stream the message came on
    delay: float = 0.0
    reason: str = ""


class Message:
    """A message delivered to a subscription.

    ``attempt`` is 1 on the first delivery and grows with each redelivery; ``redelivered`` is
    ``attempt > 1``. ``published_at_ns`` is when the broker accepted it (Unix nanoseconds).
    """

    def __init__(self, sub: "Subscription", gen: int, m: broker_pb2.Message) -> None:
        self.system_id: str = m.system_id
        self.topic: str = m.topic
        self.payload: bytes = m.payload
        self.headers: dict[str, str] = dict(m.headers)
        self.published_at_ns: int = m.publish_time_unix_nano
        self.attempt: int = m.attempt
        self.redelivered: bool = m.redelivered
        self.subscription_id: str = m.subscription_id
        self.key: str = m.key
        self.priority: int = m.priority
        self._sub = sub
        self._gen = gen
        self._lock = threading.Lock()
        self._settled = False

    def _settle(self, kind: str, delay: float = 0.0, reason: str = "") -> None:
        with self._lock:
            if self._settled:
                raise AlreadySettledError(f"tinybroker: message {self.system_id} already acked or nacked")
            self._settled = True
        if self._sub._balanced:
            self._sub._settler.add(_Settlement(kind, self.system_id, self._gen, max(delay, 0.0), reason))

    def ack(self) -> None:
        """Acknowledges the message: the broker forgets it. Sent asynchronously, in batches; a
        fanout delivery takes no ack. Raises AlreadySettledError after an ack or nack."""
        self._settle("ack")

    def nack(self, delay: float = 0.0, reason: str = "") -> None:
        """Gives the message back to its group, to be redelivered after ``delay`` seconds."""
        self._settle("nack", delay, reason[:256])

    def touch(self) -> None:
        """Extends the message's ack deadline (a balanced subscription's), for long work: call
        it more often than the deadline (``Subscription.ack_deadline``)."""
        with self._lock:
            if self._settled:
                raise AlreadySettledError(f"tinybroker: message {self.system_id} already acked or nacked")
        if self._sub._balanced:
            self._sub._settler.add(_Settlement("touch", self.system_id, self._gen))


Handler = Callable[[Message], None]


class _Settler:
    """The acks, nacks and touches of the handlers until a stream's request iterator takes
    them: whatever piled up while it was busy goes out as one batch."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: list[_Settlement] = []
        self._gen = 0  # the current stream's generation; an older stream's iterator stops
        self._closed = False

    def add(self, x: _Settlement) -> None:
        with self._cond:
            if self._closed:
                raise ClosedError("tinybroker: subscription closed")
            self._items.append(x)
            self._cond.notify_all()

    def new_stream(self) -> int:
        with self._cond:
            self._gen += 1
            self._cond.notify_all()
            return self._gen

    def take(self, gen: int) -> Optional[list[_Settlement]]:
        """Waits for items for the stream of generation gen; None once that stream is over.
        Nacks and touches of messages from older streams are dropped: the broker gave those
        back to the group when their stream broke, maybe to another member."""
        with self._cond:
            while not self._items and self._gen == gen and not self._closed:
                self._cond.wait()
            if self._gen != gen or self._closed:
                return None
            items, self._items = self._items, []
        return [x for x in items if x.kind == "ack" or x.gen == gen]

    def put_back(self, items: list[_Settlement]) -> None:
        with self._cond:
            if not self._closed:
                self._items[:0] = items

    def close(self) -> list[_Settlement]:
        with self._cond:
            self._closed = True
            items, self._items = self._items, []
            self._cond.notify_all()
            return items


def _frames(items: list[_Settlement]) -> Iterator[broker_pb2.SubscribeRequest]:
    """One AckBatch frame, one TouchBatch, and one NackBatch per distinct delay and reason."""
    acks = [x.system_id for x in items if x.kind == "ack"]
    touches = [x.system_id for x in items if x.kind == "touch"]
    nacks: dict[tuple[float, str], list[str]] = {}
    for x in items:
        if x.kind == "nack":
            nacks.setdefault((x.delay, x.reason), []).append(x.system_id)
    for i in range(0, len(acks), _MAX_IDS_PER_FRAME):
        yield broker_pb2.SubscribeRequest(ack=broker_pb2.AckBatch(system_ids=acks[i:i + _MAX_IDS_PER_FRAME]))
    for i in range(0, len(touches), _MAX_IDS_PER_FRAME):
        yield broker_pb2.SubscribeRequest(touch=broker_pb2.TouchBatch(system_ids=touches[i:i + _MAX_IDS_PER_FRAME]))
    for (delay, reason), ids in nacks.items():
        for i in range(0, len(ids), _MAX_IDS_PER_FRAME):
            nb = broker_pb2.NackBatch(system_ids=ids[i:i + _MAX_IDS_PER_FRAME], reason=reason)
            if delay > 0:
                nb.delay.CopyFrom(duration(delay))
            yield broker_pb2.SubscribeRequest(nack=nb)


class Subscription:
    """An open subscription (``Client.subscribe``).

    With ``group`` it is a balanced member of that consumer group (subscription id: ``id``,
    default the group): each message goes to one member and is redelivered until acked. Without
    it, it is a fanout subscription that gets every matching message at most once.

    ``handler(msg)`` runs on ``concurrency`` threads; returning acks the message, raising nacks
    it with ``nack_delay`` seconds (unless the handler settled it itself). ``max_in_flight`` is
    how many unacked messages the member may hold (default ``concurrency``); ``ack_deadline``
    (seconds) how long before an unacked message is redelivered (default the broker's). When
    the stream breaks (the broker restarted, the connection was lost) the subscription re-opens
    it with back-off, on the next node if the current one does not answer; an error retrying
    cannot fix ends it: ``error`` says which.
    """

    def __init__(
        self,
        client: "Client",
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
    ) -> None:
        if isinstance(patterns, str):
            patterns = [patterns]
        if concurrency < 1 or (max_in_flight is not None and max_in_flight < 1):
            raise ValueError(f"tinybroker: concurrency {concurrency} and max_in_flight {max_in_flight} must be at least 1")
        self._client = client
        self._handler = handler
        self._balanced = group is not None
        self._nack_delay = nack_delay
        self._open = broker_pb2.OpenSubscription(subscription_id=id or group or "", topic_patterns=list(patterns),
                                                 mode=broker_pb2.DELIVERY_MODE_FANOUT)
        if group is not None:
            self._open.mode = broker_pb2.DELIVERY_MODE_BALANCED
            self._open.consumer_group = group
            self._open.max_in_flight = max_in_flight or concurrency
            self._open.max_deliveries = max_deliveries
            self._open.dead_letter_topic = dead_letter_topic
            if ack_deadline is not None:
                self._open.ack_deadline.CopyFrom(duration(ack_deadline))
        elif max_in_flight is not None or ack_deadline is not None or max_deliveries or dead_letter_topic:
            raise ValueError("tinybroker: max_in_flight, ack_deadline, max_deliveries and dead_letter_topic are for "
                             "balanced subscriptions (give a group), fanout deliveries are not acked")
        self._settler = _Settler()
        self._work: queue.Queue[Optional[Message]] = queue.Queue(maxsize=concurrency)
        self._closing = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._call: Optional[grpc.Future] = None
        self._last_acks: list[str] = []  # the last AckBatch yielded: repeated by close
        self.error: Optional[BrokerError] = None
        """Why the subscription ended, if an error it could not recover from ended it."""
        self.subscription_id = ""
        self.member_id = ""
        self.ack_deadline = 0.0

        # As the Go client, the first open tries each node in turn until one answers; a
        # connection that fails as it is made (UNAVAILABLE) is tried again, as publish does,
        # 4 times at least, with back-off.
        attempts, wait = max(len(client._addrs), _OPEN_ATTEMPTS), client._backoff[0]
        for attempt in range(attempts):
            try:
                responses = self._open_stream()
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == attempts - 1:
                    raise client._error(f"subscribe to {list(self._open.topic_patterns)}", e) from None
            time.sleep(wait)
            wait = min(2 * wait, client._backoff[1])
        try:
            client._track(self.close)
        except ClosedError:
            if self._call is not None:
                self._call.cancel()
            raise
        self._workers = [threading.Thread(target=self._worker, name=f"tinybroker-handler-{i}", daemon=True)
                         for i in range(concurrency)]
        for w in self._workers:
            w.start()
        self._reader = threading.Thread(target=self._run, args=(responses,), name="tinybroker-reader", daemon=True)
        self._reader.start()

    def _requests(self, gen: int) -> Iterator[broker_pb2.SubscribeRequest]:
        yield broker_pb2.SubscribeRequest(open=self._open)
        while True:
            items = self._settler.take(gen)
            if items is None:
                return
            for f in _frames(items):
                if f.HasField("ack"):
                    self._last_acks = list(f.ack.system_ids)
                yield f

    def _open_stream(self) -> Iterator[broker_pb2.SubscribeResponse]:
        """Opens a stream and waits for `subscribed`; raises grpc.RpcError if the call failed,
        BrokerError if the broker refused the subscription."""
        gen = self._settler.new_stream()
        i, stub = self._client._stub()
        call: Any = stub.Subscribe(self._requests(gen), metadata=self._client._metadata)
        with self._lock:
            self._call = call
            self._gen = gen
        try:
            first = next(call)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                self._client._unavailable(i)
            raise
        if first.HasField("refused"):
            call.cancel()
            raise BrokerError(f"tinybroker: subscribe to {list(self._open.topic_patterns)}: refused: {first.refused.error}",
                              _code(first.refused.code))
        if not first.HasField("subscribed"):
            call.cancel()
            raise BrokerError("tinybroker: protocol error: the broker's first Subscribe frame is not `subscribed`",
                              grpc.StatusCode.INTERNAL)
        s = first.subscribed
        self.subscription_id, self.member_id = s.subscription_id, s.member_id
        self.ack_deadline = s.ack_deadline.ToNanoseconds() / 1e9
        return cast(Iterator[broker_pb2.SubscribeResponse], call)

    def _run(self, responses: Iterator[broker_pb2.SubscribeResponse]) -> None:
        """The reader: hands messages to the workers, and re-opens the stream when it breaks."""
        wait = self._client._backoff[0]
        try:
            while True:
                code, details = self._read(responses)
                if self._closing.is_set():
                    return
                if code in _FATAL:
                    return self._fail(code, details)
                while True:
                    # Jitter: the members of a group do not reconnect in step.
                    if self._closing.wait(wait / 2 + random.uniform(0, wait / 2)):
                        return
                    wait = min(2 * wait, self._client._backoff[1])
                    try:
                        responses = self._open_stream()
                        wait = self._client._backoff[0]
                        break
                    except grpc.RpcError as e:
                        if e.code() in _FATAL and not self._closing.is_set():
                            return self._fail(e.code(), e.details())
                    except BrokerError as e:
                        return self._fail(e.code, str(e))
                    except ClosedError:
                        return self.close()
        finally:
            self._done.set()

    def _read(self, responses: Iterator[broker_pb2.SubscribeResponse]) -> tuple[grpc.StatusCode, str]:
        """Reads one stream until it ends; returns why it ended."""
        gen = self._gen
        try:
            for resp in responses:
                if resp.HasField("ended"):
                    return _code(resp.ended.code), resp.ended.error
                for m in resp.messages.messages:
                    msg = Message(self, gen, m)
                    while not self._closing.is_set():
                        try:
                            self._work.put(msg, timeout=0.1)
                            break
                        except queue.Full:
                            pass
                    if self._closing.is_set():
                        return grpc.StatusCode.CANCELLED, "closed"
            return grpc.StatusCode.UNAVAILABLE, "the broker ended the stream"
        except grpc.RpcError as e:
            return e.code(), e.details()

    def _fail(self, code: grpc.StatusCode, details: str) -> None:
        """Ends the subscription with an error that re-opening cannot fix."""
        self.error = BrokerError(f"tinybroker: subscription {list(self._open.topic_patterns)} ended: {code.name}: {details}", code)
        self.close()

    def _worker(self) -> None:
        while True:
            msg = self._work.get()
            if msg is None:
                return
            if self._closing.is_set():
                continue  # the broker redelivers it when the stream ends
            try:
                self._handler(msg)
            except Exception as e:  # noqa: BLE001  (a handler's failure is the message's: nack it)
                if not msg._settled:
                    try:
                        msg.nack(self._nack_delay, f"{type(e).__name__}: {e}")
                    except (AlreadySettledError, ClosedError):
                        pass
                continue
            if not msg._settled:
                try:
                    msg.ack()
                except (AlreadySettledError, ClosedError):
                    pass

    def close(self) -> None:
        """Ends the subscription: waits for the running handlers, sends their acks and nacks
        (by unary calls, which the broker answers), and closes the stream (the broker
        redelivers the member's other unacked messages to the group). Idempotent; do not call
        it from a handler, which it waits for."""
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
        while True:  # messages not started are left to the broker
            try:
                self._work.get_nowait()
            except queue.Empty:
                break
        for _ in self._workers:
            self._work.put(None)
        for w in self._workers:
            w.join()
        left = self._settler.close()
        if self._balanced:
            self._flush(self._last_acks, [x for x in left if x.kind != "touch" and (x.kind == "ack" or x.gen == self._gen)])
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()
        if threading.current_thread() is not self._reader:
            self._reader.join()
        self._client._untrack(self.close)

    def _flush(self, again: list[str], left: list[_Settlement]) -> None:
        """Sends the last acks and nacks by unary calls: cancelling the stream discards what
        gRPC has not written yet. The last AckBatch is repeated for that reason (acking an
        acked message is harmless). Gives up at the first failure: the broker redelivers."""
        try:
            _, stub = self._client._stub()
        except ClosedError:
            return
        md, sid = self._client._metadata, self.subscription_id
        calls: list[tuple[str, Any]] = [("Ack", broker_pb2.Ack(subscription_id=sid, system_id=a)) for a in again]
        for x in left:
            if x.kind == "ack":
                calls.append(("Ack", broker_pb2.Ack(subscription_id=sid, system_id=x.system_id)))
            else:
                calls.append(("Nack", broker_pb2.Nack(subscription_id=sid, system_id=x.system_id,
                                                      delay=duration(x.delay), reason=x.reason)))
        for method, req in calls:
            try:
                getattr(stub, method)(req, timeout=5, metadata=md)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: settled already
                    return

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the subscription has ended; True if it has."""
        return self._done.wait(timeout)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _code(code: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return grpc.StatusCode.UNKNOWN
