"""The chaos harness: replica processes on one Postgres, groups of real client members,
faults injected at random, and the safety checks that must hold throughout.

Replicas are `python -m regroup.server` processes (replica-1..3) on one database. Members
are `regroup.client.GroupMember`s in this process, each bootstrapped at one replica (in
turn), half of them asking FindCoordinator first. Every heartbeat answer passes through an
interceptor that checks it, and every listener callback through an ownership registry.

Faults, one at a time, at random moments:
- kill: SIGKILL of a replica; it stays down a moment, then starts again. The others take its
  shards once its lease expires.
- pause: SIGSTOP, then SIGCONT after up to three leases (a stalled zombie: its shards are
  taken over while it sleeps, and it must not answer for them once it wakes).
- cut: the replica loses Postgres for up to three leases (its role may not log in, its
  connections are ended) while it goes on answering calls: once its lease is past, it must
  refuse even heartbeats that change nothing, since another replica has its shards.
- restart: SIGTERM (a graceful stop hands the shards over at once), then a new start.
After a pause or a cut longer than the lease, a member of one of the zombie's groups leaves
through another replica, and the zombie gets that member's heartbeat: answering it would be
answering for a shard it lost.
Beside the faults, members leave (close) and new ones join, so that partitions move while
replicas fail.

Checked:
- after every heartbeat answer and every callback: no partition held by two members;
- no zombie answers its probe;
- no member fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), none lost
  its partitions (on_partitions_lost), no acknowledged member epoch went backwards. The one
  fencing the protocol itself prescribes is counted, not a violation: KIP-848 forgives one lost
  answer (a member may repeat its previous epoch), not two. Any write of the member after the
  first lost answer, even one that keeps its epoch (a retry at the previous epoch that is
  accepted and leaves the member revoking or waiting), moves the previous epoch on, as Kafka's
  `updateMemberEpoch` does. So a member that repeats an epoch after at least two of its calls
  at that epoch may have moved it on unseen (calls without an answer, and answers it never
  applied: a member stream's answer that came after the member stopped waiting for it) is
  fenced with FENCED_MEMBER_EPOCH and rejoins. Such a late answer (a paused replica answers the
  calls queued on its member stream when it wakes) is dropped by the client: it fences nobody and
  moves no epoch, so it is only counted, and checked for two owners;
- at the end, with every replica up again: every group Stable at its target, every
  partition of its topic owned by exactly one member.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import grpc

from regroup.client import GroupMember, MemberOptions, TopicPartition
from regroup.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.support.ownership import OwnershipRegistry

#: How long after its lease a paused replica's groups are surely taken over by another replica
#: (one quick lease round of 50 ms and loading the groups, 75 - 130 ms in benchmark 8).
ZOMBIE_PROBE_AFTER_S = 0.5
LEAVE_EPOCH = -1
FENCING = {common_pb2.FENCED_MEMBER_EPOCH, common_pb2.UNKNOWN_MEMBER_ID, common_pb2.STALE_MEMBER_EPOCH}


@dataclass(frozen=True)
class ChaosSettings:
    """What one run does; REGROUP_CHAOS_SECONDS and REGROUP_CHAOS_SEED override."""

    seconds: float = 40.0
    seed: int = 0
    replicas: int = 3
    groups: int = 5
    members_per_group: int = 3
    partitions: int = 12
    lease_ms: int = 2_000
    heartbeat_interval_ms: int = 300
    # Long enough to outlive a failover and a pause, so that any fencing is the coordinator's fault.
    session_timeout_ms: int = 25_000
    # A call to a stalled replica is given up after this, and retried elsewhere.
    request_timeout_ms: int = 3_000
    # From the last fault until every group must be Stable at its target.
    converge_s: float = 30.0

    @classmethod
    def from_environment(cls) -> ChaosSettings:
        seconds = float(os.environ.get("REGROUP_CHAOS_SECONDS", cls.seconds))
        seed = int(os.environ.get("REGROUP_CHAOS_SEED", random.randrange(1 << 31)))
        return cls(seconds=seconds, seed=seed)


#: The faults, drawn with equal chances.
FAULTS = ("kill", "pause", "cut", "restart")


def _role(index: int) -> str:
    return f"chaos_replica_{index + 1}"


def _as_role(dsn: str, role: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


class Replica:
    """One `python -m regroup.server` process, started again as often as a fault asks."""

    def __init__(self, name: str, port: int, dsn: str, settings: ChaosSettings, logs: Path) -> None:
        self.name = name
        self.address = f"127.0.0.1:{port}"
        self.port = port
        self._env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
        self._env.update(
            DATABASE_URL=dsn,
            REGROUP_LISTEN=self.address,
            REGROUP_REPLICA_ID=name,
            REGROUP_LEASE_MS=str(settings.lease_ms),
            REGROUP_HEARTBEAT_INTERVAL_MS=str(settings.heartbeat_interval_ms),
            REGROUP_SESSION_TIMEOUT_MS=str(settings.session_timeout_ms),
            REGROUP_ASSIGNMENT_INTERVAL_MS="0",
            REGROUP_SHUTDOWN_GRACE_S="1",
            REGROUP_LOG_LEVEL="info",
            REGROUP_METRICS_LISTEN="off",
            PYTHONUNBUFFERED="1",
        )
        self._log_path = logs / f"{name}.log"
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        log = self._log_path.open("ab")
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "regroup.server",
                env=self._env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self.starts += 1

    async def wait_listening(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.running, f"{self.name} exited while starting:\n{self.log_tail()}"
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return
            assert time.monotonic() < deadline, f"{self.name} never listened:\n{self.log_tail()}"
            await asyncio.sleep(0.05)

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)

    async def wait_exit(self, timeout_s: float) -> int:
        assert self.process is not None
        return await asyncio.wait_for(self.process.wait(), timeout_s)

    async def kill(self) -> None:
        if self.running:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            await self.wait_exit(10)

    def log_tail(self, lines: int = 30) -> str:
        if not self._log_path.exists():
            return "(no log)"
        return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Violations:
    """Everything that must not happen, with what was seen when it did."""

    log: Callable[[str], None]
    found: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.found.append(text)
        self.log(f"VIOLATION {text}")


class HeartbeatWatch(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Sees every heartbeat answer of every member, unary or on a member stream (`stream`,
    its twin for stream-stream calls: grpc applies an interceptor object to one kind of
    call only): counts them, and checks that no member was fenced, that no acknowledged
    epoch went backwards, and that no partition has two owners at that moment."""

    def __init__(self, registry: OwnershipRegistry, violations: Violations) -> None:
        self.registry = registry
        self.violations = violations
        self.answers: Counter[str] = Counter()
        self.transport_errors: Counter[str] = Counter()
        self.epochs: dict[str, int] = {}
        #: Per member and epoch: its calls at that epoch that may have moved it on at the
        #: coordinator without the member seeing it (see `unseen`). A member's epochs only grow,
        #: so a count matters only while the member repeats that epoch.
        self.unseen_at: Counter[tuple[str, int]] = Counter()
        #: Per member: its call on a member stream still waiting for an answer, (stream, id).
        self._waiting: dict[str, tuple[int, int]] = {}
        #: Stream calls a member stopped waiting for (it sent its next call): counted unseen
        #: once, when the next call went out, not again when their answer comes late.
        self._abandoned: set[tuple[int, int]] = set()
        #: Answers to calls their member had given up, which its client dropped.
        self.late_answers = 0
        #: Per member: its last calls and their outcomes, told with a violation.
        self.calls: dict[str, deque[str]] = {}
        self._started = time.monotonic()
        #: Fencings after two lost answers (the protocol's own; see the module's docs), by member.
        self.fenced_after_lost: Counter[str] = Counter()
        #: Member streams opened, and heartbeats answered on them.
        self.streams = 0
        self.streamed = 0
        self.stream = _StreamWatch(self)

    async def intercept_unary_unary(
        self, continuation: Callable[..., Awaitable[Any]], details: Any, request: Any
    ) -> Any:
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if not method.endswith("/ConsumerGroupHeartbeat"):
            return call
        self.sending(request, "unary")
        try:
            response = await call
        except grpc.aio.AioRpcError as err:
            self.transport_errors[err.code().name] += 1
            self.unseen(request, f"no answer ({err.code().name})")
            return call
        self.check(request, response)
        return call

    async def watch_stream(
        self, continuation: Callable[..., Awaitable[Any]], details: Any, request_iterator: Any
    ) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if not method.endswith("/MemberStream"):
            return await continuation(details, request_iterator)
        sent: dict[int, coordinator_pb2.ConsumerGroupHeartbeatRequest] = {}
        self.streams += 1
        stream = self.streams

        async def requests() -> AsyncIterator[Any]:
            async for message in request_iterator:
                for item in message.heartbeats:
                    if item.HasField("consumer"):
                        sent[item.correlation_id] = item.consumer
                        self.sending(item.consumer, f"stream {stream}", (stream, item.correlation_id))
                yield message

        call = await continuation(details, requests())

        async def responses() -> AsyncIterator[Any]:
            try:
                async for message in call:
                    for answer in message.responses:
                        request = sent.pop(answer.correlation_id, None)
                        if request is not None and answer.HasField("consumer"):
                            self.streamed += 1
                            self.check(request, answer.consumer, (stream, answer.correlation_id))
                    yield message
            except grpc.aio.AioRpcError as err:
                self.transport_errors[f"stream {err.code().name}"] += 1
                for correlation_id, request in sent.items():  # their answers are lost with the stream
                    if self._answered((stream, correlation_id), request):
                        self.unseen(request, f"no answer (stream {err.code().name})")
                sent.clear()
                raise

        return responses()

    def sending(
        self,
        request: coordinator_pb2.ConsumerGroupHeartbeatRequest,
        via: str,
        stream_call: tuple[int, int] | None = None,
    ) -> None:
        """A member's call goes out. The client sends one call at a time, so a stream call of
        the member still waiting for its answer was given up (the member's time for it ran
        out): it may have moved the member on unseen."""
        member = f"{request.group_id}/{request.member_id}"
        given_up = self._waiting.pop(member, None)
        if given_up is not None:
            self._abandoned.add(given_up)
            self.unseen(request, "gave up waiting for the previous call")
        if stream_call is not None:
            self._waiting[member] = stream_call
        self._note(member, f"sent at epoch {request.member_epoch} ({via})")

    def _answered(self, stream_call: tuple[int, int], request: Any) -> bool:
        """Whether this stream call's answer is one the member waited for (else it was counted
        when the member gave it up)."""
        member = f"{request.group_id}/{request.member_id}"
        if self._waiting.get(member) == stream_call:
            del self._waiting[member]
        if stream_call in self._abandoned:
            self._abandoned.discard(stream_call)
            return False
        return True

    def check(
        self,
        request: coordinator_pb2.ConsumerGroupHeartbeatRequest,
        response: coordinator_pb2.ConsumerGroupHeartbeatResponse,
        stream_call: tuple[int, int] | None = None,
    ) -> None:
        code = response.error_code
        self.answers[common_pb2.ErrorCode.Name(code)] += 1  # type: ignore[arg-type]
        member = f"{request.group_id}/{request.member_id}"
        waited = stream_call is None or self._answered(stream_call, request)
        lost = self.unseen_at[member, request.member_epoch]
        outcome = f"{common_pb2.ErrorCode.Name(code)} at epoch {response.member_epoch}"  # type: ignore[arg-type]
        self._note(member, f"answered {outcome}" if waited else f"late answer {outcome}")
        if not waited:
            # The answer to a call the member gave up (a replica that slept through it
            # answers when it wakes): the client drops it, so it fences nobody and moves
            # no epoch. Only the ownership check below applies.
            self.late_answers += 1
            self._check_owners()
            return
        if code == common_pb2.NONE and response.member_epoch != request.member_epoch:
            # Moved on: the member's next call carries the new epoch if it applied the answer.
            self.unseen(request)
        if code in FENCING and request.member_epoch > 0 and self._lost_two_answers(lost, response):
            self.fenced_after_lost[member] += 1
            self.violations.log(
                f"{member} fenced at epoch {request.member_epoch} after {lost} calls at it moved "
                f"unseen (the protocol's own). Its last calls: {'; '.join(self.calls.get(member, ()))}"
            )
        elif code in FENCING and request.member_epoch > 0:
            self.violations.add(
                f"{member} fenced at epoch {request.member_epoch} ({lost} calls at it moved "
                f"unseen): {common_pb2.ErrorCode.Name(code)} {response.error_message}"  # type: ignore[arg-type]
                f" Its last calls: {'; '.join(self.calls.get(member, ()))}"
            )
        if code == common_pb2.NONE and request.member_epoch >= 0:
            before = self.epochs.get(member, 0)
            if response.member_epoch < before:
                self.violations.add(f"{member} epoch went back from {before} to {response.member_epoch}")
            self.epochs[member] = max(before, response.member_epoch)
        self._check_owners()

    def _check_owners(self) -> None:
        for v in self.registry.violations:
            if v not in self.violations.found:
                self.violations.add(f"two owners: {v}")
        self.registry.violations.clear()

    def unseen(self, request: coordinator_pb2.ConsumerGroupHeartbeatRequest, why: str = "") -> None:
        """Counts a call that may have moved the member on at the coordinator unseen: one that
        ended without an answer, or one answered with a new epoch (unseen if the member's next
        call repeats the old epoch: it never applied that answer)."""
        member = f"{request.group_id}/{request.member_id}"
        self.unseen_at[member, request.member_epoch] += 1
        if why:
            self._note(member, why)

    def _note(self, member: str, what: str) -> None:
        calls = self.calls.setdefault(member, deque(maxlen=8))
        calls.append(f"{time.monotonic() - self._started:.2f} s {what}")

    @staticmethod
    def _lost_two_answers(lost: int, response: coordinator_pb2.ConsumerGroupHeartbeatResponse) -> bool:
        """FENCED_MEMBER_EPOCH for an epoch smaller than the coordinator's, after at least two
        calls at that epoch that may have moved the member on unseen."""
        if response.error_code != common_pb2.FENCED_MEMBER_EPOCH or lost < 2:
            return False
        return (
            re.search(r"smaller member epoch \(\d+\) than the one known", response.error_message) is not None
        )


