"""The load generator: many protocol-following members in worker processes.

Each worker process drives a slice of the members over one gRPC channel. A
member follows the KIP-848 member protocol for real: it joins with a full
request, applies every assignment it receives (revoking at once what is no
longer listed and acknowledging that with an immediate heartbeat carrying
what it still owns), sends a full request after an error, and rejoins with
epoch 0 when fenced. Requests are serialised once and reused until the
member's state changes, so the generator spends its CPU on gRPC, not on
protobuf.

The parent talks to workers over a pipe: `LoadGenerator.run(command, **args)`
sends the same command to every worker and gathers their replies.

Commands:
  join      every member joins, then heartbeats in rounds until its view is settled
  rounds    every member heartbeats `n` times
  steady    closed loop: `concurrency` calls in flight, back to back, for `seconds`
  paced     every member heartbeats every `interval_ms` (acks at once) for `seconds`,
            recording every ownership change with a timestamp
  crash     the named members stop for good (no leave)
  leave     the named members leave (epoch -1)
  stop      end the worker
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

METHOD = "/regroup.v1.GroupCoordinator/ConsumerGroupHeartbeat"
FENCED = (110, 25)  # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
RETRIABLE = (15, 16, 14)  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, LOAD_IN_PROGRESS


@dataclass(frozen=True)
class MemberSpec:
    group_id: str
    member_id: str
    topics: tuple[str, ...]
    rebalance_timeout_ms: int = 60_000


def make_members(
    groups: int, members_per_group: int, topic_of_group: Any = None, first: int = 0
) -> list[MemberSpec]:
    """Groups g<first>.. (`groups` of them) with `members_per_group` members each (UUID ids);
    group g subscribes to topic t<g> unless `topic_of_group` says otherwise."""
    specs = []
    for g in range(first, first + groups):
        topics = (f"t{g:04d}",) if topic_of_group is None else tuple(topic_of_group(g))
        for _ in range(members_per_group):
            specs.append(MemberSpec(f"g{g:04d}", str(uuid.uuid4()), topics))
    return specs


@dataclass
class Member:
    spec: MemberSpec
    epoch: int = 0
    #: topic id -> partitions this member holds now.
    owned: dict[str, frozenset[int]] = field(default_factory=dict)
    #: The next request must carry the owned partitions (after a revocation).
    ack: bool = False
    #: The next request must be full (after joining, an error or a lost response).
    full: bool = True
    crashed: bool = False
    #: The heartbeat interval the coordinator asked for in its last answer (0: none yet).
    interval_ms: int = 0
    _request: bytes | None = None

    def request(self, pb: Any) -> bytes:
        if self._request is None:
            self._request = self._build(pb)
        return self._request

    def _build(self, pb: Any) -> bytes:
        s = self.spec
        req = pb.ConsumerGroupHeartbeatRequest(
            group_id=s.group_id, member_id=s.member_id, member_epoch=self.epoch
        )
        if self.epoch == 0 or self.full:
            req.rebalance_timeout_ms = s.rebalance_timeout_ms
            req.subscribed_topic_names.values.extend(s.topics)
        if self.epoch == 0 or self.full or self.ack:
            req.topic_partitions.SetInParent()
            if self.epoch != 0:
                for topic_id, partitions in sorted(self.owned.items()):
                    req.topic_partitions.topics.add(topic_id=topic_id, partitions=sorted(partitions))
        return bytes(req.SerializeToString())

    def handle(self, resp: Any) -> tuple[set[tuple[str, int]], set[tuple[str, int]]] | None:
        """Applies a response; returns (acquired, released) when what it holds changed."""
        self._request = None
        if resp.error_code in FENCED:
            released = {(t, p) for t, ps in self.owned.items() for p in ps}
            self.owned, self.epoch, self.full, self.ack = {}, 0, True, False
            return (set(), released) if released else None
        if resp.error_code != 0:
            self.full = True
            return None
        self.epoch = resp.member_epoch
        self.interval_ms = resp.heartbeat_interval_ms
        self.full = False
        self.ack = False
        if not resp.HasField("assignment"):
            return None
        new = {
            tp.topic_id: frozenset(tp.partitions) for tp in resp.assignment.topic_partitions if tp.partitions
        }
        old_pairs = {(t, p) for t, ps in self.owned.items() for p in ps}
        new_pairs = {(t, p) for t, ps in new.items() for p in ps}
        self.owned = new
        released = old_pairs - new_pairs
        # A revocation is acknowledged at once by sending what is still owned.
        self.ack = bool(released)
        if old_pairs == new_pairs:
            return None
        return new_pairs - old_pairs, released


class _Worker:
    def __init__(self, target: str, specs: Sequence[MemberSpec]) -> None:
        import grpc

        from regroup.v1 import coordinator_pb2

        self.pb = coordinator_pb2
        self.channel = grpc.aio.insecure_channel(
            target, options=[("grpc.max_receive_message_length", 64 << 20)]
        )
        self.call = self.channel.unary_unary(METHOD)
        self.members = {s.member_id: Member(s) for s in specs}
        #: (monotonic seconds, member id, acquired, released) for the paced command.
        self.events: list[tuple[float, str, list[tuple[str, int]], list[tuple[str, int]]]] = []
        self.calls = 0
        self.errors: dict[int, int] = {}
        #: gRPC status name -> calls that failed in transport.
        self.rpc_failures: dict[str, int] = {}
        self.rpc_error = grpc.aio.AioRpcError
        #: The longest interval the coordinator has asked for: its normal one.
        self.normal_interval_ms = 0
        from bench.streamload import StreamLoad

        self.streams = StreamLoad(self)

    async def beat(self, member: Member, latencies: list[int] | None = None) -> Any:
        started = time.perf_counter_ns()
        try:
            raw = await self.call(member.request(self.pb))
        except self.rpc_error as e:
            # A transport failure: a real member retries with a full request.
            self.rpc_failures[e.code().name] = self.rpc_failures.get(e.code().name, 0) + 1
            member.full = True
            member._request = None
            return None
        if latencies is not None:
            latencies.append((time.perf_counter_ns() - started) // 1000)
        resp = self.pb.ConsumerGroupHeartbeatResponse.FromString(raw)
        self.record(member, resp)
        return resp

    def record(self, member: Member, resp: Any) -> None:
        """Counts an answered heartbeat and applies it to the member."""
        self.calls += 1
        if resp.error_code:
            self.errors[resp.error_code] = self.errors.get(resp.error_code, 0) + 1
        change = member.handle(resp)
        if change is not None:
            acquired, released = change
            self.events.append((time.monotonic(), member.spec.member_id, sorted(acquired), sorted(released)))

    # Member streams (bench/streamload.py): one stream per worker process.

    async def stream_steady(self, seconds: float, batch: int = 100, inflight: int = 4) -> dict[str, Any]:
        return await self.streams.steady(seconds, batch, inflight)

    async def stream_paced(
        self, seconds: float, interval_ms: int, push: bool = True, member_ids: Sequence[str] | None = None
    ) -> dict[str, Any]:
        return await self.streams.paced(seconds, interval_ms, push, member_ids)

    async def stream_leave(self, member_ids: Sequence[str]) -> dict[str, Any]:
        return await self.streams.leave(member_ids)

    async def stream_control(self, push: bool | None = None, stop: bool = False) -> dict[str, Any]:
        return await self.streams.control(push, stop)

    def live(self) -> list[Member]:
        return [m for m in self.members.values() if not m.crashed]

    async def join(self, concurrency: int = 64, max_rounds: int = 50) -> dict[str, Any]:
        sem = asyncio.Semaphore(concurrency)

        async def settle(member: Member) -> None:
            async with sem:
                for _ in range(max_rounds):
                    await self.beat(member)
                    if member.epoch > 0 and not member.ack:
                        return

        started = time.monotonic()
        await asyncio.gather(*(settle(m) for m in self.live()))
        return {"seconds": time.monotonic() - started, "joined": sum(m.epoch > 0 for m in self.live())}

    async def rounds(self, n: int = 1, concurrency: int = 64) -> dict[str, Any]:
        sem = asyncio.Semaphore(concurrency)

        async def go(member: Member) -> None:
            async with sem:
                await self.beat(member)
                while member.ack:  # acknowledge a revocation at once
                    await self.beat(member)

        for _ in range(n):
            await asyncio.gather(*(go(m) for m in self.live()))
        return {"calls": self.calls}

    async def steady(self, seconds: float, concurrency: int = 64) -> dict[str, Any]:
        members = self.live()
        lanes = [members[i::concurrency] for i in range(min(concurrency, len(members)))]
        latencies: list[int] = []
        deadline = time.monotonic() + seconds
        calls_before = self.calls

        async def lane(mine: list[Member]) -> None:
            i = 0
            while time.monotonic() < deadline:
                member = mine[i % len(mine)]
                i += 1
                await self.beat(member, latencies)
                while member.ack:
                    await self.beat(member, latencies)

        started = time.monotonic()
        cpu = time.process_time()
        await asyncio.gather(*(lane(m) for m in lanes))
        return {
            "calls": self.calls - calls_before,
            "seconds": time.monotonic() - started,
            "client_cpu": time.process_time() - cpu,
            "latencies_us": latencies,
            "errors": dict(self.errors),
            "rpc_failures": dict(self.rpc_failures),
        }

    async def paced(
        self,
        seconds: float,
        interval_ms: int,
        member_ids: Sequence[str] | None = None,
        latencies: bool = False,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        interval = interval_ms / 1000
        calls_before = self.calls
        recorded: list[int] | None = [] if latencies else None

        async def loop(member: Member, offset: float) -> None:
            await asyncio.sleep(offset)
            while time.monotonic() < deadline and not member.crashed:
                await self.beat(member, recorded)
                while member.ack and not member.crashed:
                    await self.beat(member, recorded)
                # Like a real member: when the coordinator asks for a shorter interval than
                # its normal one (a member waiting for partitions), come back that much sooner.
                self.normal_interval_ms = max(self.normal_interval_ms, member.interval_ms)
                wait = interval
                if 0 < member.interval_ms < self.normal_interval_ms:
                    wait = interval * member.interval_ms / self.normal_interval_ms
                await asyncio.sleep(wait)

        members = self.live()
        if member_ids is not None:
            # Only these (a member added to a group that is already heartbeating): a
            # second loop for everyone would double their heartbeats and start the
            # newcomers up to an interval late, behind the others' spread-out offsets.
            wanted = set(member_ids)
            members = [m for m in members if m.spec.member_id in wanted]
        await asyncio.gather(*(loop(m, interval * i / max(1, len(members))) for i, m in enumerate(members)))
        return {"calls": self.calls - calls_before, "latencies_us": recorded or []}

    async def churn(
        self, group_id: str, topics: Sequence[str], seconds: float, period_ms: int
    ) -> dict[str, Any]:
        """A short-lived member joins, then leaves, every `period_ms`: each bumps the group epoch."""
        deadline = time.monotonic() + seconds
        cycles = 0
        while time.monotonic() < deadline:
            member_id = str(uuid.uuid4())
            join = self.pb.ConsumerGroupHeartbeatRequest(
                group_id=group_id, member_id=member_id, member_epoch=0, rebalance_timeout_ms=60_000
            )
            join.subscribed_topic_names.values.extend(topics)
            join.topic_partitions.SetInParent()
            await self.call(join.SerializeToString())
            await asyncio.sleep(period_ms / 2000)
            leave = self.pb.ConsumerGroupHeartbeatRequest(
                group_id=group_id, member_id=member_id, member_epoch=-1
            )
            await self.call(leave.SerializeToString())
            await asyncio.sleep(period_ms / 2000)
            cycles += 1
        return {"cycles": cycles}

    async def stats(self) -> dict[str, Any]:
        return {"calls": self.calls, "errors": dict(self.errors), "rpc_failures": dict(self.rpc_failures)}

    def take_events(self) -> list[Any]:
        events, self.events = self.events, []
        return events

    async def crash(self, member_ids: Sequence[str]) -> dict[str, Any]:
        for member_id in member_ids:
            member = self.members.get(member_id)
            if member is not None:
                member.crashed = True
                if member.owned:
                    released = sorted((t, p) for t, ps in member.owned.items() for p in ps)
                    self.events.append((time.monotonic(), member_id, [], released))
                member.owned = {}
        return {}

    async def leave(self, member_ids: Sequence[str]) -> dict[str, Any]:
        for member_id in member_ids:
            member = self.members.get(member_id)
            if member is None or member.crashed:
                continue
            req = self.pb.ConsumerGroupHeartbeatRequest(
                group_id=member.spec.group_id, member_id=member_id, member_epoch=-1
            )
            if member.owned:
                released = sorted((t, p) for t, ps in member.owned.items() for p in ps)
                self.events.append((time.monotonic(), member_id, [], released))
            member.owned = {}
            member.crashed = True
            await self.call(req.SerializeToString())
        return {}

    async def add(self, specs: Sequence[MemberSpec]) -> dict[str, Any]:
        for spec in specs:
            self.members[spec.member_id] = Member(spec)
        return {}


async def _serve(
    conn: multiprocessing.connection.Connection, target: str, specs: Sequence[MemberSpec]
) -> None:
    """Runs commands as tasks so that a long one (paced) does not block others (crash)."""
    worker = _Worker(target, specs)
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def execute(seq: int, command: str, args: dict[str, Any]) -> None:
        try:
            if command == "events":
                result: dict[str, Any] = {"events": worker.take_events()}
            else:
                result = await getattr(worker, command)(**args)
        except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
            result = {"error": f"{type(e).__name__}: {e}"}
        conn.send((seq, result))

    try:
        while True:
            seq, command, args = await loop.run_in_executor(None, conn.recv)
            if command == "stop":
                for task in tasks:
                    task.cancel()
                conn.send((seq, {"events": worker.take_events(), "pid": os.getpid()}))
                return
            task = asyncio.create_task(execute(seq, command, args))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        await worker.channel.close()


def _worker_main(
    conn: multiprocessing.connection.Connection, target: str, specs: Sequence[MemberSpec]
) -> None:
    try:
        import uvloop

        uvloop.run(_serve(conn, target, specs))
    except ImportError:  # pragma: no cover
        asyncio.run(_serve(conn, target, specs))


class LoadGenerator:
    """`processes` worker processes sharing `specs` between them."""

    def __init__(self, target: str, specs: Sequence[MemberSpec], processes: int = 2) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conns: list[multiprocessing.connection.Connection] = []
        self._procs = []
        self._seq = 0
        #: Replies that arrived while waiting for another command: (worker, seq) -> reply.
        self._replies: dict[tuple[int, int], dict[str, Any]] = {}
        self.slices = [list(specs[i::processes]) for i in range(processes)]
        for piece in self.slices:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(child, target, piece), daemon=True)
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.pid is not None]

    def start(self, command: str, **args: Any) -> int:
        """Sends `command` to every worker without waiting; `wait(seq)` collects the replies."""
        self._seq += 1
        for conn in self._conns:
            conn.send((self._seq, command, args))
        return self._seq

    def wait(self, seq: int) -> list[dict[str, Any]]:
        replies = []
        for i, conn in enumerate(self._conns):
            while (i, seq) not in self._replies:
                got_seq, result = conn.recv()
                self._replies[(i, got_seq)] = result
            replies.append(self._replies.pop((i, seq)))
        for reply in replies:
            if "error" in reply:
                raise RuntimeError(f"load generator command {seq} failed: {reply['error']}")
        return replies

    def run(self, command: str, **args: Any) -> list[dict[str, Any]]:
        return self.wait(self.start(command, **args))

    def run_on(self, member_ids: Sequence[str], command: str) -> list[dict[str, Any]]:
        """Sends `command` (crash or leave) for the members to the workers that hold them."""
        self._seq += 1
        wanted = set(member_ids)
        for conn, piece in zip(self._conns, self.slices, strict=True):
            conn.send(
                (self._seq, command, {"member_ids": [s.member_id for s in piece if s.member_id in wanted]})
            )
        return self.wait(self._seq)

    def add(self, specs: Sequence[MemberSpec]) -> None:
        """Adds members, round robin over the workers; a running paced command ignores them."""
        for i, spec in enumerate(specs):
            self.slices[i % len(self.slices)].append(spec)
        self._seq += 1
        for i, conn in enumerate(self._conns):
            conn.send((self._seq, "add", {"specs": list(specs[i :: len(self._conns)])}))
        self.wait(self._seq)

    def calls(self) -> int:
        """Heartbeats sent so far by every worker."""
        return sum(reply["calls"] for reply in self.run("stats"))

    def events(self) -> list[Any]:
        return [e for reply in self.run("events") for e in reply["events"]]

    def close(self) -> list[Any]:
        events = []
        self._seq += 1
        for conn in self._conns:
            try:
                conn.send((self._seq, "stop", {}))
                while True:
                    got_seq, result = conn.recv()
                    if got_seq == self._seq:
                        events.extend(result["events"])
                        break
            except (BrokenPipeError, EOFError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        return events
