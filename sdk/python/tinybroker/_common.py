"""Errors and helpers shared by the client and its subscriptions."""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2


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
