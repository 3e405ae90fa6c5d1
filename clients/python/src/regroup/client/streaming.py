"""Member streams on the client: one `GroupCoordinator.MemberStream` per event loop and
coordinator address, shared by every member of the process that talks to it.

A member hands its heartbeat to `StreamMux.heartbeat`, which puts it in the stream's
next batch (every heartbeat queued in the same turn of the event loop goes in one
message) and returns the coordinator's answer: the very answer the unary RPC would
give. The coordinator pushes nudges on the stream ("heartbeat now"); the mux calls
the nudged member's callback, and the member sends its next heartbeat at once.

Falling back is always safe, because the stream is only a transport:
- no stream (the server predates MemberStream: UNIMPLEMENTED, then never again;
  the stream broke and is reopened after a backoff; the member is past the stream's
  member limit; the stream refused the item, which means nothing was done): `heartbeat`
  returns None and the member sends that heartbeat with the unary RPC;
- the stream broke after the heartbeat was sent: it may or may not have been served,
  so `heartbeat` raises UNAVAILABLE, as a lost unary call would, and the member retries
  with a full request after its usual backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

import grpc

from regroup.client.routing import backoff_s
from regroup.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("regroup.client")

MemberKey = tuple[str, str]  # (group id, member id)
Metadata = Callable[[], tuple[tuple[str, str], ...] | None]

#: How long opening a stream may take before the member gives up on it for a while.
OPEN_TIMEOUT_S = 5.0


class _Lost:
    """What a heartbeat's future holds when its answer will not come."""

    def __init__(self, sent: bool, why: str) -> None:
        self.sent = sent
        self.why = why


class _Stream:
    """One open MemberStream call: its outbox (heartbeats not yet written) and reader."""

    def __init__(self) -> None:
        self.call: Any = None
        self.outbox: list[coordinator_pb2.StreamHeartbeat] = []
        self.wake = asyncio.Event()
        self.closing = False
        self.reader: asyncio.Task[None] | None = None
        self.writer: asyncio.Task[None] | None = None
        self.max_batch = 1
        self.max_members = 0

    async def write(self) -> None:
        """Writes the outbox in batches until the stream closes."""
        while not self.closing:
            await self.wake.wait()
            # One more turn of the loop: members woken together (by the same nudge
            # message) all queue their heartbeats before the batch is taken.
            await asyncio.sleep(0)
            self.wake.clear()
            while self.outbox and not self.closing:
                items = self.outbox[: self.max_batch]
                del self.outbox[: self.max_batch]
                await self.call.write(coordinator_pb2.MemberStreamRequest(heartbeats=items))


