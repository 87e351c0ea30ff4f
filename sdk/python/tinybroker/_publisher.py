"""Pipelined publishing: many messages in flight on one PublishStream, each confirmed."""

from __future__ import annotations

import collections
import dataclasses
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

import grpc
from tinybroker._common import BrokerError, ClosedError, publish_request
from tinybroker.v1 import broker_pb2

if TYPE_CHECKING:
    from tinybroker._client import Client, PublishResult

_CODES = {c.value[0]: c for c in grpc.StatusCode}


@dataclasses.dataclass
class _Item:
    req: broker_pb2.PublishRequest
    fut: "Future[PublishResult]"


class Publisher:
    """Publishes without waiting for each confirmation: ``publish`` returns a Future at once,
    resolved with the message's PublishResult when the broker accepted it (or with a
    BrokerError when it refused it: a refused message does not stop the others). Messages go
    in order, batched into frames of up to ``max_batch`` on one PublishStream; at most
    ``max_in_flight`` are unconfirmed at a time (``publish`` blocks beyond that).

    Every message carries a message id (a random one by default): when the stream breaks
    (UNAVAILABLE: the broker restarting, the node gone), the unconfirmed messages are sent
    again, in order, with the same ids, on a new stream, on the next address after back-off;
    the broker publishes each once. Any other failure of the stream fails every unconfirmed
    message and the publisher. Safe to use from many threads. Make one with
    ``Client.publisher()``; ``close`` (or leaving a ``with`` block) waits for the confirms.
    """

    def __init__(self, client: "Client", max_in_flight: int = 1024, max_batch: int = 256) -> None:
        if max_in_flight < 1 or max_batch < 1:
            raise ValueError(f"tinybroker: max_in_flight {max_in_flight} and max_batch {max_batch} must be at least 1")
        self._c = client
        self._max_batch = max_batch
        self._cv = threading.Condition()
        self._pending: collections.deque[_Item] = collections.deque()  # not sent on the current stream
        self._sent: dict[int, list[_Item]] = {}  # by frame sequence, on the current stream
        self._seq = 0
        self._gen = 0  # the current stream; a broken stream's frame generator sees it change
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._closing = threading.Event()
        self._err: Optional[BrokerError] = None
        client._track(self.close)
        self._thread = threading.Thread(target=self._run, name="tinybroker-publisher", daemon=True)
        self._thread.start()

    def publish(
        self,
        topic: str,
        payload: bytes,
        headers: Optional[Mapping[str, str]] = None,
        key: Optional[str] = None,
        message_id: Optional[str] = None,
        ttl: Optional[float] = None,
        priority: Optional[int] = None,
    ) -> "Future[PublishResult]":
        """Queues one message (the arguments are Client.publish's) and returns its Future.
        Raises ClosedError after close, or the BrokerError that failed the publisher."""
        req = publish_request(topic, payload, headers, key, message_id, ttl, priority)
        self._slots.acquire()
        fut: Future[PublishResult] = Future()
        with self._cv:
            if self._err is not None or self._closing.is_set():
                self._slots.release()
                raise self._err or ClosedError("tinybroker: publisher closed")
            self._pending.append(_Item(req, fut))
            self._cv.notify_all()
        return fut

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every message published so far is confirmed or failed; False if
        ``timeout`` seconds passed first."""
        with self._cv:
            return self._cv.wait_for(lambda: self._err is not None or not (self._pending or self._sent), timeout)

    def close(self, timeout: Optional[float] = 30.0) -> None:
        """Waits up to ``timeout`` seconds for the confirms, then ends the stream; messages
        still unconfirmed then fail with ClosedError. Idempotent."""
        if self._closing.is_set():
            return
        self.flush(timeout)
        with self._cv:
            self._closing.set()
            self._cv.notify_all()
        self._thread.join(timeout)
        self._fail(ClosedError("tinybroker: publisher closed before the broker confirmed the message"))
        self._c._untrack(self.close)

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _frames(self, gen: int) -> Iterator[broker_pb2.PublishStreamRequest]:
        """The request frames of stream gen: what is pending, in order, until the stream is
        replaced or the publisher closes with nothing left to send."""
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._pending) or gen != self._gen or self._closing.is_set())
                if gen != self._gen or not self._pending:
                    return
                batch = [self._pending.popleft() for _ in range(min(self._max_batch, len(self._pending)))]
                self._seq += 1
                seq = self._seq
                self._sent[seq] = batch
            yield broker_pb2.PublishStreamRequest(sequence=seq, messages=[it.req for it in batch])

    def _run(self) -> None:
        """Keeps a stream open while the publisher is, reading its confirms."""
        wait = self._c._backoff[0]
        while not self._closing.is_set():
            with self._cv:
                gen = self._gen
            try:
                i, stub = self._c._stub()
            except ClosedError as e:
                return self._fail(e)
            try:
                for resp in stub.PublishStream(self._frames(gen), metadata=self._c._metadata):
                    self._confirm(resp)
                    wait = self._c._backoff[0]
                if self._closing.is_set():
                    return
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    return self._fail(self._c._error("publish stream", e))
                self._c._unavailable(i)
            with self._cv:
                # The stream is gone, and with it what it did not confirm: send that again, first.
                self._gen += 1
                back = [it for seq in sorted(self._sent) for it in self._sent[seq]]
                self._sent.clear()
                self._pending.extendleft(reversed(back))
                self._cv.notify_all()
            if self._closing.wait(wait):
                return
            wait = min(2 * wait, self._c._backoff[1])

    def _confirm(self, resp: broker_pb2.PublishStreamResponse) -> None:
        from tinybroker._client import PublishResult

        with self._cv:
            items = self._sent.pop(resp.sequence, [])
            self._cv.notify_all()
        for it, r in zip(items, resp.results):
            if r.code == 0:
                it.fut.set_result(PublishResult(r.system_id, r.routed, duplicate=r.duplicate))
            else:
                code = _CODES.get(r.code, grpc.StatusCode.UNKNOWN)
                it.fut.set_exception(BrokerError(f"tinybroker: publish to {it.req.topic!r}: {code.name}: {r.error}", code))
            self._slots.release()

    def _fail(self, err: Exception) -> None:
        """Fails every message not confirmed yet; a BrokerError fails the publisher too."""
        with self._cv:
            if isinstance(err, BrokerError) and self._err is None:
                self._err = err
            items = [it for seq in sorted(self._sent) for it in self._sent[seq]] + list(self._pending)
            self._sent.clear()
            self._pending.clear()
            self._cv.notify_all()
        for it in items:
            if not it.fut.done():
                it.fut.set_exception(err)
            self._slots.release()
