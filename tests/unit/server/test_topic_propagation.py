"""Every acknowledged topic change reaches every group it concerns, on every replica,
whatever fails on the way (issue 37, item 7).

Two coordinators share one in-memory database (as replicas share Postgres), each
serving one group of two members subscribed to `ev-topic`. The topic is grown
through replica `a`, with a store failure injected at one step of the path: the
topic's write, the lease round that reads the topics version, the topics' load,
the group's refresh write (failed, or committed and then failed), or a store that
answers again while the coordinator still believes it away. Once the store
answers, lease rounds and timers run as their loops would run them, on a manual
clock, and every group ends with one epoch bump, a target over the new partitions,
and one TOPIC_GROWN event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from regroup.reconciler import ConsumerGroupHeartbeat, GroupConfig, GroupState, OwnedTopicPartitions
from regroup.reconciler.errors import CoordinatorNotAvailable
from regroup.reconciler.history import EventType, GroupEvent
from regroup.server.clock import ManualClock
from regroup.server.history import EventQuery
from regroup.server.leasekeeper import LeaseSettings
from regroup.server.memstore import MemoryDatabase, MemoryStore
from regroup.server.runtime import Coordinator
from regroup.server.storewatch import StoreWatch

TOPIC = "ev-topic"
LEASES = LeaseSettings(shards=8, lease_ms=30_000, renew_ms=3_000)
CONFIG = GroupConfig(session_timeout_ms=600_000, assignment_interval_ms=0)
#: Steps of the drive (each a second of the manual clock) a change may take to arrive.
MAX_STEPS = 10


@dataclass
class Replica:
    coordinator: Coordinator
    store: MemoryStore
    watch: StoreWatch
    group_id: str = ""

    async def step(self) -> None:
        """What the replica's loops do in a second: check the store, run a lease round,
        fire the due timers."""
        await self.watch.check()
        await self.coordinator.keeper.round()
        await self.coordinator.expire_due()

    def believe_down(self) -> None:
        """The store answers, but this replica's watch saw it fail last."""
        self.watch.available = False


def _replica(name: str, database: MemoryDatabase, clock: ManualClock) -> Replica:
    store = MemoryStore(name, database)
    coordinator = Coordinator(store, CONFIG, clock, run_timers=False, leases=LEASES)

    async def changed(available: bool) -> None:  # as the app's
        if available:
            coordinator.store_available()

    watch = coordinator.watch = StoreWatch(store.ping, changed, interval_s=1.0)
    return Replica(coordinator, store, watch)


def _join(group_id: str, member_id: str) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id,
        member_id,
        0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=(TOPIC,),
        owned_topic_partitions=(),
    )


async def _settle(c: Coordinator, group_id: str, members: list[str]) -> None:
    for _ in range(10):
        group = c.groups[group_id]
        if group.state() is GroupState.STABLE:
            return
        for m in members:
            member = group.members[m]
            owned = tuple(OwnedTopicPartitions(t, "", tuple(p)) for t, p in member.assigned.items())
            await c.consumer_group_heartbeat(
                ConsumerGroupHeartbeat(group_id, m, member.member_epoch, owned_topic_partitions=owned)
            )
    raise AssertionError(f"{group_id} did not settle")


@pytest.fixture
async def replicas() -> AsyncIterator[list[Replica]]:
    clock = ManualClock()
    database = MemoryDatabase(clock=clock.wall_ms)
    a, b = _replica("a", database, clock), _replica("b", database, clock)
    await a.coordinator.start()
    await a.coordinator.create_topics([(TOPIC, 8, ())])
    await b.coordinator.start()
    for _ in range(4):  # a releases half of the shards, b takes them
        await a.coordinator.keeper.round()
        await b.coordinator.keeper.round()
    for replica in (a, b):
        held = replica.coordinator.shards
        replica.group_id = next(g for g in (f"group-{i}" for i in range(100)) if held.shard(g) in held.held)
        for m in ("m1", "m2"):
            await replica.coordinator.consumer_group_heartbeat(_join(replica.group_id, m))
        await _settle(replica.coordinator, replica.group_id, ["m1", "m2"])
    yield [a, b]
    for replica in (a, b):
        await replica.coordinator.stop()