class StreamMux:
    """The MemberStream of one event loop to one coordinator address; see the module."""

    def __init__(
        self,
        channel: Any,
        metadata: Metadata,
        *,
        owns_channel: bool,
        backoff_ms: int = 100,
        backoff_max_ms: int = 5_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._channel = channel
        self._owns_channel = owns_channel
        self._stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        self._metadata = metadata
        self._backoff = (backoff_ms, backoff_max_ms)
        self._clock = clock
        self._stream: _Stream | None = None
        self._opening: asyncio.Future[bool] | None = None
        #: False once the server answered UNIMPLEMENTED: it has no streams.
        self.supported = True
        self._retry_at = 0.0
        self._failures = 0
        #: Whether a failure to open was logged since the stream was last open: the next
        #: ones go at DEBUG (an unreachable address fails every backoff, for ever; the
        #: members report that themselves, rarely).
        self._open_failure_logged = False
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._nudge: dict[MemberKey, Callable[[], None]] = {}
        self._reopen_timer: asyncio.TimerHandle | None = None
        self._closed = False
        #: Members using the mux (it closes when the last one leaves it).
        self.users: set[object] = set()
        # What happened, for tests and logs.
        self.opened = 0
        self.broken = 0
        self.answered = 0
        self.nudges = 0
        self.fallbacks = 0

    @property
    def is_open(self) -> bool:
        return self._stream is not None

    # -- heartbeats ---------------------------------------------------------------

    async def heartbeat(
        self, kind: str, request: Any, seconds: float, on_nudge: Callable[[], None]
    ) -> Any | None:
        """The coordinator's answer to `request` (kind "consumer" or "connect") sent on the
        stream; None when it was not sent (send it with the unary RPC). Raises
        grpc.aio.AioRpcError (UNAVAILABLE, DEADLINE_EXCEEDED) when it was sent and its
        answer will not come, as a unary call would."""
        deadline = self._clock() + seconds
        stream = await self._ready(seconds)
        key = (request.group_id, request.member_id)
        if stream is not None and key not in self._nudge and len(self._nudge) >= stream.max_members:
            self.fallbacks += 1
            return None
        if request.member_epoch >= 0:
            # Also while there is no stream: the next one to open pokes the member.
            self._nudge[key] = on_nudge
        if stream is None:
            self.fallbacks += 1
            return None
        correlation_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        item = coordinator_pb2.StreamHeartbeat(correlation_id=correlation_id)
        getattr(item, kind).CopyFrom(request)
        self._pending[correlation_id] = future
        stream.outbox.append(item)
        stream.wake.set()
        try:
            async with asyncio.timeout(max(0.001, deadline - self._clock())):
                answer = await future
        except TimeoutError:
            raise _rpc_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, "no answer on the member stream in time"
            ) from None
        finally:
            self._pending.pop(correlation_id, None)
        if isinstance(answer, _Lost):
            if not answer.sent:
                self.fallbacks += 1
                return None
            raise _rpc_error(grpc.StatusCode.UNAVAILABLE, answer.why)
        if answer.error_code != common_pb2.NONE:
            # Refused by the stream itself (a limit): nothing was done.
            log.info("member stream refused a heartbeat (%s): %s", answer.error_code, answer.error_message)
            self.fallbacks += 1
            return None
        self.answered += 1
        self._failures = 0
        if request.member_epoch < 0:
            self._nudge.pop(key, None)
        return getattr(answer, kind)

    def forget(self, group_id: str, member_id: str) -> None:
        """The member left or closed: no more nudges for it."""
        self._nudge.pop((group_id, member_id), None)

    # -- the stream's life ----------------------------------------------------------

    async def _ready(self, seconds: float) -> _Stream | None:
        """The open stream, opening it if it is time to; None when there is none."""
        if self._stream is not None:
            return self._stream
        if not self.supported or self._clock() < self._retry_at:
            return None
        opening = self._opening or self._start_opening()
        try:
            async with asyncio.timeout(min(seconds, OPEN_TIMEOUT_S)):
                await asyncio.shield(opening)
        except TimeoutError:
            return None
        return self._stream

    async def _open(self, opening: asyncio.Future[bool]) -> None:
        stream = _Stream()
        try:
            stream.call = self._stub.MemberStream(metadata=self._metadata())
            async with asyncio.timeout(OPEN_TIMEOUT_S):
                first = await stream.call.read()
            if first is grpc.aio.EOF:
                raise _rpc_error(grpc.StatusCode.UNAVAILABLE, "the stream ended before its first message")
        except grpc.aio.AioRpcError as e:
            self._open_failed(stream, e.code(), e.details() or "")
        except TimeoutError:
            self._open_failed(stream, grpc.StatusCode.DEADLINE_EXCEEDED, "no first message in time")
        else:
            limits = first.limits
            stream.max_batch = max(1, limits.max_batch)
            stream.max_members = max(1, limits.max_members)
            self._stream = stream
            self.opened += 1
            self._open_failure_logged = False
            if self.opened > 1:
                # A new stream: every member heartbeats on it now, so that the coordinator
                # knows where to nudge it (and it learns what it missed meanwhile).
                for poke in list(self._nudge.values()):
                    poke()
            stream.reader = asyncio.create_task(self._read(stream), name="regroup-member-stream-read")
            stream.writer = asyncio.create_task(self._write(stream), name="regroup-member-stream-write")
            log.debug("member stream open (batch %d, members %d)", stream.max_batch, stream.max_members)
        finally:
            self._opening = None
            if not opening.done():
                opening.set_result(self._stream is stream)

    def _open_failed(self, stream: _Stream, code: grpc.StatusCode, details: str) -> None:
        if stream.call is not None:
            stream.call.cancel()
        if code == grpc.StatusCode.UNIMPLEMENTED:
            log.info("the service has no member streams (an older server): heartbeats go unary")
            self.supported = False
            return
        delay = self._back_off()
        log.log(
            logging.DEBUG if self._open_failure_logged else logging.WARNING,
            "member stream could not open (%s: %s); unary heartbeats, trying again in %.2fs",
            code.name,
            details,
            delay,
        )
        self._open_failure_logged = True

    async def _read(self, stream: _Stream) -> None:
        code, details = grpc.StatusCode.UNAVAILABLE, "the member stream ended"
        try:
            while True:
                # read() rather than iterating: the first message was read so, and the
                # two styles may not be mixed on one call.
                message = await stream.call.read()
                if message is grpc.aio.EOF:
                    break
                for answer in message.responses:
                    future = self._pending.get(answer.correlation_id)
                    if future is not None and not future.done():
                        future.set_result(answer)
                for nudge in message.nudges:
                    poke = self._nudge.get((nudge.group_id, nudge.member_id))
                    if poke is not None:
                        self.nudges += 1
                        poke()
        except grpc.aio.AioRpcError as e:
            code, details = e.code(), e.details() or ""
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.CANCELLED, "the member stream was closed"
            raise
        finally:
            self._ended(stream, code, details)

    async def _write(self, stream: _Stream) -> None:
        try:
            await stream.write()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError):
            # The call is over: its reader sees why and ends the stream.
            stream.call.cancel()

    def _ended(self, stream: _Stream, code: grpc.StatusCode, details: str) -> None:
        """The stream is over: heartbeats it had not written yet go unary at once; those
        it had are lost (the members retry them in full); a new stream after a backoff."""
        if stream.writer is not None:
            stream.writer.cancel()
        if self._stream is not stream:
            return
        self._stream = None
        unsent = {item.correlation_id for item in stream.outbox}
        why = f"the member stream ended ({code.name}: {details})"
        for correlation_id, future in list(self._pending.items()):
            if not future.done():
                future.set_result(_Lost(correlation_id not in unsent, why))
        if stream.closing:
            return
        self.broken += 1
        if code == grpc.StatusCode.UNIMPLEMENTED:
            self.supported = False
            return
        delay = self._back_off()
        log.warning("%s; unary heartbeats, a new stream in %.2fs", why, delay)

    def _back_off(self) -> float:
        """No stream for a while: heartbeats go unary until it is reopened, which happens
        without waiting for a heartbeat (the members' nudges come through the stream
        their heartbeats last took, and they may heartbeat only every interval)."""
        self._failures += 1
        delay = backoff_s(self._failures, *self._backoff)
        self._retry_at = self._clock() + delay
        if self._reopen_timer is not None:
            self._reopen_timer.cancel()
        self._reopen_timer = asyncio.get_running_loop().call_later(delay, self._reopen)
        return delay

    def _reopen(self) -> None:
        self._reopen_timer = None
        if self._stream is None and self._opening is None and self.supported and not self._closed:
            self._start_opening()

    def _start_opening(self) -> asyncio.Future[bool]:
        opening = self._opening = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._open(opening), name="regroup-member-stream-open")
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
        return opening

    async def close(self) -> None:
        self._closed = True
        if self._reopen_timer is not None:
            self._reopen_timer.cancel()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.closing = True
            stream.wake.set()
            stream.call.cancel()
            if stream.reader is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await stream.reader
            self._ended(stream, grpc.StatusCode.CANCELLED, "closed")
        if self._owns_channel:
            await self._channel.close()


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


