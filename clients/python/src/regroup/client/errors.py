"""Errors raised by the client, and how the member treats each error code."""

from __future__ import annotations

from typing import Any

import grpc

from regroup.v1 import common_pb2

ErrorCode = int


class RegroupError(Exception):
    """A request the coordinator refused: `code` is a `regroup.v1.ErrorCode` value."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        self.message = message
        super().__init__(f"{error_name(code)}: {message}" if message else error_name(code))

    @property
    def name(self) -> str:
        return error_name(self.code)


class CommitFailed(RegroupError):
    """Some partitions of an offset commit were refused; `partitions` says why, per partition
    (PARTITION_NOT_OWNED: the member no longer owns it, another member may)."""

    def __init__(self, partitions: dict[Any, RegroupError]) -> None:
        self.partitions = partitions
        first = next(iter(partitions.values()))
        super().__init__(first.code, f"{len(partitions)} partition(s) refused, e.g. {first}")


def error_name(code: ErrorCode) -> str:
    try:
        return common_pb2.ErrorCode.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return f"ERROR_{code}"


# The member's partitions are no longer its own: give them up and rejoin with epoch 0.
FENCING_CODES = frozenset(
    {common_pb2.FENCED_MEMBER_EPOCH, common_pb2.UNKNOWN_MEMBER_ID, common_pb2.STALE_MEMBER_EPOCH}
)

# The coordinator cannot answer right now: back off with jitter and retry the full request.
# UNRELEASED_INSTANCE_ID means the previous incarnation of a static member has not left yet.
RETRIABLE_CODES = frozenset(
    {
        common_pb2.COORDINATOR_NOT_AVAILABLE,
        common_pb2.NOT_COORDINATOR,
        common_pb2.COORDINATOR_LOAD_IN_PROGRESS,
        common_pb2.UNRELEASED_INSTANCE_ID,
        common_pb2.UNKNOWN_SERVER_ERROR,
    }
)

# gRPC statuses that say nothing about the request itself (transport, deadline, a
# server bug, overload): the request is retried in full after a backoff.
# INVALID_ARGUMENT, UNIMPLEMENTED, PERMISSION_DENIED, UNAUTHENTICATED and the like
# will fail again and are raised instead.
RETRIABLE_STATUSES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)
