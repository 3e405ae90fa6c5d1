"""Heartbeats that queue behind a group's write are served as one batch (server/writebatch.py):
the same outcome as serving them one by one, in one transaction, and nothing kept when it fails."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from regroup.reconciler import ConsumerGroupHeartbeat, GroupConfig, Record, replay_all
from regroup.reconciler.errors import CoordinatorNotAvailable
from regroup.reconciler.history import EventType, GroupEvent
from regroup.server.clock import ManualClock
from regroup.server.history import EventQuery
from regroup.server.memstore import MemoryStore
from regroup.server.runtime import Coordinator
from regroup.server.store import Fence, PreparedWrite, StoreUnavailable
from tests.support.leases import MANUAL_LEASES


class YieldingStore(MemoryStore):
    """A memory store whose writes take turns of the event loop, as a database's do:
    heartbeats arriving meanwhile queue for the group's lock. `gate`, when set, holds
    writes until it opens; `fail` names the writes (by call number, from 0) refused."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[int] = []
        self.calls = 0
        self.fail: set[int] = set()
        self.gate: asyncio.Event | None = None

    async def append(
        self,
        group_id: str,
        records: Sequence[Record] | PreparedWrite,
        fence: Fence,
        events: Sequence[GroupEvent] = (),
        keep_events: int = 0,
    ) -> Sequence[int]:
        call, self.calls = self.calls, self.calls + 1
        await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        if call in self.fail:
            raise StoreUnavailable("ConnectionRefusedError: test")
        sequences = await super().append(group_id, records, fence, events, keep_events)
        self.appends.append(len(records) if isinstance(records, Sequence) else -1)
        return sequences


def join(member_id: str) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        "g",
        member_id,
        0,
        rebalance_timeout_ms=5_000,
        subscribed_topic_names=("orders",),
        owned_topic_partitions=(),
    )


async def _coordinator(store: MemoryStore) -> Coordinator:
    config = GroupConfig(assignment_interval_ms=0)
    c = Coordinator(store, config, ManualClock(), run_timers=False, leases=MANUAL_LEASES)
    await c.start()
    await c.create_topics([("orders", 40, ())])
    return c


def _state(c: Coordinator) -> Any:
    g = c.groups["g"]
    return _normal(c, (g.group_epoch, g.assignment_epoch, dict(g.members), dict(g.target), g.state()))


def _normal(c: Coordinator, value: Any) -> str:
    """`value` with the topic's id (random per coordinator) replaced by its name."""
    text = repr(value)
    for topic in c.image.by_id.values():
        text = text.replace(topic.topic_id, topic.name)
    return text


async def test_heartbeats_queued_behind_a_write_are_stored_in_one_transaction_with_the_serial_outcome() -> (
    None
):
    batched_store = YieldingStore()
    batched = await _coordinator(batched_store)
    serial = await _coordinator(MemoryStore())
    try:
        ids = [f"m{i:02}" for i in range(30)]
        answers = await asyncio.gather(*(batched.consumer_group_heartbeat(join(m)) for m in ids))
        expected = [await serial.consumer_group_heartbeat(join(m)) for m in ids]
        # Each answer is what serving them one by one gives.
        assert _normal(batched, answers) == _normal(serial, expected)
        assert _state(batched) == _state(serial)
        # The first join wrote alone; the 29 that queued behind it, in one transaction.
        assert len(batched_store.appends) == 2, batched_store.appends
        # Memory is what the store holds.
        loaded = replay_all(None, "g", batched_store.database.log["g"])
        assert loaded is not None and loaded.members == batched.groups["g"].members
        # And so is the history: the batch's events, each derived from its heartbeat's group.
        query = EventQuery(limit=1_000, oldest_first=True)
        history = [
            (e.type, e.member_id, e.group_epoch) for e in (await batched_store.list_events("g", query))[0]
        ]
        serial_store = serial.store
        assert isinstance(serial_store, MemoryStore)
        assert history == [
            (e.type, e.member_id, e.group_epoch) for e in (await serial_store.list_events("g", query))[0]
        ]
        joined = [m for kind, m, _ in history if kind is EventType.MEMBER_JOINED]
        assert joined == ids
    finally:
        await batched.stop()
        await serial.stop()


async def test_a_failed_batch_fails_each_of_its_heartbeats_and_leaves_memory_untouched() -> None:
    store = YieldingStore()
    c = await _coordinator(store)
    try:
        await c.consumer_group_heartbeat(join("first"))
        store.gate = asyncio.Event()
        # "a" holds the group's lock while its write waits at the gate; b, c, d queue
        # behind it and form one batch, whose write (the next call) is refused.
        first = asyncio.ensure_future(c.consumer_group_heartbeat(join("a")))
        while store.calls == 1:
            await asyncio.sleep(0)
        queued = [asyncio.ensure_future(c.consumer_group_heartbeat(join(m))) for m in "bcd"]
        for _ in range(3):
            await asyncio.sleep(0)
        store.fail = {store.calls}  # the next write: the batch's
        store.gate.set()
        await first
        after_a = _state(c)
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert all(isinstance(r, CoordinatorNotAvailable) for r in results), results
        assert len(store.appends) == 2  # "first" and "a": the batch stored nothing
        assert _state(c) == after_a  # the batch's copy was dropped
        assert not {"b", "c", "d"} & set(c.groups["g"].members)
    finally:
        await c.stop()