def _targets(c: Coordinator, group_id: str) -> set[int]:
    group = c.groups[group_id]
    topic_id = c.image.by_name[TOPIC].topic_id
    return {p for m in group.members for p in group.target_of(m).get(topic_id, ())}


async def _events(c: Coordinator, group_id: str) -> list[GroupEvent]:
    events, _ = await c.store.list_events(group_id, EventQuery(oldest_first=True, limit=1000))
    return events


def _reached(replicas: list[Replica], epochs: dict[str, int]) -> bool:
    return all(
        r.coordinator.groups[r.group_id].group_epoch > epochs[r.group_id]
        and _targets(r.coordinator, r.group_id) == set(range(10))
        for r in replicas
    )


async def _second(replicas: list[Replica]) -> None:
    """A second of the replicas' loops."""
    clock = replicas[0].coordinator.clock
    assert isinstance(clock, ManualClock)
    clock.advance(1_000)
    for r in replicas:
        await r.step()


async def _until(replicas: list[Replica], reached: Callable[[], bool]) -> int:
    """Runs the replicas' loops a second at a time until `reached`; the seconds it took."""
    for second in range(MAX_STEPS):
        if reached():
            return second
        await _second(replicas)
    raise AssertionError("the change never reached every group")


def _inject_topic_write_in_doubt(a: Replica, b: Replica) -> None:
    a.store.commit_then_fail = 1  # the topic is stored, but its answer is lost


def _inject_lease_round(a: Replica, b: Replica) -> None:
    b.store.fail_calls["lease_round"] = 2


def _inject_topics_load(a: Replica, b: Replica) -> None:
    b.store.fail_calls["load_topics"] = 2


def _inject_refresh_write_here(a: Replica, b: Replica) -> None:
    a.store.fail_calls["append"] = 1


def _inject_refresh_write_there(a: Replica, b: Replica) -> None:
    b.store.fail_calls["append"] = 1


def _inject_refresh_write_in_doubt_there(a: Replica, b: Replica) -> None:
    b.store.commit_then_fail = 1


def _inject_store_back_unnoticed(a: Replica, b: Replica) -> None:
    """The issue's case: Postgres is back, and the watches have not noticed yet."""
    a.believe_down()
    b.believe_down()


INJECTIONS = {
    "topic write in doubt": _inject_topic_write_in_doubt,
    "lease round (topics version) on the other replica": _inject_lease_round,
    "topics load on the other replica": _inject_topics_load,
    "refresh write on the changing replica": _inject_refresh_write_here,
    "refresh write on the other replica": _inject_refresh_write_there,
    "refresh write in doubt on the other replica": _inject_refresh_write_in_doubt_there,
    "store back but believed away on both": _inject_store_back_unnoticed,
}


@pytest.mark.parametrize("step", list(INJECTIONS))
async def test_a_growth_reaches_every_group_whatever_step_fails(replicas: list[Replica], step: str) -> None:
    a, b = replicas
    epochs = {r.group_id: r.coordinator.groups[r.group_id].group_epoch for r in replicas}
    INJECTIONS[step](a, b)

    outcome = (await a.coordinator.create_partitions([(TOPIC, "", 10, ())]))[0]
    if step == "topic write in doubt":
        assert isinstance(outcome.error, CoordinatorNotAvailable)  # but it is stored
    else:
        assert outcome.error is None
    await _until(replicas, lambda: _reached(replicas, epochs))

    for r in replicas:
        c = r.coordinator
        assert c.image.by_name[TOPIC].num_partitions == 10
        assert c.groups[r.group_id].group_epoch == epochs[r.group_id] + 1
        grown = [e for e in await _events(c, r.group_id) if e.type is EventType.TOPIC_GROWN]
        assert [(e.topic_name, e.partition_count) for e in grown] == [(TOPIC, 10)]
    # Refreshes of groups already at the latest topics (retried, or asked again) change nothing.
    commits = [r.store.commits for r in replicas]
    for _ in range(3):
        await _second(replicas)
        for r in replicas:
            await r.coordinator.refresher.refresh([r.group_id])
    assert all(r.coordinator.groups[r.group_id].group_epoch == epochs[r.group_id] + 1 for r in replicas)
    assert [r.store.commits for r in replicas] == commits


