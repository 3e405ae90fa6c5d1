"""The assignment worker process: the same records as the engine computes in place,
with only changed targets sent after the first computation, and a whole resend
whenever the worker's copy cannot be trusted."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import pytest

from regroup.reconciler import GroupConfig, Result
from regroup.reconciler.records import TargetAssignmentMemberRecord
from regroup.reconciler.target_assignment import PendingAssignment, pending_assignment
from regroup.server.assigner import Assigner
from tests.support.engine import EngineHarness, join


def big_group() -> EngineHarness:
    """A settled group of 20 members over 1,000 partitions of two topics."""
    h = EngineHarness(config=GroupConfig(), now_ms=10_000)
    h.create_topic("foo", 600)
    h.create_topic("bar", 400)
    for i in range(20):
        h.heartbeat(join("g", f"m{i:02d}", ["foo", "bar"] if i % 3 else ["foo"]))
    return h


def grow(h: EngineHarness, name: str) -> PendingAssignment:
    """Grows a topic by one partition; returns the computation the group then needs."""
    h.grow_topic(name, h.image.by_name[name].num_partitions + 1)
    pending = pending_assignment(h.groups["g"], h.ctx())
    assert pending is not None
    return pending


@pytest.fixture
async def assigner() -> AsyncIterator[Assigner]:
    worker = Assigner(GroupConfig())
    yield worker
    await worker.close()


async def test_the_worker_computes_what_the_engine_computes(assigner: Assigner) -> None:
    h = big_group()
    for name in ("foo", "bar", "foo"):
        pending = grow(h, name)
        records = await assigner.compute("g", pending)
        assert records == pending.compute(h.config)
        assert any(isinstance(r, TargetAssignmentMemberRecord) for r in records)
        h.apply("g", Result(True, tuple(records)))


async def test_after_the_first_computation_only_changed_targets_are_sent(assigner: Assigner) -> None:
    h = big_group()
    pending = grow(h, "foo")
    first, _ = assigner._request("g", pending)
    assert (first.base, len(first.changed)) == (0, 20)
    records = await assigner.compute("g", pending)
    h.apply("g", Result(True, tuple(records)))

    pending = grow(h, "bar")
    request, _ = assigner._request("g", pending)
    moved = [r.member_id for r in records if isinstance(r, TargetAssignmentMemberRecord)]
    assert request.base != 0
    assert sorted(request.changed) == sorted(moved)
    assert await assigner.compute("g", pending) == pending.compute(h.config)


async def test_a_worker_that_lost_its_copy_gets_the_whole_group_again(assigner: Assigner) -> None:
    h = big_group()
    pending = grow(h, "foo")
    h.apply("g", Result(True, tuple(await assigner.compute("g", pending))))

    # The coordinator believes the worker holds a copy the worker does not know.
    token, copy = assigner._sent["g"]
    assigner._sent["g"] = (token + 1_000, copy)
    pending = grow(h, "foo")
    assert await assigner.compute("g", pending) == pending.compute(h.config)
    h.apply("g", Result(True, tuple(await assigner.compute("g", pending))))

    # The worker dies: a new one starts, without copies, and gets the whole group.
    pool = assigner._pool
    assert pool is not None
    for pid in list(pool._processes):
        os.kill(pid, signal.SIGKILL)
    pending = grow(h, "bar")
    assert await assigner.compute("g", pending) == pending.compute(h.config)
    assert assigner._pool is not pool


async def test_a_forgotten_group_is_sent_whole(assigner: Assigner) -> None:
    h = big_group()
    pending = grow(h, "foo")
    h.apply("g", Result(True, tuple(await assigner.compute("g", pending))))
    assigner.forget(["g"])
    pending = grow(h, "foo")
    request, _ = assigner._request("g", pending)
    assert (request.base, request.forget) == (0, ("g",))
    assert await assigner.compute("g", pending) == pending.compute(h.config)
