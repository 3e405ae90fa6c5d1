"""The load generator's member streams: each worker process opens one MemberStream (as
the Python client does, one per process and coordinator) and sends its members'
heartbeats on it, reusing the members of bench/loadgen.py (same protocol, same
serialised requests).

Commands (methods of `StreamLoad`, reached through `_Worker`):
  stream_steady   closed loop of no-change heartbeats in batches of `batch`, with
                  `inflight` batches outstanding, for `seconds`
  stream_paced    every member heartbeats every `interval_ms` on the stream; with `push`
                  a nudge makes the member heartbeat at once (acks at once either way),
                  recording ownership changes with timestamps
  stream_leave    the named members leave on the stream; returns when each was sent
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.loadgen import Member, _Worker

STREAM_METHOD = "/regroup.v1.GroupCoordinator/MemberStream"


class StreamLoad:
    def __init__(self, worker: _Worker) -> None:
        self.worker = worker
        self.pb = worker.pb
        self.call: Any = None
        self.reader: asyncio.Task[None] | None = None
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.next_id = 0
        self.outbox: list[bytes] = []
        self.flush_scheduled = False
        #: member id -> set when the coordinator nudged it.
        self.nudged: dict[str, asyncio.Event] = {}
        self.nudges = 0
        self.batches = 0
        self.limits: Any = None
        #: Whether paced members heartbeat at once when nudged (changed by `control`).
        self.push = True
        #: Set to end the paced loops early.
        self.stop_paced = asyncio.Event()
        #: One write at a time on a call; the writes under way (kept alive).
        self.write_lock = asyncio.Lock()
        self.writes: set[asyncio.Future[None]] = set()

    async def open(self) -> None:
        if self.call is not None:
            return
        pb = self.pb
        method = self.worker.channel.stream_stream(
            STREAM_METHOD,
            request_serializer=lambda b: b,  # pre-serialised MemberStreamRequest bytes
            response_deserializer=pb.MemberStreamResponse.FromString,
        )
        self.call = method()
        first = await self.call.read()
        self.limits = first.limits
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        call = self.call
        while True:
            message = await call.read()
            if message is None or not hasattr(message, "responses"):
                break
            for answer in message.responses:
                future = self.pending.pop(answer.correlation_id, None)
                if future is not None and not future.done():
                    future.set_result(answer)
            for nudge in message.nudges:
                self.nudges += 1
                event = self.nudged.get(nudge.member_id)
                if event is not None:
                    event.set()

    def _item(self, correlation_id: int, request: bytes) -> bytes:
        # A StreamHeartbeat is field 1 (varint) and field 2 (the consumer request, bytes):
        # built by hand so that the member's serialised request is reused as it is.
        return b"\x08" + _varint(correlation_id) + b"\x12" + _varint(len(request)) + request

    def _wrap(self, items: Sequence[bytes]) -> bytes:
        # MemberStreamRequest: repeated field 1 (StreamHeartbeat).
        return b"".join(b"\x0a" + _varint(len(item)) + item for item in items)

    async def send(self, member: Member) -> Any:
        """One heartbeat on the stream (batched with those queued in this turn of the loop)."""
        self.next_id += 1
        correlation_id = self.next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[correlation_id] = future
        self.outbox.append(self._item(correlation_id, member.request(self.pb)))
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        answer = await future
        return answer.consumer

    def _flush(self) -> None:
        self.flush_scheduled = False
        items, self.outbox = self.outbox, []
        limit = self.limits.max_batch if self.limits is not None else 1000
        for start in range(0, len(items), limit):
            self.batches += 1
            task = asyncio.ensure_future(self._write(self._wrap(items[start : start + limit])))
            self.writes.add(task)
            task.add_done_callback(self.writes.discard)

    async def _write(self, message: bytes) -> None:
        async with self.write_lock:
            await self.call.write(message)

    async def beat(self, member: Member, latencies: list[int] | None = None) -> Any:
        started = time.perf_counter_ns()
        resp = await self.send(member)
        if latencies is not None:
            latencies.append((time.perf_counter_ns() - started) // 1000)
        self.worker.record(member, resp)
        return resp

    async def steady(self, seconds: float, batch: int, inflight: int) -> dict[str, Any]:
        """No-change heartbeats in batches of exactly `batch`, `inflight` batches at once."""
        await self.open()
        worker = self.worker
        members = worker.live()
        deadline = time.monotonic() + seconds
        calls_before = worker.calls
        latencies: list[int] = []
        position = 0

        async def lane() -> None:
            nonlocal position
            while time.monotonic() < deadline:
                chosen = [members[(position + i) % len(members)] for i in range(batch)]
                position += batch
                started = time.perf_counter_ns()
                futures = []
                items = []
                for member in chosen:
                    self.next_id += 1
                    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                    self.pending[self.next_id] = future
                    futures.append(future)
                    items.append(self._item(self.next_id, member.request(self.pb)))
                self.batches += 1
                await self._write(self._wrap(items))
                answers = await asyncio.gather(*futures)
                took = (time.perf_counter_ns() - started) // 1000
                for member, answer in zip(chosen, answers, strict=True):
                    worker.record(member, answer.consumer)
                    latencies.append(took)
                for member in chosen:
                    while member.ack:
                        await self.beat(member)

        started = time.monotonic()
        cpu = time.process_time()
        await asyncio.gather(*(lane() for _ in range(inflight)))
        return {
            "calls": worker.calls - calls_before,
            "seconds": time.monotonic() - started,
            "client_cpu": time.process_time() - cpu,
            "latencies_us": latencies,
            "errors": dict(worker.errors),
            "batches": self.batches,
        }

    async def paced(
        self, seconds: float, interval_ms: int, push: bool, member_ids: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Every member heartbeats every `interval_ms` on the stream, acknowledging
        revocations at once; with `push`, at once when nudged too. Returns when each
        member of `member_ids` sent its first heartbeat (join) in `joined_at`."""
        await self.open()
        worker = self.worker
        deadline = time.monotonic() + seconds
        interval = interval_ms / 1000
        calls_before = worker.calls
        joined_at: dict[str, float] = {}
        if member_ids is None:
            self.push = push
            self.stop_paced.clear()

        async def loop(member: Member, offset: float) -> None:
            event = self.nudged.setdefault(member.spec.member_id, asyncio.Event())
            await asyncio.sleep(offset)
            while time.monotonic() < deadline and not member.crashed and not self.stop_paced.is_set():
                event.clear()
                if member.epoch == 0 and member.spec.member_id not in joined_at:
                    joined_at[member.spec.member_id] = time.monotonic()
                await self.beat(member)
                while member.ack and not member.crashed:
                    await self.beat(member)
                worker.normal_interval_ms = max(worker.normal_interval_ms, member.interval_ms)
                wait = interval
                if 0 < member.interval_ms < worker.normal_interval_ms:
                    wait = interval * member.interval_ms / worker.normal_interval_ms
                if self.push:
                    waits = [event.wait(), self.stop_paced.wait()]
                else:
                    waits = [self.stop_paced.wait()]
                tasks = [asyncio.ensure_future(w) for w in waits]
                await asyncio.wait(tasks, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                for task in tasks:
                    task.cancel()

        members = worker.live()
        if member_ids is not None:
            wanted = set(member_ids)
            members = [m for m in members if m.spec.member_id in wanted]
            offsets = [0.0] * len(members)
        else:
            offsets = [interval * i / max(1, len(members)) for i in range(len(members))]
        await asyncio.gather(*(loop(m, o) for m, o in zip(members, offsets, strict=True)))
        return {"calls": worker.calls - calls_before, "joined_at": joined_at, "nudges": self.nudges}

    async def control(self, push: bool | None = None, stop: bool = False) -> dict[str, Any]:
        """Turns the reaction to nudges on or off, or ends the paced loops."""
        if push is not None:
            self.push = push
        if stop:
            self.stop_paced.set()
        return {"nudges": self.nudges}

    async def leave(self, member_ids: Sequence[str]) -> dict[str, Any]:
        """The members leave (epoch -1) on the stream; returns when each leave was sent."""
        await self.open()
        left_at: dict[str, float] = {}
        refused: dict[str, str] = {}
        for member_id in member_ids:
            member = self.worker.members.get(member_id)
            if member is None or member.crashed:
                continue
            if member.owned:
                released = sorted((t, p) for t, ps in member.owned.items() for p in ps)
                self.worker.events.append((time.monotonic(), member_id, [], released))
            member.owned = {}
            member.crashed = True
            member.epoch, member.full, member.ack = -1, False, False
            member._request = None
            left_at[member_id] = time.monotonic()
            answer = await self.send(member)
            if answer.error_code:
                refused[member_id] = f"{answer.error_code}: {answer.error_message}"
        return {"left_at": left_at, "refused": refused}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
