"""The coordinator runtime on the in-memory store and a manual clock: no database, no
network. Locking, the stale-group reload after a failed write, timers, and the
offloaded target computation (in the real worker process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from regroup.reconciler import (
    ConsumerGroupHeartbeat,
    GroupConfig,
    MemberState,
    OwnedTopicPartitions,
    replay_all,
)
from regroup.reconciler.errors import CoordinatorNotAvailable
from regroup.server.clock import ManualClock
from regroup.server.memstore import MemoryStore
from regroup.server.runtime import Coordinator
from tests.support.leases import MANUAL_LEASES

SESSION_MS = 1_000


@pytest.fixture
async def coordinator() -> AsyncIterator[Coordinator]:
    config = GroupConfig(session_timeout_ms=SESSION_MS, assignment_interval_ms=0)
    c = Coordinator(MemoryStore(), config, ManualClock(), run_timers=False, leases=MANUAL_LEASES)
    await c.start()
    await c.create_topics([("orders", 8, ())])
    yield c
    await c.stop()


def join(member_id: str) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        "g",
        member_id,
        0,
        rebalance_timeout_ms=5_000,
        subscribed_topic_names=("orders",),
        owned_topic_partitions=(),
    )


def beat(c: Coordinator, member_id: str) -> ConsumerGroupHeartbeat:
    member = c.groups["g"].members[member_id]
    if member.member_epoch == 0:
        return join(member_id)  # not in the group's epochs yet: its full request again
    owned = tuple(OwnedTopicPartitions(t, "", tuple(p)) for t, p in member.assigned.items())
    return ConsumerGroupHeartbeat("g", member_id, member.member_epoch, owned_topic_partitions=owned)


def stored(c: Coordinator) -> object:
    store = c.store
    assert isinstance(store, MemoryStore)
    return replay_all(None, "g", store.database.log.get("g", ()))


async def settle(c: Coordinator, members: list[str]) -> None:
    for _ in range(10):
        for m in members:
            await c.consumer_group_heartbeat(beat(c, m))
        if c.groups["g"].state().value == "Stable":
            return
    raise AssertionError("the group did not settle")


async def test_concurrent_operations_on_a_group_are_serialised(coordinator: Coordinator) -> None:
    # Forty joins at once: each runs the engine on the group the previous one left.
    responses = await asyncio.gather(
        *(coordinator.consumer_group_heartbeat(join(f"m{i:02}")) for i in range(40))
    )
    group = coordinator.groups["g"]
    assert len(group.members) == 40
    assert sorted(r.member_epoch for r in responses)[-1] == group.group_epoch == 40
    # What memory holds is what the store holds.
    loaded = stored(coordinator)
    assert loaded is not None and loaded.members == group.members  # type: ignore[attr-defined]


async def test_a_failed_write_reloads_the_group_from_the_store(coordinator: Coordinator) -> None:
    await coordinator.consumer_group_heartbeat(join("a"))
    await settle(coordinator, ["a"])
    store = coordinator.store
    assert isinstance(store, MemoryStore)
    store.commit_then_fail = 1  # b's join commits, then its acknowledgement is lost
    with pytest.raises(CoordinatorNotAvailable):
        await coordinator.consumer_group_heartbeat(join("b"))
    assert "b" not in coordinator.groups["g"].members  # memory did not replay it...
    await coordinator.consumer_group_heartbeat(beat(coordinator, "a"))
    assert "b" in coordinator.groups["g"].members  # ...the reload found it stored


async def test_a_silent_member_is_fenced_when_its_session_runs_out(coordinator: Coordinator) -> None:
    clock = coordinator.clock
    assert isinstance(clock, ManualClock)
    for m in ("a", "b"):
        await coordinator.consumer_group_heartbeat(join(m))
    await settle(coordinator, ["a", "b"])
    clock.advance(SESSION_MS - 1)
    await coordinator.consumer_group_heartbeat(beat(coordinator, "a"))
    assert await coordinator.expire_due() == []
    clock.advance(1)
    assert [(k.member_id, k.kind) for k in await coordinator.expire_due()] == [("b", "session")]
    assert list(coordinator.groups["g"].members) == ["a"]


async def test_a_big_groups_target_is_computed_in_the_worker_while_the_group_serves() -> None:
    config = GroupConfig(assignment_interval_ms=0, inline_assignment_max_partitions=4)
    c = Coordinator(MemoryStore(), config, ManualClock(), run_timers=False, leases=MANUAL_LEASES)
    await c.start()
    try:
        await c.create_topics([("orders", 8, ())])
        first = await c.consumer_group_heartbeat(join("a"))
        # Too big to compute inline: the join bumps the epoch, the target waits for the timer.
        assert (first.member_epoch, c.groups["g"].assignment_epoch) == (0, 0)
        computing = asyncio.create_task(c.expire_due())
        for _ in range(500):  # until the worker has the computation (no lock held meanwhile)
            if "g" in c.scheduler._computing:
                break
            await asyncio.sleep(0.01)
        answered = await c.consumer_group_heartbeat(join("a"))  # its join, sent again
        assert answered.member_id == "a" and not computing.done()
        assert [k.kind for k in await computing] == ["assignment"]
        group = c.groups["g"]
        assert group.assignment_epoch == group.group_epoch == 1
        await settle(c, ["a"])
        assert c.groups["g"].members["a"].state is MemberState.STABLE
        assert sum(len(p) for p in c.groups["g"].members["a"].assigned.values()) == 8
    finally:
        await c.stop()
