"""The lease keeper with an injected clock: replicas share one in-memory database whose
clock is the manual clock's wall reading, and each trusts its leases on the manual
monotonic reading, so a test moves every clock at once and decides every round."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import structlog

from regroup.reconciler import GroupConfig, Topic
from regroup.reconciler.errors import CoordinatorNotAvailable, NotCoordinator
from regroup.server.clock import ManualClock
from regroup.server.leasekeeper import (
    EXPIRY_SLACK_MS,
    QUICK_ROUND_MS,
    QUICK_ROUNDS,
    START_ROUNDS,
    LeaseKeeper,
    LeaseSettings,
)
from regroup.server.leases import fair_share
from regroup.server.memstore import MemoryDatabase, MemoryStore
from regroup.server.shards import LeaseNotTrusted, ShardTable
from regroup.server.store import NotOwner, StoreUnavailable

SHARDS = 12
LEASE_MS = 10_000
SETTINGS = LeaseSettings(shards=SHARDS, lease_ms=LEASE_MS, renew_ms=3_000)


class Replica:
    def __init__(
        self, name: str, database: MemoryDatabase, clock: ManualClock, *, sole: bool = False
    ) -> None:
        self.store = MemoryStore(name, database)
        self.table = ShardTable(name)
        self.acquired: list[int] = []
        self.lost: list[int] = []
        self.keeper = LeaseKeeper(
            self.store,
            self.table,
            clock,
            LeaseSettings(SHARDS, LEASE_MS, 3_000, f"{name}:50051", sole=sole),
            on_acquired=self._acquired,
            on_lost=self._lost,
            log=structlog.get_logger("test"),
        )

    async def _acquired(self, shards: Sequence[int]) -> None:
        self.acquired += shards
        for shard in shards:
            self.table.held[shard].loaded = True

    async def _lost(self, shards: Sequence[int]) -> None:
        self.lost += shards

    def serving(self, now: int) -> set[int]:
        return {s for s, h in self.table.held.items() if h.loaded and now < h.trusted_until_ms}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def database(clock: ManualClock) -> MemoryDatabase:
    return MemoryDatabase(clock=clock.wall_ms)


async def settle(replicas: Sequence[Replica], rounds: int = 6) -> None:
    for _ in range(rounds):
        for r in replicas:
            await r.keeper.round()


def assert_safe(replicas: Sequence[Replica], clock: ManualClock) -> None:
    """No shard is served by two replicas, and every served shard's lease is live
    in the database and held by that replica."""
    now = clock.monotonic_ms()
    served: dict[int, str] = {}
    for r in replicas:
        for shard in r.serving(now):
            assert shard not in served, f"shard {shard} served by {served[shard]} and {r.store.replica_id}"
            served[shard] = r.store.replica_id
            lease = r.store.database.shard_leases[shard]
            assert lease.owner == r.store.replica_id and not lease.expired(clock.wall_ms())


async def test_one_replica_takes_every_shard_at_start(database: MemoryDatabase, clock: ManualClock) -> None:
    a = Replica("a", database, clock)
    await a.keeper.start(run=False)
    assert a.table.count == SHARDS
    assert sorted(a.acquired) == list(range(SHARDS))
    assert a.serving(clock.monotonic_ms()) == set(range(SHARDS))
    assert a.table.owners[0] == ("a", "a:50051")


async def test_shards_spread_fairly_and_a_new_replica_gets_its_share(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    a, b = Replica("a", database, clock), Replica("b", database, clock)
    await a.keeper.start(run=False)
    await b.keeper.start(run=False)
    await settle([a, b])
    assert len(a.table.held) == len(b.table.held) == SHARDS // 2
    assert_safe([a, b], clock)
    lost_before = len(a.lost + b.lost)

    c = Replica("c", database, clock)
    await c.keeper.start(run=False)
    for _ in range(4):  # a few renewal periods
        clock.advance(3_000)
        await settle([a, b, c], rounds=1)
        assert_safe([a, b, c], clock)
    share = fair_share(SHARDS, 3)
    assert [len(r.table.held) for r in (a, b, c)] == [share] * 3
    # What a and b released, they dropped before releasing.
    assert sorted((a.lost + b.lost)[lost_before:]) == sorted(c.acquired)


async def test_a_dead_replicas_shards_are_taken_only_after_its_lease_expires(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    a, b = Replica("a", database, clock), Replica("b", database, clock)
    await a.keeper.start(run=False)
    await b.keeper.start(run=False)
    assert b.table.held == {}  # a holds them all, alive
    # a dies (no release). Its leases run until LEASE_MS after its last round.
    clock.advance(LEASE_MS - 1)
    await settle([b], rounds=2)
    assert b.table.held == {}
    assert b.table.not_mine("g", 0).code == NotCoordinator.code  # the owner's address is still known
    clock.advance(1)
    await settle([b], rounds=3)
    assert sorted(b.table.held) == list(range(SHARDS))
    assert all(lease.owner == "b" for lease in database.shard_leases.values())


async def test_a_process_restarted_under_a_shared_id_waits_for_its_earlier_leases(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    """REGROUP_REPLICA_ID: another process may run under the same id, so the leases it finds
    under its id are waited for as another replica's."""
    killed = Replica("a", database, clock)
    await killed.keeper.start(run=False)
    clock.advance(1_000)
    again = Replica("a", database, clock)
    await again.keeper.start(run=False)
    assert again.table.held == {}
    clock.advance(LEASE_MS - 1_000)
    await settle([again], rounds=3)
    assert sorted(again.table.held) == list(range(SHARDS))


