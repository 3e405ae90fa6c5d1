"""MemberStream served in-process: the servicer's handler driven through a fake servicer
context (no network), for tests of the stream logic on the in-memory store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import grpc

from regroup.reconciler import Record
from regroup.reconciler.history import GroupEvent
from regroup.server.memstore import MemoryStore
from regroup.server.store import Fence, PreparedWrite
from regroup.server.streams import StreamClosed, StreamSession
from regroup.v1 import common_pb2, coordinator_pb2


class GatedStore(MemoryStore):
    """A memory store whose writes take `turns` turns of the event loop, as a database's
    take time, and wait while `gate` is clear: heartbeats arriving meanwhile queue for
    the group's lock and are served as one batch (server/writebatch.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.turns = 1

    async def append(
        self,
        group_id: str,
        records: Sequence[Record] | PreparedWrite,
        fence: Fence,
        events: Sequence[GroupEvent] = (),
        keep_events: int = 0,
    ) -> Sequence[int]:
        for _ in range(self.turns):
            await asyncio.sleep(0)
        await self.gate.wait()
        return await super().append(group_id, records, fence, events, keep_events)


class UnaryContext:
    """Enough of a grpc.aio servicer context for a unary call made in-process."""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"

    def time_remaining(self) -> float | None:
        return None

    def code(self) -> Any:
        return None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AssertionError(f"the call was aborted: {code.name} {details}")


def unary_context() -> Any:
    """A context to pass to a unary handler (typed as grpc.aio's, which it imitates)."""
    return UnaryContext()


class StreamContext(UnaryContext):
    """A stream's context: `read` takes what the test sends, `write` keeps what the server sends."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.written: list[coordinator_pb2.MemberStreamResponse] = []
        self.wrote = asyncio.Event()
        self.status: tuple[grpc.StatusCode, str] | None = None

    async def read(self) -> Any:
        message = await self.inbox.get()
        return grpc.aio.EOF if message is None else message

    async def write(self, message: coordinator_pb2.MemberStreamResponse) -> None:
        self.written.append(message)
        self.wrote.set()

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.status = (code, details)
        raise grpc.aio.AbortError()


#: Answers after which the stream carries the member (as `GroupCoordinatorService` decides).
KEEPS_MEMBER = frozenset({common_pb2.NONE, common_pb2.COMPUTE_ASSIGNMENT})


class InProcessStream:
    """One MemberStream of `service`, served by its handler in a task."""

    def __init__(self, service: Any) -> None:
        self.context = StreamContext()
        sessions = set(service.streams.sessions)
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            service.MemberStream(None, self.context)
        )
        self._sessions_before = sessions
        self._hub = service.streams
        self.session: StreamSession | None = None
        self._seen = 0
        self.answers: dict[int, coordinator_pb2.StreamHeartbeatResponse] = {}
        self.nudges: list[coordinator_pb2.Nudge] = []
        #: Members whose heartbeats this stream carried.
        self.heard: set[str] = set()
        #: Members the stream answered as in the group (it may nudge them from then on).
        self.carried: set[str] = set()
        #: Nudges received for a member the stream had not answered as in the group before.
        self.unknown_nudges: list[coordinator_pb2.Nudge] = []
        self.broken = False

    @classmethod
    async def open(cls, service: Any) -> InProcessStream:
        stream = cls(service)
        await stream._until(lambda: bool(stream.context.written))  # the limits
        (stream.session,) = service.streams.sessions - stream._sessions_before
        return stream

    def _collect(self) -> None:
        for message in self.context.written[self._seen :]:
            for answer in message.responses:
                self.answers[answer.correlation_id] = answer
                kind = answer.WhichOneof("response")
                if kind is None:
                    continue  # refused by the stream itself: nothing was done
                response = getattr(answer, kind)
                if response.error_code in KEEPS_MEMBER and response.member_epoch >= 0 and response.member_id:
                    self.carried.add(response.member_id)
            for nudge in message.nudges:
                if nudge.member_id not in self.carried:
                    self.unknown_nudges.append(nudge)
            self.nudges.extend(message.nudges)
        self._seen = len(self.context.written)

    async def _until(self, done: Any, turns: int = 10_000) -> bool:
        for _ in range(turns):
            self._collect()
            if done():
                return True
            if self.task.done():
                self.broken = True
                return False
            self.context.wrote.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.01):
                    await self.context.wrote.wait()
        raise AssertionError("the stream did not answer")

    async def send_only(
        self, correlation_id: int, request: coordinator_pb2.ConsumerGroupHeartbeatRequest
    ) -> None:
        await self.send_batch([(correlation_id, request)])

    async def send_batch(
        self, items: Sequence[tuple[int, coordinator_pb2.ConsumerGroupHeartbeatRequest]]
    ) -> None:
        self.post_batch(items)

    def post_batch(self, items: Sequence[tuple[int, coordinator_pb2.ConsumerGroupHeartbeatRequest]]) -> None:
        """Heartbeats in one message, by correlation id."""
        message = coordinator_pb2.MemberStreamRequest()
        for correlation_id, request in items:
            self.heard.add(request.member_id)
            message.heartbeats.add(correlation_id=correlation_id, consumer=request)
        self.context.inbox.put_nowait(message)

    async def answer(self, correlation_id: int) -> coordinator_pb2.ConsumerGroupHeartbeatResponse | None:
        """The answer to a heartbeat sent, or None when the stream ended first. An item
        the stream refused itself (no heartbeat's answer) fails the test."""
        if not await self._until(lambda: correlation_id in self.answers):
            return None
        answer = self.answers.pop(correlation_id)
        assert answer.HasField("consumer"), answer
        return answer.consumer

    async def heartbeat(
        self, correlation_id: int, request: coordinator_pb2.ConsumerGroupHeartbeatRequest
    ) -> coordinator_pb2.ConsumerGroupHeartbeatResponse | None:
        """The answer, or None when the stream ended first."""
        await self.send_only(correlation_id, request)
        return await self.answer(correlation_id)

    async def flushed(self) -> None:
        """Until everything the stream queued is written and collected (a nudge is
        written up to COALESCE_S after it is queued) or the stream ended."""
        session = self.session
        assert session is not None
        for _ in range(1_000):
            if self.task.done() or (not session.pending and not session._nudges):
                break
            await asyncio.sleep(0.001)
        else:
            raise AssertionError("the stream did not write what it queued")
        self._collect()

    async def wait_for_nudges(self, within_s: float = 0.5) -> list[coordinator_pb2.Nudge]:
        """The nudges received, waiting up to `within_s` for a first one (none: [])."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                await self._until(lambda: bool(self.nudges))
        return self.take_nudges()

    def take_nudges(self) -> list[coordinator_pb2.Nudge]:
        self._collect()
        nudges, self.nudges = self.nudges, []
        return nudges

    async def close(self) -> None:
        """The stream breaks (its handler is cancelled, as when the connection drops)."""
        self.broken = True
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AbortError):
            await self.task

    async def fail(self, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        """The server ends the stream with `code` (as when it stops, or the client does
        not read): the handler aborts with it."""
        assert self.session is not None
        self.session.fail(StreamClosed(code, "failed by the test"))
        with contextlib.suppress(grpc.aio.AbortError):
            await self.task
        assert self.context.status is not None and self.context.status[0] == code
        self.broken = True
