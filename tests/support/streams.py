"""A raw MemberStream client over the generated stubs (no regroup client library).

`MemberStreamClient` opens `GroupCoordinator.MemberStream`, reads the first message
(the stream's limits), sends batches of heartbeats with correlation ids, matches each
answer to the future of its heartbeat and collects the nudges. Tests that need to
break the protocol on purpose (an item without a heartbeat, a correlation id twice)
send raw items with `send_items` and read every answer from `answers`.

`StreamCoordinatorStub` stands in for `coordinator_pb2_grpc.GroupCoordinatorStub`:
its `ConsumerGroupHeartbeat` and `ConnectGroupHeartbeat` go through one shared stream
(one per distinct call metadata, since a stream's principal is the one it was opened
with), every other RPC goes to the real stub. A heartbeat whose stream ends before it
is answered raises the stream's error (an `grpc.aio.AioRpcError`), as a unary call
that fails does; the next heartbeat opens a new stream.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeAlias

import grpc

from regroup.v1 import coordinator_pb2, coordinator_pb2_grpc

ConsumerRequest: TypeAlias = coordinator_pb2.ConsumerGroupHeartbeatRequest
ConnectRequest: TypeAlias = coordinator_pb2.ConnectGroupHeartbeatRequest
Heartbeat: TypeAlias = ConsumerRequest | ConnectRequest
Answer: TypeAlias = coordinator_pb2.StreamHeartbeatResponse
Nudge: TypeAlias = coordinator_pb2.Nudge
Metadata: TypeAlias = Sequence[tuple[str, str]]

#: How long a test waits for an answer or a nudge by default: far beyond what a local
#: server takes, short enough for a missing one to fail the test quickly.
WAIT_S = 5.0


class ItemRefused(Exception):
    """The stream refused an item itself (STREAM_LIMIT_REACHED or INVALID_REQUEST):
    a unary call would have been served, so a conformance test must not see this."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(f"item {answer.correlation_id} refused: {answer.error_code} {answer.error_message}")
        self.answer = answer


def item(correlation_id: int, heartbeat: Heartbeat | None) -> coordinator_pb2.StreamHeartbeat:
    """A stream item carrying `heartbeat` (None: an item with no heartbeat at all)."""
    if heartbeat is None:
        return coordinator_pb2.StreamHeartbeat(correlation_id=correlation_id)
    if isinstance(heartbeat, ConnectRequest):
        return coordinator_pb2.StreamHeartbeat(correlation_id=correlation_id, connect=heartbeat)
    return coordinator_pb2.StreamHeartbeat(correlation_id=correlation_id, consumer=heartbeat)


def unwrap(answer: Answer) -> Any:
    """The heartbeat response an answer carries (ItemRefused when the stream refused it)."""
    kind = answer.WhichOneof("response")
    if kind is None:
        raise ItemRefused(answer)
    return getattr(answer, kind)


