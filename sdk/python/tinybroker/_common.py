"""Errors and helpers shared by the client and its subscriptions."""

from __future__ import annotations

import base64
import os
from typing import Mapping, Optional

import grpc
from google.protobuf import duration_pb2
from tinybroker.v1 import broker_pb2


class BrokerError(Exception):
    """A call to the broker failed. ``code`` is its gRPC status code (INVALID_ARGUMENT for a bad
    topic, RESOURCE_EXHAUSTED for a full group, UNAVAILABLE when no broker answers, ...)."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


class ClosedError(Exception):
    """The client or subscription was closed."""


def duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def new_message_id() -> str:
    """A random message id: 16 bytes in unpadded base64url, as the Go client's."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


def publish_request(topic: str, payload: bytes, headers: Optional[Mapping[str, str]], key: Optional[str],
                    message_id: Optional[str], ttl: Optional[float], priority: Optional[int]) -> broker_pb2.PublishRequest:
    """The PublishRequest of Client.publish's and Publisher.publish's arguments: a random
    message id unless one is given."""
    req = broker_pb2.PublishRequest(
        topic=topic, payload=payload, headers=dict(headers or {}),
        message_id=message_id or new_message_id(), key=key or "", priority=max(priority or 0, 0))
    if ttl is not None:
        req.ttl.CopyFrom(duration(ttl))
    return req