async def test_the_stores_return_tries_the_waiting_refreshes_at_once(replicas: list[Replica]) -> None:
    a = replicas[0]
    c, group_id = a.coordinator, a.group_id
    epoch = c.groups[group_id].group_epoch
    a.believe_down()
    assert (await c.create_partitions([(TOPIC, "", 10, ())]))[0].error is None
    assert c.groups[group_id].group_epoch == epoch  # refused: the store is believed away

    await a.watch.check()  # it answers: no second passes, the refresh is due already
    await c.expire_due()
    assert c.groups[group_id].group_epoch == epoch + 1


# -- each change in the history, also when another write's bump takes it in ----------


def _since(events: list[GroupEvent], sequence: int) -> list[tuple[EventType, str]]:
    return [(e.type, e.reason) for e in events if e.sequence > sequence]


@pytest.mark.parametrize("joins", [1, 2], ids=["one join", "two joins served as one write"])
async def test_a_growth_a_join_takes_in_first_is_told_by_the_joins_bump(
    replicas: list[Replica], joins: int
) -> None:
    """The refresh failed; members join before it is tried again. Their bump computes
    the group's metadata from the grown topic: it tells the growth, once, and the
    refresh tried afterwards finds nothing left to do."""
    a = replicas[0]
    c, group_id = a.coordinator, a.group_id
    last = (await _events(c, group_id))[-1].sequence
    a.store.fail_calls["append"] = 1
    assert (await c.create_partitions([(TOPIC, "", 10, ())]))[0].error is None
    epoch = c.groups[group_id].group_epoch

    await asyncio.gather(*(c.consumer_group_heartbeat(_join(group_id, f"new{i}")) for i in range(joins)))
    await _second(replicas)  # the refresh's retry

    told = _since(await _events(c, group_id), last)
    assert told.count((EventType.TOPIC_GROWN, "grown")) == 1
    assert told[: told.index((EventType.GROUP_EPOCH_BUMPED, "member_joined")) + 1] == [
        (EventType.TOPIC_GROWN, "grown"),
        (EventType.MEMBER_JOINED, "joined"),
        (EventType.GROUP_EPOCH_BUMPED, "member_joined"),
    ]
    assert c.groups[group_id].group_epoch == epoch + joins  # the joins' bumps, no other


async def test_two_growths_one_bump_takes_in_are_both_told(replicas: list[Replica]) -> None:
    a = replicas[0]
    c, group_id = a.coordinator, a.group_id
    last = (await _events(c, group_id))[-1].sequence
    epoch = c.groups[group_id].group_epoch
    a.store.fail_calls["append"] = 1
    assert (await c.create_partitions([(TOPIC, "", 10, ())]))[0].error is None
    assert (await c.create_partitions([(TOPIC, "", 12, ())]))[0].error is None

    events = [e for e in await _events(c, group_id) if e.sequence > last]
    grown = [(e.partition_count, e.group_epoch) for e in events if e.type is EventType.TOPIC_GROWN]
    assert grown == [(10, epoch + 1), (12, epoch + 1)]
    assert c.groups[group_id].group_epoch == epoch + 1


async def test_a_refresh_waiting_for_a_group_that_left_is_forgotten(replicas: list[Replica]) -> None:
    a = replicas[0]
    c, group_id = a.coordinator, a.group_id
    a.believe_down()
    await c.create_partitions([(TOPIC, "", 10, ())])
    assert group_id in c.refresher._waiting

    await c.keeper.stop(release=True)  # hands its shards over: the group leaves, its timers too
    assert group_id not in c.groups and group_id not in c.refresher._waiting
    c.store_available()
    assert await c.expire_due() == []
