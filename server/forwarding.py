"""Forwarding: a call for a group another replica owns is sent on to that replica.

Any replica accepts any call, so that generated clients and grpcurl work through
one Kubernetes Service address. A call is first served here as usual: for a
group whose shard another replica holds, that refuses at once (nothing runs,
nothing is written) with NOT_COORDINATOR and the owner's address, and only then
is it forwarded, so the call for an owned group pays nothing for the feature.

A forwarded call carries `regroup-forwarded-by`; a replica never forwards such a
call again (two replicas with different views of the leases cannot bounce it
between them): it answers NOT_COORDINATOR with the address it knows instead. The
caller's metadata (an authorization token, a trace context) goes along (under mTLS
with the caller's principal in `regroup-principal`: see server/access.py), and the
caller's deadline bounds the forwarded call. A replica that serves TLS forwards over
TLS, verifying the owner's certificate with REGROUP_TLS_CA (or the client CA) and,
under mTLS, presenting its own certificate as the client's; when its files change,
later calls go over new channels with the new ones. When forwarding is off
(REGROUP_FORWARD=false) or the owner cannot be reached, the NOT_COORDINATOR
answer reaches the client, which follows the address itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import structlog

from regroup.v1 import admin_pb2_grpc, common_pb2, coordinator_pb2_grpc

from . import access, mapping
from .tls import CertificateFiles, channel_credentials

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
        self,
        replica_id: str,
        *,
        enabled: bool = True,
        max_message_bytes: int | None = None,
        tls: CertificateFiles | None = None,
    ) -> None:
        self.replica_id = replica_id
        self._tls = tls
        #: The TLS files' generation the open channels were made with.
        self._generation = 0 if tls is None else tls.current.generation
        #: Channels made with older files, closed once their calls may have ended.
        self._retired: set[asyncio.Task[None]] = set()
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
            if self._tls is None:
                channel = grpc.aio.insecure_channel(address, options=self._options)
            else:
                credentials = channel_credentials(self._tls.current, mutual=self._tls.mutual)
                channel = grpc.aio.secure_channel(address, credentials, options=self._options)
            self._channels[address] = channel
        return channel

    def _refresh(self) -> None:
        """New channels when the TLS files changed: a channel keeps the credentials it was
        made with, and would present an expired client certificate on its next connection."""
        if self._tls is None:
            return
        self._tls.check()
        if self._tls.current.generation == self._generation:
            return
        self._generation = self._tls.current.generation
        old = list(self._channels.values())
        self._channels.clear()
        self._coordinator_stubs.clear()
        self._admin_stubs.clear()
        if old:
            task = asyncio.get_running_loop().create_task(self._close_later(old, DEFAULT_TIMEOUT_S))
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)

    @staticmethod
    async def _close_later(channels: list[grpc.aio.Channel], delay_s: float) -> None:
        try:
            # Calls forwarded on them may still be running: no forwarded call lasts longer.
            await asyncio.sleep(delay_s)
        finally:  # at once when the forwarder closes
            for channel in channels:
                with contextlib.suppress(Exception):
                    await channel.close()

    def coordinator(self, address: str) -> coordinator_pb2_grpc.GroupCoordinatorStub:
        self._refresh()
        stub = self._coordinator_stubs.get(address)
        if stub is None:
            stub = self._coordinator_stubs[address] = coordinator_pb2_grpc.GroupCoordinatorStub(
                self._channel(address)
            )
        return stub

    def admin(self, address: str) -> admin_pb2_grpc.GroupAdminStub:
        self._refresh()
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
            if not key.startswith((":", "grpc-"))
            and key not in (FORWARDED_BY, CLIENT_HOST, access.PRINCIPAL, "user-agent")
        ]
        metadata += [(FORWARDED_BY, self.replica_id), (CLIENT_HOST, client_host(context))]
        caller = access.current()
        if caller is not None and self._tls is not None and self._tls.mutual:
            # The owner sees this replica's certificate, not the caller's: it is told whose
            # call this is, and believes it if that certificate is granted `forward`.
            metadata.append((access.PRINCIPAL, caller.principal))
        try:
            response = await getattr(stub, method)(request, timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as e:
            self.failed += 1
            log.warning("forward_failed", method=method, code=e.code().name, error=e.details())
            return None
        self.forwarded += 1
        return response

    async def close(self) -> None:
        retired = list(self._retired)
        for task in retired:
            task.cancel()
        await asyncio.gather(*retired, return_exceptions=True)
        channels, self._channels = self._channels, {}
        self._coordinator_stubs.clear()
        self._admin_stubs.clear()
        for channel in channels.values():
            with contextlib.suppress(Exception):
                await channel.close()
