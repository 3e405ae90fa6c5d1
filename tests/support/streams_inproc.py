"""MemberStream served in-process: the servicer's handler driven through a fake servicer
context (no network), for tests of the stream logic on the in-memory store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import grpc

from regroup.reconciler import Record
from regroup.server.memstore import MemoryStore
from regroup.server.store import Fence, PreparedWrite
from regroup.v1 import coordinator_pb2


class GatedStore(MemoryStore):
    """A memory store whose writes take a turn of the event loop, as a database's do, and
    wait while `gate` is clear: heartbeats arriving meanwhile queue for the group's lock
    and are served as one batch (server/writebatch.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()

    async def append(self, group_id: str, records: Sequence[Record] | PreparedWrite, fence: Fence) -> None:
        await asyncio.sleep(0)
        await self.gate.wait()
        await super().append(group_id, records, fence)


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


class InProcessStream:
    """One MemberStream of `service`, served by its handler in a task."""

    def __init__(self, service: Any) -> None:
        self.context = StreamContext()
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            service.MemberStream(None, self.context)
        )
        self._seen = 0
        self.answers: dict[int, coordinator_pb2.StreamHeartbeatResponse] = {}
        self.nudges: list[coordinator_pb2.Nudge] = []
        #: Members whose heartbeats this stream carried.
        self.heard: set[str] = set()
        self.broken = False

    @classmethod
    async def open(cls, service: Any) -> InProcessStream:
        stream = cls(service)
        await stream._until(lambda: bool(stream.context.written))  # the limits
        return stream

    def _collect(self) -> None:
        for message in self.context.written[self._seen :]:
            for answer in message.responses:
                self.answers[answer.correlation_id] = answer
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
        self.heard.add(request.member_id)
        item = coordinator_pb2.StreamHeartbeat(correlation_id=correlation_id, consumer=request)
        await self.context.inbox.put(coordinator_pb2.MemberStreamRequest(heartbeats=[item]))

    async def heartbeat(
        self, correlation_id: int, request: coordinator_pb2.ConsumerGroupHeartbeatRequest
    ) -> coordinator_pb2.ConsumerGroupHeartbeatResponse | None:
        """The answer, or None when the stream ended first."""
        await self.send_only(correlation_id, request)
        if not await self._until(lambda: correlation_id in self.answers):
            return None
        answer = self.answers.pop(correlation_id)
        assert answer.HasField("consumer"), answer
        return answer.consumer

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