class _StreamWatch(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, watch: HeartbeatWatch) -> None:
        self.watch = watch

    async def intercept_stream_stream(
        self, continuation: Callable[..., Awaitable[Any]], details: Any, request_iterator: Any
    ) -> Any:
        return await self.watch.watch_stream(continuation, details, request_iterator)


@dataclass
class Counts:
    faults: Counter[str] = field(default_factory=Counter)
    zombie_probes: Counter[str] = field(default_factory=Counter)
    joins: int = 0
    leaves: int = 0


class Chaos:
    """One run: replicas, groups, members, faults, checks."""

    def __init__(self, dsn: str, ports: list[int], settings: ChaosSettings, logs: Path) -> None:
        self.settings = settings
        self.random = random.Random(settings.seed)
        self.dsn = dsn
        #: Each replica logs in as a role of its own, so that one replica can lose the database.
        self.replicas = [
            Replica(f"replica-{i + 1}", port, _as_role(dsn, _role(i)), settings, logs)
            for i, port in enumerate(ports)
        ]
        self.registry = OwnershipRegistry()
        self.violations = Violations(self.log)
        self.watch = HeartbeatWatch(self.registry, self.violations)
        self.counts = Counts()
        self.groups = [f"chaos-{g}" for g in range(settings.groups)]
        self.members: dict[str, list[GroupMember]] = {g: [] for g in self.groups}
        self._member_names: dict[int, str] = {}
        self._bootstrap: dict[int, str] = {}
        self._looks_up: dict[int, bool] = {}
        self._next_member = 0
        self._churn: set[asyncio.Task[None]] = set()
        self.timeline: list[str] = []
        self._t0 = time.monotonic()

    # -- set-up ---------------------------------------------------------------------

    async def start(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            for i in range(len(self.replicas)):
                await conn.execute(f"CREATE ROLE {_role(i)} SUPERUSER LOGIN")
        finally:
            await conn.close()
        for replica in self.replicas:
            await replica.start()
        for replica in self.replicas:
            await replica.wait_listening()
        async with grpc.aio.insecure_channel(self.replicas[0].address) as channel:
            admin = admin_pb2_grpc.GroupAdminStub(channel)
            for group in self.groups:
                created = await admin.CreateTopics(
                    admin_pb2.CreateTopicsRequest(
                        topics=[admin_pb2.CreatableTopic(name=group, num_partitions=self.settings.partitions)]
                    ),
                    timeout=10,
                )
                assert created.topics[0].error_code == common_pb2.NONE, created.topics[0].error_message
        for group in self.groups:
            for _ in range(self.settings.members_per_group):
                await self.join(group)

    async def join(self, group: str) -> GroupMember:
        n = self._next_member
        self._next_member += 1
        bootstrap = self.replicas[n % len(self.replicas)].address
        options = MemberOptions(
            client_id=f"chaos-{n}",
            request_timeout_ms=self.settings.request_timeout_ms,
            retry_backoff_max_ms=500,
            find_coordinator=n % 2 == 0,
        )
        name = f"{group}/m{n}"
        member = GroupMember(
            bootstrap,
            listener=self.registry.listener(name),
            options=options,
            interceptors=[self.watch, self.watch.stream],
        )
        self._member_names[id(member)] = name
        self._bootstrap[id(member)] = bootstrap
        self._looks_up[id(member)] = options.find_coordinator
        await asyncio.wait_for(member.join(group, topics=[group]), 30)
        self.members[group].append(member)
        self.counts.joins += 1
        return member

    async def close(self) -> None:
        for task in self._churn:
            task.cancel()
        for group in self.groups:
            for member in self.members[group]:
                await member.abort()
        for replica in self.replicas:
            await replica.kill()

    # -- faults ---------------------------------------------------------------------

    async def run_faults(self) -> None:
        deadline = time.monotonic() + self.settings.seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(self.random.uniform(0.5, 2.5))
            if self.random.random() < 0.7:
                self._start_churn()
            replica = self.random.choice(self.replicas)
            fault = self.random.choice(FAULTS)
            self.counts.faults[fault] += 1
            self.log(f"{fault} {replica.name}")
            if fault == "kill":
                await replica.kill()
                await asyncio.sleep(self.random.uniform(0.5, 3.0))
                await replica.start()
                await replica.wait_listening()
            elif fault in ("pause", "cut"):
                await self._isolate(replica, fault)
            else:
                replica.signal(signal.SIGTERM)
                code = await replica.wait_exit(15)
                if code != 0:
                    self.violations.add(f"{replica.name} stopped with code {code} on SIGTERM")
                await replica.start()
                await replica.wait_listening()
        await asyncio.gather(*self._churn)

    async def _isolate(self, replica: Replica, how: str) -> None:
        """Cuts the replica off for up to three leases: often long enough that its shards are
        taken over meanwhile. A pause (SIGSTOP, then SIGCONT) stalls the whole process; a cut
        (its database role refused logins, its connections ended) leaves it answering calls
        without Postgres. Either way it is then a zombie, and a probe checks that it does not
        answer for a shard it lost: after the takeover, a member of one of its groups leaves
        through another replica, and the zombie gets that member's heartbeat, which it would
        take for one that changes nothing (answered from memory, without a write)."""
        lease_s = self.settings.lease_ms / 1000
        length = self.random.uniform(0.2, 3 * lease_s)
        owned = await self._groups_of(replica) if length > lease_s + ZOMBIE_PROBE_AFTER_S + 0.5 else []
        # Connected before a pause, so that the probe's request waits in the replica's socket
        # and is read as soon as it wakes, as a member's retry would be.
        channel = grpc.aio.insecure_channel(replica.address)
        if owned:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(channel.channel_ready(), 2)
        if how == "pause":
            replica.signal(signal.SIGSTOP)
        else:
            await self._logins(replica, allowed=False)
        started = time.monotonic()
        probe: asyncio.Task[int | None] | None = None
        if owned:
            await asyncio.sleep(lease_s + ZOMBIE_PROBE_AFTER_S)
            request = await self._leave_while_isolated(
                self.random.choice(owned), replica, started + length - 0.3
            )
            if request is not None:
                probe = asyncio.create_task(self._probe(channel, request))
        await asyncio.sleep(max(0.0, started + length - time.monotonic()))
        code = None if probe is None or how == "pause" else await probe
        if how == "pause":
            replica.signal(signal.SIGCONT)
            code = None if probe is None else await probe
        else:
            await self._logins(replica, allowed=True)
        self.log(f"{replica.name} back after {length:.1f} s")
        if length > lease_s:
            self.counts.faults[f"{how} beyond the lease"] += 1
        await channel.close()
        if probe is not None:
            name = "no answer" if code is None else common_pb2.ErrorCode.Name(code)  # type: ignore[arg-type]
            self.counts.zombie_probes[name] += 1
            self.log(f"zombie probe of {replica.name}: {name}")
            if code == common_pb2.NONE:
                self.violations.add(
                    f"{replica.name}, isolated ({how}) for {length:.1f} s, answered a heartbeat of a "
                    "member that had left meanwhile, for a shard whose lease had expired"
                )

    async def _logins(self, replica: Replica, *, allowed: bool) -> None:
        """Lets the replica's role log in again, or refuses it and ends its connections."""
        role = _role(self.replicas.index(replica))
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f"ALTER ROLE {role} {'LOGIN' if allowed else 'NOLOGIN'}")
            if not allowed:
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
                )
        finally:
            await conn.close()

    async def _groups_of(self, replica: Replica) -> list[str]:
        """The groups `replica` coordinates now, as it says itself."""
        async with grpc.aio.insecure_channel(replica.address) as channel:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            found = []
            for group in self.groups:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    answer = await stub.FindCoordinator(
                        coordinator_pb2.FindCoordinatorRequest(group_id=group), timeout=2
                    )
                    if answer.error_code == common_pb2.NONE and answer.replica_id == replica.name:
                        found.append(group)
            return found

    async def _leave_while_isolated(
        self, group: str, isolated: Replica, by: float
    ) -> coordinator_pb2.ConsumerGroupHeartbeatRequest | None:
        """A member of `group` leaves (through the replica that took the group over) and a
        new one joins later; returns a heartbeat that the paused replica, which still has the
        member at its epoch, would take for one that changes nothing."""
        # One that talks to another replica (which forwards), so that its leave gets through.
        candidates = [
            m
            for m in self.members[group]
            if self._bootstrap[id(m)] != isolated.address and not self._looks_up[id(m)]
        ]
        if not candidates:
            return None
        member = self.random.choice(candidates)
        self.members[group].remove(member)
        member_id, epoch = member.member_id, member.member_epoch
        self.log(f"{self._member_names[id(member)]} leaves while the coordinator sleeps")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(member.close(), max(0.1, by - time.monotonic()))
        self.counts.leaves += 1
        self._start_join(group)
        if member.member_epoch != LEAVE_EPOCH or epoch <= 0:
            return None  # the leave was not taken in time: no probe
        # No owned partitions, no subscription: "nothing changed" to whoever still knows the member.
        return coordinator_pb2.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=epoch
        )

    async def _probe(
        self, channel: grpc.aio.Channel, request: coordinator_pb2.ConsumerGroupHeartbeatRequest
    ) -> int | None:
        """Sends `request` to the isolated replica (a paused one answers once it wakes)."""
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        try:
            answer = await stub.ConsumerGroupHeartbeat(request, timeout=10)
        except grpc.aio.AioRpcError:
            return None
        code: int = answer.error_code
        return code

    def _start_join(self, group: str) -> None:
        task = asyncio.create_task(self._join_later(group))
        self._churn.add(task)
        task.add_done_callback(self._churn.discard)

    async def _join_later(self, group: str) -> None:
        await self.join(group)

    def log(self, text: str) -> None:
        """What happened when, for the failure message."""
        self.timeline.append(f"{time.monotonic() - self._t0:7.2f} s  {text}")

    def _start_churn(self) -> None:
        """One member of a random group leaves, and a new one joins in its place."""
        group = self.random.choice(self.groups)
        if not self.members[group]:
            return
        member = self.members[group].pop(self.random.randrange(len(self.members[group])))
        self.log(f"{self._member_names[id(member)]} leaves")
        task = asyncio.create_task(self._replace(group, member))
        self._churn.add(task)
        task.add_done_callback(self._churn.discard)

    async def _replace(self, group: str, member: GroupMember) -> None:
        try:
            await asyncio.wait_for(member.close(), 30)
        except TimeoutError:
            self.violations.add(f"{self._member_names[id(member)]} did not close within 30 s")
        self.counts.leaves += 1
        await self.join(group)

    # -- the end --------------------------------------------------------------------

    def check_members(self) -> None:
        for v in self.registry.violations:
            self.violations.add(f"two owners: {v}")
        for group in self.groups:
            for member in self.members[group]:
                name = self._member_names[id(member)]
                if member.failure is not None:
                    self.violations.add(f"{name} failed: {member.failure}")
                # A fencing the protocol prescribes loses the member's partitions, once each.
                forgiven = self.watch.fenced_after_lost[f"{group}/{member.member_id}"]
                lost = self.registry.count(name, "lost") - forgiven
                if lost > 0:
                    self.violations.add(f"{name} lost its partitions {lost} time(s)")

    async def converge(self) -> float:
        """Waits until every group is Stable, each member at its target, and every partition of
        the group's topic owned by exactly one member; returns how long that took."""
        started = time.monotonic()
        deadline = started + self.settings.converge_s
        while True:
            waiting = await self._not_converged()
            if not waiting:
                return time.monotonic() - started
            if time.monotonic() > deadline:
                self.violations.add(f"not converged after {self.settings.converge_s} s: {waiting}")
                return time.monotonic() - started
            await asyncio.sleep(0.2)

    async def _not_converged(self) -> list[str]:
        waiting: list[str] = []
        address = self.random.choice(self.replicas).address
        async with grpc.aio.insecure_channel(address) as channel:
            admin = admin_pb2_grpc.GroupAdminStub(channel)
            try:
                described = await admin.DescribeGroups(
                    admin_pb2.DescribeGroupsRequest(group_ids=self.groups), timeout=5
                )
            except grpc.aio.AioRpcError as err:
                return [f"DescribeGroups: {err.code().name}"]
        for group in described.groups:
            if group.error_code != common_pb2.NONE:
                waiting.append(f"{group.group_id}: {common_pb2.ErrorCode.Name(group.error_code)}")  # type: ignore[arg-type]
            elif group.group_state != "Stable":
                waiting.append(f"{group.group_id}: {group.group_state}")
        for group in self.groups:
            members = self.members[group]
            expected = {TopicPartition(group, p) for p in range(self.settings.partitions)}
            held: list[tuple[str, int]] = [
                (tp.topic, tp.partition) for m in members for tp in m.assignment().partitions
            ]
            if sorted(held) != sorted((tp.topic, tp.partition) for tp in expected):
                waiting.append(f"{group}: members hold {len(held)} of {len(expected)} partitions")
            elif len({m.member_epoch for m in members}) != 1:
                waiting.append(f"{group}: member epochs {sorted(m.member_epoch for m in members)}")
        return waiting

    def figures(self, converged_s: float) -> dict[str, Any]:
        """The run's counts, as one JSON line of bench/results/chaos.jsonl."""
        return {
            "benchmark": "chaos",
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seed": self.settings.seed,
            "seconds": self.settings.seconds,
            "replicas": len(self.replicas),
            "groups": len(self.groups),
            "faults": dict(self.counts.faults),
            "zombie_probes": dict(self.counts.zombie_probes),
            "members_joined": self.counts.joins,
            "members_left": self.counts.leaves,
            "heartbeats_answered": dict(self.watch.answers),
            "heartbeats_on_streams": self.watch.streamed,
            "member_streams_opened": self.watch.streams,
            "transport_errors": dict(self.watch.transport_errors),
            "fenced_after_lost_answers": sum(self.watch.fenced_after_lost.values()),
            "late_answers": self.watch.late_answers,
            "converged_s": round(converged_s, 2),
            "violations": len(self.violations.found),
        }

    def report(self, converged_s: float) -> str:
        answers = ", ".join(f"{name} {n}" for name, n in self.watch.answers.most_common())
        errors = ", ".join(f"{name} {n}" for name, n in self.watch.transport_errors.most_common()) or "none"
        kinds = FAULTS
        faults = ", ".join(f"{kind} {self.counts.faults[kind]}" for kind in kinds)
        beyond = sum(self.counts.faults[f"{how} beyond the lease"] for how in ("pause", "cut"))
        probes = ", ".join(f"{k} {n}" for k, n in self.counts.zombie_probes.most_common()) or "none"
        return (
            f"chaos seed {self.settings.seed}: {self.settings.seconds:.0f} s, "
            f"{len(self.replicas)} replicas, {len(self.groups)} groups; "
            f"faults {sum(self.counts.faults[k] for k in kinds)} ({faults}; "
            f"{beyond} pauses and cuts beyond the lease; zombie probes {probes}); "
            f"members joined {self.counts.joins}, left {self.counts.leaves}; "
            f"heartbeats answered {sum(self.watch.answers.values())} ({answers}; "
            f"{self.watch.streamed} on {self.watch.streams} member streams); "
            f"transport errors {errors}; "
            f"fenced after two lost answers {sum(self.watch.fenced_after_lost.values())}; "
            f"late answers dropped {self.watch.late_answers}; "
            f"converged in {converged_s:.1f} s after the last fault; "
            f"violations {len(self.violations.found)}"
        )