async def test_a_process_alone_under_its_id_takes_its_earlier_leases_at_once_at_new_epochs(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    """The default single-process set-up (server/identity.py): the earlier process is dead,
    so its leases are taken over in the restart's first rounds; their new owner epochs fence
    whatever that process had in flight."""
    killed = Replica("a", database, clock, sole=True)
    await killed.keeper.start(run=False)
    fence = killed.table.fence("g", clock.monotonic_ms())
    clock.advance(1_000)  # killed: no release
    again = Replica("a", database, clock, sole=True)
    await again.keeper.start(run=False)
    assert sorted(again.table.held) == list(range(SHARDS))
    assert again.serving(clock.monotonic_ms()) == set(range(SHARDS))
    assert again.table.fence("g", clock.monotonic_ms()).owner_epoch > fence.owner_epoch
    with pytest.raises(NotOwner):  # as the Postgres store's fence refuses it
        killed.store._guard("g", [], fence)
    assert again.keeper.shards_released == 0  # adopted, not released


async def test_a_restart_alone_under_its_id_takes_only_its_fair_share(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    a, b = Replica("a", database, clock, sole=True), Replica("b", database, clock)
    await a.keeper.start(run=False)
    await b.keeper.start(run=False)
    await settle([a, b])
    mine = sorted(a.table.held)
    assert len(mine) == SHARDS // 2
    clock.advance(1_000)  # a is killed
    again = Replica("a", database, clock, sole=True)
    await again.keeper.start(run=False)
    assert sorted(again.table.held) == mine
    await settle([again, b])
    assert_safe([again, b], clock)
    assert sorted(again.table.held) == mine


async def _yield(times: int = 50) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def test_a_dead_replicas_shards_are_taken_at_its_leases_expiry_not_a_renewal_later(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    a, b = Replica("a", database, clock), Replica("b", database, clock)
    await a.keeper.start(run=False)
    expiry = max(lease.expires_at_ms for lease in database.shard_leases.values())
    # a dies now (no release); b renews on its own, a moment later: its renewals fall at
    # +1, +3001, +6001, +9001, +12001 ms, so a's leases expire 2 s before its next one.
    clock.advance(1)
    await b.keeper.start(run=True)
    try:
        while clock.wall_ms() < expiry + 200:
            clock.advance(10)
            await _yield()
            if b.table.held:
                break
        assert sorted(b.table.held) == list(range(SHARDS))
        # Taken right after the expiry (the round there sees it expired, a quick round
        # follows and acquires), not at b's next renewal 2 s later.
        assert clock.wall_ms() - expiry <= EXPIRY_SLACK_MS + QUICK_ROUND_MS + 20
        # While a was alive, b's rounds kept their period: its leases were far from expiry.
        assert b.keeper.rounds <= START_ROUNDS + 4 + QUICK_ROUNDS
    finally:
        await b.keeper.stop(release=False)


async def test_a_paused_owner_stops_answering_before_its_lease_can_be_taken(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    a, b = Replica("a", database, clock), Replica("b", database, clock)
    await a.keeper.start(run=False)
    await b.keeper.start(run=False)
    await settle([a, b])
    shard = next(iter(a.table.held))
    group = next(g for g in (f"g{i}" for i in range(1000)) if a.table.shard(g) == shard)
    a.table.fence(group, clock.monotonic_ms())  # served

    # a is paused (SIGSTOP) and renews nothing; b keeps renewing and looking.
    trusted_for = LEASE_MS - SETTINGS.margin_ms
    for _ in range(trusted_for // 1_000):
        clock.advance(1_000)
        await settle([b], rounds=1)
        assert_safe([a, b], clock)
    clock.advance(trusted_for % 1_000)
    # Before the database clock lets anyone take the shard, a refuses to answer for it.
    with pytest.raises(LeaseNotTrusted):
        a.table.fence(group, clock.monotonic_ms())
    assert not database.shard_leases[shard].expired(clock.wall_ms())
    assert shard not in b.table.held

    clock.advance(SETTINGS.margin_ms)
    await settle([b], rounds=2)
    assert shard in b.table.held
    # a resumes: its next round finds the shards gone and drops them before anything else.
    await a.keeper.round()
    assert shard in a.lost and shard not in a.table.held
    assert_safe([a, b], clock)


async def test_a_graceful_stop_releases_at_once(database: MemoryDatabase, clock: ManualClock) -> None:
    a, b = Replica("a", database, clock), Replica("b", database, clock)
    await a.keeper.start(run=False)
    await b.keeper.start(run=False)
    await a.keeper.stop(release=True)
    assert a.table.held == {} and sorted(a.lost) == list(range(SHARDS))
    assert "a" not in {r for r, _ in database.replicas.items() if database.replicas[r][1] > clock.wall_ms()}
    await settle([b], rounds=2)  # no time passes
    assert sorted(b.table.held) == list(range(SHARDS))


async def test_a_lost_database_lets_trust_run_out_then_renews(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    a = Replica("a", database, clock)
    await a.keeper.start(run=False)
    a.store.down = True
    clock.advance(3_000)
    await a.keeper.round()
    assert a.keeper.failed_rounds == 1
    assert a.serving(clock.monotonic_ms()) == set(range(SHARDS))  # still within the lease
    clock.advance(LEASE_MS - 3_000 - SETTINGS.margin_ms)
    assert a.serving(clock.monotonic_ms()) == set()
    with pytest.raises(CoordinatorNotAvailable):
        a.table.fence("g", clock.monotonic_ms())
    # Back before anyone took them (nobody else is alive): renewed at the same epochs.
    a.store.down = False
    clock.advance(SETTINGS.margin_ms - 1)
    epochs = {s: h.owner_epoch for s, h in a.table.held.items()}
    await a.keeper.round()
    assert {s: h.owner_epoch for s, h in a.table.held.items()} == epochs
    assert a.serving(clock.monotonic_ms()) == set(range(SHARDS)) and a.lost == []


async def test_the_topics_are_loaded_again_when_another_replica_changed_them(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    calls: list[str] = []
    failing = [False]
    table = ShardTable("a")

    async def topics() -> None:
        calls.append("topics")
        if failing[0]:
            raise StoreUnavailable("down")

    async def acquired(shards: Sequence[int]) -> None:
        calls.append("acquired")
        for shard in shards:
            table.held[shard].loaded = True

    async def lost(shards: Sequence[int]) -> None:
        pass

    keeper = LeaseKeeper(
        MemoryStore("a", database),
        table,
        clock,
        SETTINGS,
        on_acquired=acquired,
        on_lost=lost,
        on_topics=topics,
        log=structlog.get_logger("test"),
    )
    await keeper.start(run=False)
    # Once at the first round (the start's load may be older), before any shard is loaded.
    assert calls == ["topics", "acquired"]
    calls.clear()
    await keeper.round()
    assert calls == []
    other = MemoryStore("b", database)
    await other.put_topic(Topic("00000000-0000-0000-0000-000000000001", "orders", 2))
    failing[0] = True
    await keeper.round()
    failing[0] = False
    await keeper.round()  # the failed load is tried again
    await keeper.round()
    assert calls == ["topics", "topics"]


# -- the runtime: takeover loads groups and restarts their sessions -------------------


@pytest.fixture
async def pair(database: MemoryDatabase, clock: ManualClock) -> AsyncIterator[tuple[Any, Any]]:
    from regroup.server.runtime import Coordinator

    config = GroupConfig(session_timeout_ms=45_000, assignment_interval_ms=0)
    settings = LeaseSettings(shards=SHARDS, lease_ms=LEASE_MS, renew_ms=3_000)
    a = Coordinator(MemoryStore("a", database), config, clock, run_timers=False, leases=settings)
    b = Coordinator(MemoryStore("b", database), config, clock, run_timers=False, leases=settings)
    await a.start()
    await a.create_topics([("orders", 4, ())])
    await b.start()
    yield a, b
    await a.stop()
    await b.stop()


async def test_a_takeover_keeps_members_epochs_and_restarts_their_sessions(pair: tuple[Any, Any]) -> None:
    from regroup.reconciler import ConsumerGroupHeartbeat

    a, b = pair
    clock: ManualClock = a.clock
    joined = await a.consumer_group_heartbeat(
        ConsumerGroupHeartbeat(
            "g",
            "m",
            0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=("orders",),
            owned_topic_partitions=(),
        )
    )
    assert joined.member_epoch == 1
    with pytest.raises(NotCoordinator) as refused:
        await b.consumer_group_heartbeat(ConsumerGroupHeartbeat("g", "m", 1))
    assert refused.value.coordinator_address == a.keeper.settings.address

    # a dies (no release); b takes the shard once a's lease expired, and loads the group.
    clock.advance(40_000)
    await b.keeper.round()
    await b.keeper.round()
    assert b.group("g") is not None and b.group("g").members["m"].member_epoch == 1
    # The member's session restarted at the takeover: not expired 40 s after its last heartbeat.
    for _ in range(10):
        clock.advance(4_000)
        await b.keeper.round()  # b renews as its keeper does every period
        assert await b.expire_due() == []
    answer = await b.consumer_group_heartbeat(ConsumerGroupHeartbeat("g", "m", 1))
    assert answer.member_epoch == 1
    # a wakes: it refuses, then learns in its next round that it lost the shard.
    with pytest.raises(CoordinatorNotAvailable):
        await a.consumer_group_heartbeat(ConsumerGroupHeartbeat("g", "m", 1))
    await a.keeper.round()
    assert a.group("g") is None
    assert len(a.timers) == 1  # only the offsets sweep: the group's timers left with it


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="Linux only")
def test_trust_is_read_on_a_clock_that_counts_suspension(monkeypatch: pytest.MonkeyPatch) -> None:
    """A VM suspended past its lease must not resume trusting it: CLOCK_MONOTONIC
    stops during a suspend, CLOCK_BOOTTIME does not."""
    from regroup.server import clock

    read: list[int] = []

    def clock_gettime_ns(which: int) -> int:
        read.append(which)
        return 7_000_000

    monkeypatch.setattr(clock.time, "clock_gettime_ns", clock_gettime_ns)
    assert clock.SystemClock().monotonic_ms() == 7 and read == [time.CLOCK_BOOTTIME]


async def test_a_wake_that_comes_during_a_round_causes_another_round(
    database: MemoryDatabase, clock: ManualClock
) -> None:
    """A release noticed while this replica's round is in flight must not be lost:
    the round after it runs at once (after the least gap), not at the renewal period."""
    a = Replica("a", database, clock)
    await a.keeper.start(run=False)
    original = a.store.lease_round
    sent, proceed = asyncio.Event(), asyncio.Event()

    async def slow(request: Any) -> Any:
        sent.set()
        await proceed.wait()
        return await original(request)

    a.store.lease_round = slow  # type: ignore[method-assign]
    loop = asyncio.create_task(a.keeper._run())
    try:
        await asyncio.wait_for(sent.wait(), 5)
        a.store.lease_round = original  # type: ignore[method-assign]
        rounds = a.keeper.rounds
        a.keeper.wake.set()  # noticed while the round waits for the database
        proceed.set()
        for _ in range(20):
            await asyncio.sleep(0)
        clock.advance(QUICK_ROUND_MS)  # the least gap between rounds; far below the renewal period
        for _ in range(50):
            if a.keeper.rounds > rounds:
                break
            await asyncio.sleep(0)
        assert a.keeper.rounds == rounds + 1
    finally:
        a.keeper._stopping = True
        a.keeper.wake.set()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