# -- one mux per event loop and address, shared by the members ----------------------

_MUXES: dict[tuple[int, Hashable], StreamMux] = {}


def acquire(
    user: object,
    key: Hashable,
    open_channel: Callable[[], Any],
    metadata: Metadata,
    *,
    owns_channel: bool,
    backoff_ms: int,
    backoff_max_ms: int,
) -> StreamMux:
    """The mux of this event loop for `key` (an address and how channels to it are made),
    created with a channel from `open_channel` if there is none yet."""
    full_key = (id(asyncio.get_running_loop()), key)
    mux = _MUXES.get(full_key)
    if mux is None:
        mux = StreamMux(
            open_channel(),
            metadata,
            owns_channel=owns_channel,
            backoff_ms=backoff_ms,
            backoff_max_ms=backoff_max_ms,
        )
        _MUXES[full_key] = mux
    mux.users.add(user)
    return mux


async def release(user: object, mux: StreamMux) -> None:
    """`user` stops using `mux`; the last one closes it (and its channel)."""
    mux.users.discard(user)
    if mux.users:
        return
    for full_key, candidate in list(_MUXES.items()):
        if candidate is mux:
            del _MUXES[full_key]
    await mux.close()


def open_muxes() -> list[StreamMux]:
    """The muxes of the running event loop (for tests and diagnostics)."""
    loop_id = id(asyncio.get_running_loop())
    return [mux for (loop, _), mux in _MUXES.items() if loop == loop_id]
