"""Forwarding: a call for a group another replica owns is sent on to that replica.

Any replica accepts any call, so that generated clients and grpcurl work through
one Kubernetes Service address. A call is first served here as usual: for a
group whose shard another replica holds, that refuses at once (nothing runs,
nothing is written) with NOT_COORDINATOR and the owner's address, and only then
is it forwarded, so the call for an owned group pays nothing for the feature.

A forwarded call carries `regroup-forwarded-by`; a replica never forwards such a
call again (two replicas with different views of the leases cannot bounce it
between them): it answers NOT_COORDINATOR with the address it knows instead. The
caller's metadata (an authorization token, a trace context) goes along, and the
caller's deadline bounds the forwarded call. When forwarding is off
(REGROUP_FORWARD=false) or the owner cannot be reached, the NOT_COORDINATOR
answer reaches the client, which follows the address itself.
"""

from __future__ import annotations

import contextlib
from typing import Any

import grpc
import structlog

from regroup.v1 import admin_pb2_grpc, common_pb2, coordinator_pb2_grpc

from . import mapping

log = structlog.get_logger("regroup")

#: Metadata a forwarded call carries: the forwarding replica's id.
FORWARDED_BY = "regroup-forwarded-by"
#: Metadata a forwarded call carries: the original caller's host (DescribeGroups shows it).
CLIENT_HOST = "regroup-client-host"
#: The longest a forwarded call may take when its caller set no deadline.
DEFAULT_TIMEOUT_S = 30.0

NOT_COORDINATOR = common_pb2.NOT_COORDINATOR


def _metadata(context: Any) -> tuple[tuple[str, str | bytes], ...]:
    return tuple(context.invocation_metadata() or ())


def forwarded_by(context: Any) -> str | None:
    """The replica that forwarded this call, if it was forwarded."""
    for key, value in _metadata(context):
        if key == FORWARDED_BY:
            return str(value)
    return None


def client_host(context: Any) -> str:
    """The host of whoever made the call (the original caller's, when forwarded)."""
    for key, value in _metadata(context):
        if key == CLIENT_HOST:
            return str(value)
    return mapping.peer_host(context.peer())


class Forwarder:
    def __init__(
        self, replica_id: str, *, enabled: bool = True, max_message_bytes: int | None = None
    ) -> None:
        self.replica_id = replica_id
        self.enabled = enabled
        self._options = (
            []
            if max_message_bytes is None
            else [
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
            ]
        )
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._coordinator_stubs: dict[str, coordinator_pb2_grpc.GroupCoordinatorStub] = {}
        self._admin_stubs: dict[str, admin_pb2_grpc.GroupAdminStub] = {}
        #: Calls forwarded, and forwards that failed (the refusal was answered instead).
        self.forwarded = 0
        self.failed = 0

    def may_forward(self, context: Any, address: str) -> bool:
        return self.enabled and bool(address) and forwarded_by(context) is None

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address, options=self._options)
        return channel

    def coordinator(self, address: str) -> coordinator_pb2_grpc.GroupCoordinatorStub:
        stub = self._coordinator_stubs.get(address)
        if stub is None:
            stub = self._coordinator_stubs[address] = coordinator_pb2_grpc.GroupCoordinatorStub(
                self._channel(address)
            )
        return stub

    def admin(self, address: str) -> admin_pb2_grpc.GroupAdminStub:
        stub = self._admin_stubs.get(address)
        if stub is None:
            stub = self._admin_stubs[address] = admin_pb2_grpc.GroupAdminStub(self._channel(address))
        return stub

    async def call(self, stub: Any, method: str, request: Any, context: Any) -> Any | None:
        """`request` sent to `method` of `stub`; None when the owner could not answer."""
        remaining = context.time_remaining()
        timeout = DEFAULT_TIMEOUT_S if remaining is None else max(0.001, remaining)
        metadata = [
            (key, value)
            for key, value in _metadata(context)
            if not key.startswith((":", "grpc-")) and key not in (FORWARDED_BY, CLIENT_HOST, "user-agent")
        ]
        metadata += [(FORWARDED_BY, self.replica_id), (CLIENT_HOST, client_host(context))]
        try:
            response = await getattr(stub, method)(request, timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as e:
            self.failed += 1
            log.warning("forward_failed", method=method, code=e.code().name, error=e.details())
            return None
        self.forwarded += 1
        return response

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        self._coordinator_stubs.clear()
        self._admin_stubs.clear()
        for channel in channels.values():
            with contextlib.suppress(Exception):
                await channel.close()