class MemberStreamClient:
    """One MemberStream, read continuously in a task of its own."""

    def __init__(
        self, stub: coordinator_pb2_grpc.GroupCoordinatorStub, metadata: Metadata | None = None
    ) -> None:
        self._stub = stub
        self._metadata = metadata
        self._outbox: asyncio.Queue[coordinator_pb2.MemberStreamRequest | None] = asyncio.Queue()
        self._ids = itertools.count(1)
        self._waiting: dict[int, list[asyncio.Future[Answer]]] = {}
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._call: Any = None
        self.limits = coordinator_pb2.StreamLimits()
        #: Every server message after the first (the limits), in order.
        self.messages: list[coordinator_pb2.MemberStreamResponse] = []
        #: Every answer and every nudge received, in order.
        self.answers: list[Answer] = []
        self.nudges: list[Nudge] = []
        #: Set once the stream ended: its status code, and the error when not OK.
        self.code: grpc.StatusCode | None = None
        self.error: grpc.aio.AioRpcError | None = None

    @classmethod
    async def open(
        cls, stub: coordinator_pb2_grpc.GroupCoordinatorStub, metadata: Metadata | None = None
    ) -> MemberStreamClient:
        """Opens the stream and reads its first message, which must carry the limits."""
        client = cls(stub, metadata)
        client._call = stub.MemberStream(client._requests(), metadata=metadata)
        try:
            first = await asyncio.wait_for(client._call.read(), WAIT_S)
        except BaseException:
            client._call.cancel()  # also stops the task that sends its requests
            raise
        if first is grpc.aio.EOF:
            raise AssertionError("the stream ended before its first message")
        assert first.HasField("limits"), f"the first message carries no limits: {first}"
        assert not first.responses and not first.nudges, f"the first message carries more: {first}"
        client.limits = first.limits
        client._reader = asyncio.create_task(client._read())
        return client

    async def _requests(self) -> AsyncIterator[coordinator_pb2.MemberStreamRequest]:
        while True:
            message = await self._outbox.get()
            if message is None:
                return  # half-close
            yield message

    async def _read(self) -> None:
        try:
            while True:
                message = await self._call.read()
                if message is grpc.aio.EOF:
                    break
                self._receive(message)
            self.code = await self._call.code()
        except grpc.aio.AioRpcError as e:
            self.code, self.error = e.code(), e
        except asyncio.CancelledError:
            self.code = grpc.StatusCode.CANCELLED
            self.error = grpc.aio.AioRpcError(
                grpc.StatusCode.CANCELLED, details="the test cancelled the stream"
            )
        finally:
            self._fail_waiting()
            self._changed.set()

    def _receive(self, message: coordinator_pb2.MemberStreamResponse) -> None:
        assert not message.HasField("limits"), "limits come in the first message only"
        self.messages.append(message)
        # Nudges first: a test woken by an answer of this message sees them already.
        self.nudges.extend(message.nudges)
        for answer in message.responses:
            self.answers.append(answer)
            waiting = self._waiting.get(answer.correlation_id)
            if waiting:
                future = waiting.pop(0)
                if not waiting:
                    del self._waiting[answer.correlation_id]
                if not future.done():
                    future.set_result(answer)
        self._changed.set()

    def _fail_waiting(self) -> None:
        if self.error is not None:
            error = self.error
        else:  # ended OK: the server owed these answers (an OK end means all were answered)
            error = grpc.aio.AioRpcError(
                grpc.StatusCode.UNKNOWN,
                details=f"the stream ended with {self.code} and the heartbeat unanswered",
            )
        for futures in self._waiting.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)
        self._waiting.clear()

    @property
    def ended(self) -> bool:
        return self.code is not None

    def next_id(self) -> int:
        return next(self._ids)

    def send_items(self, items: Sequence[coordinator_pb2.StreamHeartbeat]) -> None:
        """Sends one message carrying `items` as they are (their answers land in `answers`)."""
        self._outbox.put_nowait(coordinator_pb2.MemberStreamRequest(heartbeats=items))

    def send(self, heartbeats: Sequence[Heartbeat]) -> list[asyncio.Future[Answer]]:
        """Sends one message with a fresh correlation id per heartbeat; the futures of
        their answers, in the order of `heartbeats`."""
        if self.ended:
            raise self.error or AssertionError(f"the stream ended with {self.code}")
        items = [item(self.next_id(), h) for h in heartbeats]
        futures = []
        for it in items:
            future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(it.correlation_id, []).append(future)
            futures.append(future)
        self.send_items(items)
        return futures

    async def batch(self, heartbeats: Sequence[Heartbeat], timeout: float = WAIT_S) -> list[Answer]:
        """Sends the heartbeats in one message and waits for all their answers."""
        return list(await asyncio.wait_for(asyncio.gather(*self.send(heartbeats)), timeout))

    async def heartbeat(self, heartbeat: Heartbeat, timeout: float = WAIT_S) -> Any:
        """One heartbeat through the stream: its response (ItemRefused for a refusal)."""
        (answer,) = await self.batch([heartbeat], timeout)
        return unwrap(answer)

    async def wait_until(self, condition: Callable[[], bool], timeout: float = WAIT_S) -> None:
        """Waits until `condition()` holds, checked after every message (and the end)."""
        async with asyncio.timeout(timeout):
            while not condition():
                if self.ended:
                    raise AssertionError(f"the stream ended ({self.code}) before the condition held")
                self._changed.clear()
                await self._changed.wait()

    async def nudge_for(self, member_id: str, since: int = 0, timeout: float = WAIT_S) -> Nudge:
        """The first nudge to `member_id` from index `since` of `nudges` on, waited for."""

        def found() -> Nudge | None:
            return next((n for n in self.nudges[since:] if n.member_id == member_id), None)

        await self.wait_until(lambda: found() is not None, timeout)
        nudge = found()
        assert nudge is not None
        return nudge

    def nudges_to(self, member_id: str, since: int = 0) -> list[Nudge]:
        return [n for n in self.nudges[since:] if n.member_id == member_id]

    async def finish(self, timeout: float = WAIT_S) -> grpc.StatusCode:
        """Half-closes the stream and waits for its end: its status code."""
        self._outbox.put_nowait(None)
        assert self._reader is not None
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        assert self.code is not None
        return self.code

    async def ended_with(self, timeout: float = WAIT_S) -> grpc.StatusCode:
        """Waits for the stream to end (without half-closing it): its status code."""
        assert self._reader is not None
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        assert self.code is not None
        return self.code

    async def close(self) -> None:
        """Ends the stream from the client side whatever its state (cancels it)."""
        if self._call is not None and not self._call.done():
            self._call.cancel()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


