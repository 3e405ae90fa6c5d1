"""Benchmark 8: many replicas, as processes on one embedded Postgres.

Three replica processes (`python -m regroup.server`, replica-1..3) share one
database and its 64 shards. Measured:

1. Failover. SIGKILL of the replica that coordinates a group, until a member
   that heartbeats every interval through another replica is answered again,
   and until the group reads Stable through that replica; against one lease
   plus one heartbeat interval. A probe member heartbeating every 20 ms
   beside it gives when the group was served again.
2. Graceful handover. SIGTERM of the coordinating replica, until the probe is
   answered again (by the new owner): target under 200 ms.
3. Lease cost at rest. The statements Postgres ran, by kind, per second
   (from its own statement log, `log_statement = all` on the benchmark's
   database), idle and while members send heartbeats that change nothing;
   per such heartbeat, the write transactions (the xid counter) and the rows
   written outside the lease tables (`pg_stat_user_tables`): target 0.
4. Forwarding. Steady heartbeats of the same groups sent to a replica that
   does not own them (forwarded) against sent to the owner, alternating, in
   the same run: a throughput ratio, and CPU per heartbeat of each replica.
5. Scale-out on paper, from 4.'s CPU per heartbeat and 3.'s statements.

Topics are created through replica-1 before the other two start, as they were
before topic changes reached every replica (the topics version, migration 0006);
it keeps the runs comparable with the first ones.

    python -m bench.replicas [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import signal
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc

from bench.loadgen import LoadGenerator, MemberSpec
from bench.report import figure, machine, table
from bench.servers import BenchPostgres, ServerProcess, _flush_statistics, free_port, start_coordinator
from regroup.server.config import Settings
from regroup.server.leases import shard_of
from regroup.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.support.wire import WireMember

NAMES = ("replica-1", "replica-2", "replica-3")
SHARDS = Settings().shards
LEASE_TABLES = ("shard_leases", "replicas")
TOPIC = "bench-topic"
PARTITIONS = 64
#: How often the probe member heartbeats during a failover or a handover.
PROBE_MS = 20
#: Heartbeat interval assumed by the scale-out table, and the share of a core a replica
#: may spend on heartbeats there (the rest is headroom: rebalances, collection, bursts).
PAPER_INTERVAL_MS = 5_000
PAPER_CORE_SHARE = 0.5
PAPER_MEMBERS_PER_GROUP = 10


@dataclass(frozen=True)
class Mode:
    lease_ms: int
    interval_ms: int
    failovers: int
    handovers: int
    idle_s: float
    busy_s: float
    busy_groups: int
    busy_members: int
    busy_interval_ms: int
    forward_groups: int
    forward_members: int
    forward_s: float
    forward_rounds: int
    forward_processes: int

    @property
    def renew_ms(self) -> int:
        return self.lease_ms * 3 // 10


QUICK = Mode(
    lease_ms=2_000,
    interval_ms=500,
    failovers=1,
    handovers=1,
    idle_s=4,
    busy_s=4,
    busy_groups=12,
    busy_members=10,
    busy_interval_ms=250,
    forward_groups=4,
    forward_members=10,
    forward_s=2,
    forward_rounds=1,
    forward_processes=1,
)
FULL = Mode(
    lease_ms=10_000,
    interval_ms=5_000,
    failovers=3,
    handovers=5,
    idle_s=30,
    busy_s=30,
    busy_groups=30,
    busy_members=10,
    busy_interval_ms=250,
    forward_groups=10,
    forward_members=50,
    forward_s=5,
    forward_rounds=3,
    forward_processes=2,
)


def ms_since(t0: float, t: float) -> float:
    return round((t - t0) * 1000, 1)


class Cluster:
    """The replica processes, each on a port of its own for the whole run."""

    def __init__(self, dsn: str, mode: Mode) -> None:
        self.dsn = dsn
        self.mode = mode
        self.ports = {name: free_port() for name in NAMES}
        self.procs: dict[str, ServerProcess] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def start(self, *names: str) -> None:
        """Starts the replicas together and waits until each listens."""
        for name in names:
            self.procs[name] = start_coordinator(
                self.dsn,
                port=self.ports[name],
                wait=False,
                replica_id=name,
                lease_ms=self.mode.lease_ms,
                heartbeat_interval_ms=self.mode.interval_ms,
                log_level="info",
            )
        for name in names:
            self.procs[name].wait_listening()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()

    def channel(self, name: str) -> grpc.aio.Channel:
        if name not in self._channels:
            self._channels[name] = grpc.aio.insecure_channel(self.address(name))
        return self._channels[name]

    def coordinator(self, name: str) -> coordinator_pb2_grpc.GroupCoordinatorStub:
        return coordinator_pb2_grpc.GroupCoordinatorStub(self.channel(name))

    def admin(self, name: str) -> admin_pb2_grpc.GroupAdminStub:
        return admin_pb2_grpc.GroupAdminStub(self.channel(name))

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def owner(self, group: str, via: str = NAMES[0]) -> str:
        found = await self.coordinator(via).FindCoordinator(
            coordinator_pb2.FindCoordinatorRequest(group_id=group), timeout=2
        )
        return found.replica_id

    async def group_owned_by(self, name: str, prefix: str, taken: set[str] | None = None) -> str:
        """A group id (prefix-N) whose shard `name` holds."""
        for i in range(10_000):
            group = f"{prefix}-{i}"
            if (taken is None or group not in taken) and await self.owner(group) == name:
                return group
        raise RuntimeError(f"no group of {name}")

    async def spread(self, live: Sequence[str], timeout_s: float = 60) -> float:
        """Waits until the live replicas hold every shard, fairly, by the database's
        clock, and each of them names the same owners (their views caught up)."""
        started = time.monotonic()
        fair = -(-SHARDS // len(live))
        probes = [f"spread-{i}" for i in range(16)]
        conn = await asyncpg.connect(self.dsn)
        try:
            while True:
                rows = await conn.fetch(
                    "SELECT shard, owner FROM shard_leases WHERE expires_at > clock_timestamp()"
                )
                held: dict[str, int] = {}
                for row in rows:
                    held[row["owner"]] = held.get(row["owner"], 0) + 1
                if set(held) == set(live) and sum(held.values()) == SHARDS and max(held.values()) <= fair:
                    views = [await asyncio.gather(*(self.owner(g, via) for g in probes)) for via in live]
                    if all(v == views[0] for v in views) and all(views[0]):
                        return time.monotonic() - started
                if time.monotonic() - started > timeout_s:
                    raise RuntimeError(f"the shards did not spread over {live} in {timeout_s} s: {held}")
                await asyncio.sleep(0.1)
        finally:
            await conn.close()


# -- 1. and 2.: failover and handover ---------------------------------------------------------


@dataclass
class Answer:
    sent: float
    received: float
    code: int
    state: str = ""
    epoch: int = -1


@dataclass
class Trial:
    signal: str
    victim: str
    via: str
    #: From the signal until the probe was answered after its last refusal (0: never refused).
    restored_ms: float
    #: From the signal until the member (one heartbeat per interval) was next answered.
    member_ms: float
    #: From the signal until the group read Stable through `via` after its last refusal.
    stable_ms: float
    refusals: dict[str, int]
    #: The member's epoch or partitions changed, or the group's epoch: a rebalance.
    rebalanced: bool
    detail: dict[str, Any] = field(default_factory=dict)


async def _beat(member: WireMember) -> int:
    try:
        response = await asyncio.wait_for(member.heartbeat(), 5)
    except (grpc.aio.AioRpcError, TimeoutError):
        return -1
    return int(response.error_code)


async def _describe(admin: admin_pb2_grpc.GroupAdminStub, group: str) -> tuple[int, str, int]:
    try:
        response = await admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[group]), timeout=5)
    except grpc.aio.AioRpcError:
        return -1, "", -1
    described = response.groups[0]
    return described.error_code, described.group_state, described.group_epoch


def _first_after_refusals(answers: list[Answer], t0: float, ok: Any) -> tuple[float, int]:
    """(when the first answer accepted by `ok` came after the last refused one sent after
    t0, refusals after t0); when none was refused, (t0, 0)."""
    after = [a for a in answers if a.sent >= t0]
    refused = [a for a in after if a.code != common_pb2.NONE]
    if not refused:
        return t0, 0
    last = max(a.sent for a in refused)
    good = [a.received for a in after if a.sent > last and a.code == common_pb2.NONE and ok(a)]
    return (min(good) if good else float("nan")), len(refused)


async def trial(cluster: Cluster, sig: signal.Signals, victim: str, via: str, number: int) -> Trial:
    """A new group coordinated by `victim`, a member and a probe talking to `via`; `sig` to the victim."""
    mode = cluster.mode
    group = await cluster.group_owned_by(victim, f"fo{number}")
    stub = cluster.coordinator(via)
    member = WireMember(stub, group, "member", [TOPIC])
    probe = WireMember(stub, group, "probe", [TOPIC])
    admin = cluster.admin(via)
    deadline = time.monotonic() + 20  # the second join's target may wait for the assignment timer
    while True:
        for m in (member, probe):
            await m.heartbeat()
        _, state, epoch = await _describe(admin, group)
        if state == "Stable" and member.epoch == probe.epoch == epoch and member.owned and probe.owned:
            break
        if time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            continue
        raise RuntimeError(
            f"group {group} did not settle: {state} at epoch {epoch}; member {member.epoch} "
            f"{len(member.owned)} {member.last}, probe {probe.epoch} {len(probe.owned)} {probe.last}"
        )
    beats: list[Answer] = []
    probes: list[Answer] = []
    described: list[Answer] = []
    done = asyncio.Event()

    async def member_loop() -> None:
        next_at = time.monotonic()
        while not done.is_set():
            sent = time.monotonic()
            code = await _beat(member)
            beats.append(Answer(sent, time.monotonic(), code))
            next_at += mode.interval_ms / 1000
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def probe_loop() -> None:
        admin = cluster.admin(via)
        while not done.is_set():
            sent = time.monotonic()
            code = await _beat(probe)
            probes.append(Answer(sent, time.monotonic(), code))
            sent = time.monotonic()
            code, state, epoch = await _describe(admin, group)
            described.append(Answer(sent, time.monotonic(), code, state, epoch))
            await asyncio.sleep(PROBE_MS / 1000)

    tasks = [asyncio.create_task(member_loop()), asyncio.create_task(probe_loop())]
    # A member in its rhythm, then the signal at a random point of its interval.
    await asyncio.sleep(max(0.5, mode.interval_ms / 1000) + random.uniform(0, mode.interval_ms / 1000))
    process = cluster.procs[victim].proc
    epochs = [d.epoch for d in described if d.code == common_pb2.NONE]
    before = (member.epoch, member.partitions(), epochs[-1] if epochs else -1)
    # How long the group's lease has still to run, by the database's clock, as the signal goes.
    conn = await asyncpg.connect(cluster.dsn)
    try:
        remaining = await conn.fetchval(
            "SELECT extract(epoch FROM expires_at - clock_timestamp()) * 1000 FROM shard_leases"
            " WHERE shard = $1 AND owner = $2",
            shard_of(group, SHARDS),
            victim,
        )
        t0 = time.monotonic()
        process.send_signal(sig)
    finally:
        await conn.close()
    deadline = t0 + (mode.lease_ms + 3 * mode.interval_ms) / 1000 + 15
    while time.monotonic() < deadline:
        member_ok = any(b.sent >= t0 and b.code == common_pb2.NONE for b in beats)
        stable_at, _ = _first_after_refusals(described, t0, lambda a: a.state == "Stable")
        restored_at, _ = _first_after_refusals(probes, t0, lambda a: True)
        if member_ok and stable_at == stable_at and restored_at == restored_at:  # not NaN
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    done.set()
    await asyncio.gather(*tasks)
    await asyncio.to_thread(process.wait, 30)

    restored_at, refused = _first_after_refusals(probes, t0, lambda a: True)
    stable_at, _ = _first_after_refusals(described, t0, lambda a: a.state == "Stable")
    member_at = min(
        (b.received for b in beats if b.sent >= t0 and b.code == common_pb2.NONE), default=float("nan")
    )
    refusals: dict[str, int] = {}
    for a in probes:
        if a.sent >= t0 and a.code != common_pb2.NONE:
            name = "transport" if a.code < 0 else common_pb2.ErrorCode.Name(a.code)
            refusals[name] = refusals.get(name, 0) + 1
    after = (member.epoch, member.partitions(), max((d.epoch for d in described), default=-1))
    if after[0] != before[0] or after[1] != before[1] or after[2] != before[2]:
        print(f"  rebalanced: member epoch, partitions, group epoch {before} -> {after}")
    return Trial(
        signal=sig.name,
        victim=victim,
        via=via,
        restored_ms=ms_since(t0, restored_at),
        member_ms=ms_since(t0, member_at),
        stable_ms=ms_since(t0, stable_at),
        refusals=refusals,
        rebalanced=after != before,
        detail={
            "lease_left_ms": round(float(remaining), 1),
            #: When the group was served again after its lease expired (a failover's part
            #: beyond the lease itself: how late the survivors looked).
            "served_after_expiry_ms": round(ms_since(t0, restored_at) - float(remaining), 1),
            "refused": refused,
            "member_epoch": [before[0], after[0]],
            "group_epoch": [before[2], after[2]],
            "partitions": len(before[1]),
        },
    )


async def run_trials(
    cluster: Cluster, sig: signal.Signals, count: int, first: int, last: bool
) -> list[Trial]:
    trials = []
    for i in range(count):
        victim = NAMES[(first + i) % len(NAMES)]
        via = NAMES[(first + i + 1) % len(NAMES)]
        trials.append(await trial(cluster, sig, victim, via, first + i))
        t = trials[-1]
        print(
            f"  {t.signal} {t.victim} (member at {t.via}, lease left {t.detail['lease_left_ms']:.0f} ms): "
            f"served again after {t.restored_ms:.0f} ms, "
            f"member answered after {t.member_ms:.0f} ms, Stable after {t.stable_ms:.0f} ms, "
            f"refusals {t.refusals}, rebalanced: {t.rebalanced}",
            flush=True,
        )
        if not (last and i == count - 1):
            await asyncio.to_thread(cluster.start, victim)
            await cluster.spread(NAMES)
    return trials


# -- 3.: lease cost at rest ------------------------------------------------------------------

_STATEMENT = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)$")
_MARK = "regroup-bench-mark-"
#: What asyncpg runs on a new connection the first time it meets a type it must look up.
_SETUP = ("typeinfo_tree", "pg_catalog.pg_type", "set_config('jit'", "current_setting('jit')")


class StatementLog:
    """Postgres' statement log of the benchmark's database, between marks."""

    def __init__(self, postgres: BenchPostgres, dsn: str) -> None:
        self.path = postgres.log_path
        self.dsn = dsn
        self._marks = 0

    async def mark(self) -> tuple[str, int]:
        """A statement that shows in the log, and the next transaction id (exact, no lag)."""
        self._marks += 1
        name = f"{_MARK}{self._marks}-{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(self.dsn)
        try:
            xid = await conn.fetchval(
                f"SELECT pg_snapshot_xmax(pg_current_snapshot())::text, '{name}'", column=0
            )
        finally:
            await conn.close()
        return name, int(xid)

    def between(self, start: str, end: str) -> dict[str, int]:
        """Statements run between two marks, by kind."""
        counts = {"lease_round": 0, "ping": 0, "setup": 0, "other": 0}
        others: dict[str, int] = {}
        for text in self._statements(start, end):
            if "regroup_lease_round" in text:
                counts["lease_round"] += 1
            elif text == "SELECT 1":
                counts["ping"] += 1
            elif any(word in text for word in _SETUP):
                # asyncpg learning a type on a new connection: the replicas reconnect
                # after `table_rows` ended their connections, once per pooled connection.
                counts["setup"] += 1
            else:
                counts["other"] += 1
                others[text[:100]] = others.get(text[:100], 0) + 1
        if others:
            print(f"  other statements: {others}")
        return counts

    def _statements(self, start: str, end: str) -> list[str]:
        """The statements logged between the marks, each with its continuation lines."""
        statements: list[list[str]] = []
        current: list[str] | None = None
        inside = False
        with self.path.open(errors="replace") as log:
            for line in log:
                match = _STATEMENT.search(line)
                if match is None:
                    if current is not None and line[:1].isspace():
                        current.append(line.strip())  # the statement's next line
                    else:
                        current = None  # DETAIL, or another message
                elif start in line:
                    inside, current = True, None
                elif end in line:
                    break
                elif inside:
                    current = [match[1].strip()]
                    statements.append(current)
        return [" ".join(part for part in parts if part) for parts in statements]


async def table_rows(dsn: str) -> dict[str, int]:
    """Rows written per table so far, and in the whole database, every connection's
    statistics flushed first (by ending the connections: the replicas reconnect)."""
    await _flush_statistics(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del AS n FROM pg_stat_user_tables"
        )
        total = await conn.fetchval(
            "SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return {**{r["relname"]: int(r["n"]) for r in rows}, "(database)": int(total)}


def busy_members(mode: Mode) -> list[MemberSpec]:
    return [
        MemberSpec(f"busy-{g}", str(uuid.uuid4()), (TOPIC,))
        for g in range(mode.busy_groups)
        for _ in range(mode.busy_members)
    ]


async def settle(
    cluster: Cluster, loads: Sequence[LoadGenerator], groups: Sequence[str], timeout_s: float = 60
) -> None:
    """Heartbeat rounds of every load's members until every group reads Stable (through
    replica-1, forwarded as needed)."""
    deadline = time.monotonic() + timeout_s
    admin = cluster.admin(NAMES[0])
    while True:
        for load in loads:
            await asyncio.to_thread(load.run, "rounds", n=1)
        response = await admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=list(groups)))
        states = {g.group_id: g.group_state for g in response.groups}
        if all(states.get(g) == "Stable" for g in groups):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"groups did not settle: {states}")


async def lease_cost(cluster: Cluster, postgres: BenchPostgres, mode: Mode) -> dict[str, Any]:
    log = StatementLog(postgres, cluster.dsn)
    specs = busy_members(mode)
    # Through one address, as through a Service: two thirds of the heartbeats are forwarded.
    load = LoadGenerator(cluster.address(NAMES[0]), specs, processes=1)
    try:
        await asyncio.to_thread(load.run, "join")
        await settle(cluster, [load], sorted({s.group_id for s in specs}))
        rows_before = await table_rows(cluster.dsn)
        await asyncio.sleep(2 * mode.renew_ms / 1000)  # the replicas' pools reconnect
        idle_start, xid_idle_start = await log.mark()
        await asyncio.sleep(mode.idle_s)
        idle_end, xid_idle_end = await log.mark()
        started = time.monotonic()
        replies = await asyncio.to_thread(
            load.run, "paced", seconds=mode.busy_s, interval_ms=mode.busy_interval_ms
        )
        busy_seconds = time.monotonic() - started
        busy_end, xid_busy_end = await log.mark()
        rows_after = await table_rows(cluster.dsn)
        errors = (await asyncio.to_thread(load.run, "stats"))[0]["errors"]
    finally:
        await asyncio.to_thread(load.close)
    heartbeats = sum(r["calls"] for r in replies)
    idle = log.between(idle_start, idle_end)
    busy = log.between(idle_end, busy_end)
    rows = {k: rows_after.get(k, 0) - rows_before.get(k, 0) for k in rows_after}
    lease_rows = sum(rows.get(t, 0) for t in LEASE_TABLES)
    other_rows = sum(n for t, n in rows.items() if t not in LEASE_TABLES and t != "(database)")
    busy_xids = xid_busy_end - xid_idle_end
    return {
        "idle_seconds": mode.idle_s,
        "idle_statements_per_s": round((sum(idle.values()) - idle["setup"]) / mode.idle_s, 2),
        "idle_lease_rounds_per_s": round(idle["lease_round"] / mode.idle_s, 2),
        "idle_pings_per_s": round(idle["ping"] / mode.idle_s, 2),
        "idle_other_statements": idle["other"],
        #: asyncpg's type lookups on the replicas' new connections (see `table_rows`).
        "idle_setup_statements": idle["setup"],
        "idle_write_transactions_per_s": round((xid_idle_end - xid_idle_start) / mode.idle_s, 2),
        "idle_write_transactions_beyond_leases": xid_idle_end - xid_idle_start - idle["lease_round"],
        "busy_seconds": round(busy_seconds, 1),
        "heartbeats": heartbeats,
        "heartbeat_errors": errors,
        "busy_statements_per_s": round((sum(busy.values()) - busy["setup"]) / busy_seconds, 2),
        "busy_setup_statements": busy["setup"],
        "busy_lease_rounds": busy["lease_round"],
        "busy_pings": busy["ping"],
        #: Statements other than lease rounds and pings while the heartbeats ran.
        "heartbeat_statements": busy["other"],
        #: Write transactions beyond the lease rounds' own (each takes one xid).
        "heartbeat_write_transactions": busy_xids - busy["lease_round"],
        "lease_rows_written": lease_rows,
        "other_rows_written": other_rows,
        "database_rows_written": rows.get("(database)", 0),
        "rows_window_seconds": "idle + busy + 2 renewals",
        "writes_per_heartbeat": (other_rows + max(0, busy_xids - busy["lease_round"])) / max(1, heartbeats),
    }


# -- 4.: forwarding ----------------------------------------------------------------------------


@dataclass
class Phase:
    calls: int
    seconds: float
    cpu: dict[str, float]
    p50_ms: float

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    def cpu_us(self, name: str) -> float:
        return self.cpu[name] / self.calls * 1e6


def _phase(cluster: Cluster, load: LoadGenerator, seconds: float) -> Phase:
    load.run("steady", seconds=min(1.0, seconds / 3), concurrency=64)  # warm up
    cpu = {name: proc.cpu_seconds() for name, proc in cluster.procs.items()}
    replies = load.run("steady", seconds=seconds, concurrency=64)
    used = {name: proc.cpu_seconds() - cpu[name] for name, proc in cluster.procs.items()}
    latencies = sorted(x for r in replies for x in r["latencies_us"])
    return Phase(
        calls=sum(r["calls"] for r in replies),
        seconds=max(r["seconds"] for r in replies),
        cpu=used,
        p50_ms=latencies[len(latencies) // 2] / 1000 if latencies else float("nan"),
    )


async def forwarding(cluster: Cluster, mode: Mode) -> dict[str, Any]:
    owner, relay = NAMES[0], NAMES[1]
    groups: list[str] = []
    for _ in range(mode.forward_groups):
        groups.append(await cluster.group_owned_by(owner, "fw", set(groups)))

    def members() -> list[MemberSpec]:
        return [
            MemberSpec(g, str(uuid.uuid4()), (TOPIC,)) for g in groups for _ in range(mode.forward_members)
        ]

    direct = LoadGenerator(cluster.address(owner), members(), processes=mode.forward_processes)
    forwarded = LoadGenerator(cluster.address(relay), members(), processes=mode.forward_processes)
    try:
        for load in (direct, forwarded):
            await asyncio.to_thread(load.run, "join")
        await settle(cluster, [direct, forwarded], groups)
        phases: dict[str, list[Phase]] = {"direct": [], "forwarded": []}
        for _ in range(mode.forward_rounds):
            phases["direct"].append(await asyncio.to_thread(_phase, cluster, direct, mode.forward_s))
            phases["forwarded"].append(await asyncio.to_thread(_phase, cluster, forwarded, mode.forward_s))
    finally:
        for load in (direct, forwarded):
            await asyncio.to_thread(load.close)
    ratios = [f.rate / d.rate for d, f in zip(phases["direct"], phases["forwarded"], strict=True)]
    d = sorted(phases["direct"], key=lambda p: p.rate)[len(phases["direct"]) // 2]
    f = sorted(phases["forwarded"], key=lambda p: p.rate)[len(phases["forwarded"]) // 2]
    table(
        f"Steady heartbeats of {len(groups)} groups owned by {owner}, {mode.forward_processes} load "
        "processes x 64 in flight, "
        f"{mode.forward_s:.0f} s, {mode.forward_rounds} rounds (median phase)",
        ["sent to", "calls", "hb/s", "p50 ms", f"{owner} cpu us/hb", f"{relay} cpu us/hb", "all cpu us/hb"],
        [
            [
                name,
                p.calls,
                p.rate,
                p.p50_ms,
                p.cpu_us(owner),
                p.cpu_us(relay),
                sum(p.cpu.values()) / p.calls * 1e6,
            ]
            for name, p in (("owner (direct)", d), ("other replica (forwarded)", f))
        ],
    )
    return {
        "forward_ratio": round(statistics.median(ratios), 3),
        "forward_ratio_per_round": [round(r, 3) for r in ratios],
        "direct_heartbeats_per_s": round(d.rate, 1),
        "forwarded_heartbeats_per_s": round(f.rate, 1),
        "direct_p50_ms": round(d.p50_ms, 3),
        "forwarded_p50_ms": round(f.p50_ms, 3),
        "owner_cpu_us_per_heartbeat": round(d.cpu_us(owner), 1),
        "relay_cpu_us_per_forward": round(f.cpu_us(relay), 1),
        "owner_cpu_us_per_forwarded_heartbeat": round(f.cpu_us(owner), 1),
        "groups": len(groups),
        "members": 2 * len(groups) * mode.forward_members,
    }


# -- 5.: scale-out on paper -------------------------------------------------------------------


def paper(forward: dict[str, Any], renew_ms: int) -> list[dict[str, Any]]:
    """How many members N replicas hold at a 5 s interval, and what Postgres carries."""
    direct_us = forward["owner_cpu_us_per_heartbeat"]
    relay_us = forward["relay_cpu_us_per_forward"]
    store_check_s = Settings().store_check_ms / 1000
    rows = []
    for n in (1, 3, 5, 10, 30):
        # Clients that talk to their group's coordinator (FindCoordinator, NOT_COORDINATOR)...
        per_replica = PAPER_CORE_SHARE / (direct_us * 1e-6) * PAPER_INTERVAL_MS / 1000
        # ...or through one Service address: (n - 1)/n of the heartbeats are forwarded once.
        via_service = (
            PAPER_CORE_SHARE / ((direct_us + relay_us * (n - 1) / n) * 1e-6) * PAPER_INTERVAL_MS / 1000
        )
        rows.append(
            {
                "replicas": n,
                "members_direct": int(per_replica * n),
                "members_via_service": int(via_service * n),
                "groups_via_service": int(via_service * n / PAPER_MEMBERS_PER_GROUP),
                "lease_statements_per_s": round(n / (renew_ms / 1000), 2),
                "pings_per_s": round(n / store_check_s, 2),
                "lease_rows_per_s": round((n + SHARDS) / (renew_ms / 1000), 1),
                "writes_per_unchanged_heartbeat": 0,
            }
        )
    return rows


# -- the run ------------------------------------------------------------------------------------


async def _create_topic(cluster: Cluster) -> None:
    response = await cluster.admin(NAMES[0]).CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS)]
        )
    )
    assert response.topics[0].error_code == common_pb2.NONE, response


async def _log_statements(postgres: BenchPostgres, dsn: str) -> None:
    """Every statement of the benchmark's database in Postgres' log, for sessions started from now."""
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(postgres.base_dsn)
    try:
        await conn.execute(f"ALTER DATABASE {name} SET log_statement = 'all'")
    finally:
        await conn.close()


async def run(mode: Mode, postgres: BenchPostgres) -> dict[str, Any]:
    dsn = await asyncio.to_thread(postgres.new_database)
    await _log_statements(postgres, dsn)
    cluster = Cluster(dsn, mode)
    try:
        # replica-1 first, with the topic, so that the others read it when they start.
        await asyncio.to_thread(cluster.start, NAMES[0])
        await _create_topic(cluster)
        await asyncio.to_thread(cluster.start, *NAMES[1:])
        spread_s = await cluster.spread(NAMES)
        print(f"  the shards spread over {len(NAMES)} replicas in {spread_s:.1f} s", flush=True)

        mark = time.monotonic()

        def took(what: str) -> None:
            nonlocal mark
            print(f"  ({what} took {time.monotonic() - mark:.0f} s)", flush=True)
            mark = time.monotonic()

        print("lease cost at rest ...", flush=True)
        await asyncio.to_thread(postgres.disable_autovacuum)  # its visits write too
        cost = await lease_cost(cluster, postgres, mode)
        took("lease cost")
        print("forwarding ...", flush=True)
        forward = await forwarding(cluster, mode)
        took("forwarding")
        print("failovers (SIGKILL) ...", flush=True)
        failovers = await run_trials(cluster, signal.SIGKILL, mode.failovers, 0, last=False)
        took("failovers")
        print("graceful handovers (SIGTERM) ...", flush=True)
        handovers = await run_trials(cluster, signal.SIGTERM, mode.handovers, mode.failovers, last=True)
        took("handovers")
    finally:
        await cluster.close()
        cluster.stop()
    return {"cost": cost, "forward": forward, "failovers": failovers, "handovers": handovers}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a small smoke run (short leases)")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    context = {
        "lease_ms": mode.lease_ms,
        "renew_ms": mode.renew_ms,
        "heartbeat_interval_ms": mode.interval_ms,
        "replicas": len(NAMES),
        "shards": SHARDS,
        **machine(),
    }
    postgres = BenchPostgres()
    try:
        results = asyncio.run(run(mode, postgres))
    finally:
        postgres.close()
    cost, forward = results["cost"], results["forward"]
    failovers: list[Trial] = results["failovers"]
    handovers: list[Trial] = results["handovers"]
    bound = mode.lease_ms + mode.interval_ms

    table(
        f"Failover and handover, 3 replica processes, lease {mode.lease_ms} ms (renewed every "
        f"{mode.renew_ms} ms), heartbeat interval {mode.interval_ms} ms",
        [
            "signal",
            "victim",
            "lease left ms",
            "served again ms",
            "after expiry ms",
            "member answered ms",
            "/ (lease + interval)",
            "Stable ms",
            "rebalanced",
        ],
        [
            [
                t.signal,
                t.victim,
                t.detail["lease_left_ms"],
                t.restored_ms,
                t.detail["served_after_expiry_ms"] if t.signal == "SIGKILL" else "-",
                t.member_ms,
                t.member_ms / bound,
                t.stable_ms,
                t.rebalanced,
            ]
            for t in failovers + handovers
        ],
    )
    for t in failovers + handovers:
        figure(
            "replicas",
            scenario="failover" if t.signal == "SIGKILL" else "handover",
            signal=t.signal,
            victim=t.victim,
            served_again_ms=t.restored_ms,
            member_answered_ms=t.member_ms,
            member_ratio_to_lease_plus_interval=round(t.member_ms / bound, 3),
            stable_ms=t.stable_ms,
            refusals=t.refusals,
            rebalanced=t.rebalanced,
            **t.detail,
            **context,
        )
    worst_failover = max(t.member_ms / bound for t in failovers)
    handover_ms = [t.restored_ms for t in handovers]
    print(
        f"failover: member answered again after {[t.member_ms for t in failovers]} ms, at worst "
        f"{worst_failover:.2f} x (lease + interval) (target <= 1); graceful handover: served again after "
        f"{handover_ms} ms (target < 200 ms; the release is a Postgres NOTIFY that wakes the others' "
        "lease rounds)"
    )

    table(
        f"Postgres at rest: {len(NAMES)} replicas, {SHARDS} shards; then "
        f"{mode.busy_groups * mode.busy_members} members in {mode.busy_groups} groups heartbeating "
        f"every {mode.busy_interval_ms} ms (no change)",
        ["window", "s", "statements/s", "lease rounds", "pings", "other", "reconnect setup", "write xids"],
        [
            [
                "idle",
                cost["idle_seconds"],
                cost["idle_statements_per_s"],
                round(cost["idle_lease_rounds_per_s"] * cost["idle_seconds"]),
                round(cost["idle_pings_per_s"] * cost["idle_seconds"]),
                cost["idle_other_statements"],
                cost["idle_setup_statements"],
                cost["idle_write_transactions_beyond_leases"],
            ],
            [
                f"{cost['heartbeats']} heartbeats",
                cost["busy_seconds"],
                cost["busy_statements_per_s"],
                cost["busy_lease_rounds"],
                cost["busy_pings"],
                cost["heartbeat_statements"],
                cost["busy_setup_statements"],
                cost["heartbeat_write_transactions"],
            ],
        ],
    )
    print(
        f"rows written over both windows: {cost['lease_rows_written']} in the lease tables, "
        f"{cost['other_rows_written']} elsewhere; writes per unchanged heartbeat "
        f"{cost['writes_per_heartbeat']} (target 0)"
    )
    figure("replicas", scenario="lease_cost", **cost, **context)
    figure("replicas", scenario="forwarding", **forward, **context)

    rows = paper(forward, Settings().lease_renew_ms)
    table(
        f"Scale-out on paper: heartbeats every {PAPER_INTERVAL_MS} ms, {PAPER_CORE_SHARE:.0%} of a core per "
        f"replica for them, {forward['owner_cpu_us_per_heartbeat']} us per heartbeat at its owner and "
        f"{forward['relay_cpu_us_per_forward']} us per forward (measured above), groups of "
        f"{PAPER_MEMBERS_PER_GROUP}, default lease renewal ({Settings().lease_renew_ms} ms) and store check",
        list(rows[0]),
        [list(r.values()) for r in rows],
    )
    for row in rows:
        figure(
            "replicas",
            scenario="paper",
            **row,
            assumptions={
                "heartbeat_interval_ms": PAPER_INTERVAL_MS,
                "core_share": PAPER_CORE_SHARE,
                "members_per_group": PAPER_MEMBERS_PER_GROUP,
                "owner_cpu_us_per_heartbeat": forward["owner_cpu_us_per_heartbeat"],
                "relay_cpu_us_per_forward": forward["relay_cpu_us_per_forward"],
            },
        )

    return figure(
        "replicas",
        summary=True,
        failover_trials=len(failovers),
        failover_member_ms=[t.member_ms for t in failovers],
        failover_served_again_ms=[t.restored_ms for t in failovers],
        failover_worst_ratio=round(worst_failover, 3),
        handover_trials=len(handovers),
        handover_ms=handover_ms,
        rebalances=sum(t.rebalanced for t in failovers + handovers),
        idle_statements_per_s=cost["idle_statements_per_s"],
        idle_lease_rounds_per_s=cost["idle_lease_rounds_per_s"],
        heartbeats=cost["heartbeats"],
        heartbeat_statements=cost["heartbeat_statements"],
        heartbeat_write_transactions=cost["heartbeat_write_transactions"],
        writes_per_heartbeat=cost["writes_per_heartbeat"],
        forward_ratio=forward["forward_ratio"],
        **context,
    )


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"(took {time.monotonic() - started:.0f} s)")