class StreamCoordinatorStub:
    """A GroupCoordinatorStub whose heartbeats go through a shared MemberStream."""

    def __init__(self, stub: coordinator_pb2_grpc.GroupCoordinatorStub) -> None:
        self._stub = stub
        self._streams: dict[tuple[tuple[str, str], ...], MemberStreamClient] = {}
        self._opening = asyncio.Lock()
        #: Every stream opened, for tests that look at their nudges.
        self.opened: list[MemberStreamClient] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    async def stream(self, metadata: Metadata | None = None) -> MemberStreamClient:
        """The open stream for `metadata`, opened now when there is none (or it ended)."""
        key = tuple(metadata or ())
        async with self._opening:
            current = self._streams.get(key)
            if current is None or current.ended:
                current = await MemberStreamClient.open(self._stub, metadata)
                self._streams[key] = current
                self.opened.append(current)
            return current

    async def _heartbeat(self, request: Heartbeat, metadata: Metadata | None, timeout: float | None) -> Any:
        stream = await self.stream(metadata)
        (future,) = stream.send([request])
        try:
            answer = await asyncio.wait_for(future, timeout if timeout is not None else 60)
        except TimeoutError:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.DEADLINE_EXCEEDED, details="no answer on the stream in time"
            ) from None
        return unwrap(answer)

    async def ConsumerGroupHeartbeat(
        self, request: ConsumerRequest, *, metadata: Metadata | None = None, timeout: float | None = None
    ) -> coordinator_pb2.ConsumerGroupHeartbeatResponse:
        response: coordinator_pb2.ConsumerGroupHeartbeatResponse = await self._heartbeat(
            request, metadata, timeout
        )
        return response

    async def ConnectGroupHeartbeat(
        self, request: ConnectRequest, *, metadata: Metadata | None = None, timeout: float | None = None
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        response: coordinator_pb2.ConnectGroupHeartbeatResponse = await self._heartbeat(
            request, metadata, timeout
        )
        return response

    async def close(self) -> None:
        for stream in self._streams.values():
            await stream.close()
        self._streams.clear()
