"""The assignment worker process: the same records as the engine computes in place,
with only the members that changed sent after the first computation (learnt from
the replayed records, never by reading every member), and a whole resend whenever
the worker's copy cannot be trusted."""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from regroup.reconciler import GroupConfig, Result, Topic
from regroup.reconciler.assignors import uniform_quota
from regroup.reconciler.drain import drain_member
from regroup.reconciler.records import CurrentAssignmentRecord, TargetAssignmentMemberRecord
from regroup.reconciler.target_assignment import PendingTarget, pending_assignment, pending_target
from regroup.server import assigner as assigner_module
from regroup.server.assigner import Assigner
from tests.support.engine import EngineHarness, beat, join

#: Every target is left to the assignment timer (as for a big group), none computed in a heartbeat.
DEFERRED = GroupConfig(inline_assignment_max_partitions=10)


@dataclass
class WatchedHarness(EngineHarness):
    """Tells the assigner about every write replayed, as the runtime does."""

    assigner: Assigner | None = None

    def apply(self, group_id: str, result: Result[Any]) -> None:
        super().apply(group_id, result)
        if self.assigner is None:
            return
        group = self.groups.get(group_id)
        if group is None:
            self.assigner.forget((group_id,))
        else:
            self.assigner.observe(group_id, group, result.records)


def big_group(assigner: Assigner) -> WatchedHarness:
    """20 members over 1,000 partitions of two topics, the first target computed by the worker."""
    h = WatchedHarness(config=DEFERRED, now_ms=10_000, assigner=assigner)
    h.create_topic("foo", 600)
    h.create_topic("bar", 400)
    for i in range(20):
        h.heartbeat(join("g", f"m{i:02d}", ["foo", "bar"] if i % 3 else ["foo"]))
    return h


def pending(h: EngineHarness) -> PendingTarget:
    target = pending_target(h.groups["g"], h.ctx())
    assert target is not None
    return target


async def compute_and_check(h: WatchedHarness, assigner: Assigner) -> list[Any]:
    """Computes the pending target in the worker, checks it against the engine's
    own computation, applies it; returns its records."""
    expected = pending_assignment(h.groups["g"], h.ctx())
    assert expected is not None
    records = await assigner.compute("g", h.groups["g"], pending(h))
    assert records == expected.compute(h.config)
    h.apply("g", Result(True, tuple(records)))
    return records


def step_all(h: EngineHarness) -> None:
    """Every member heartbeats once, owning what it was given."""
    for member_id, member in sorted(h.groups["g"].members.items()):
        full: dict[str, Any] = {}
        if member.member_epoch == 0:  # not given anything yet: it sends everything again
            full = dict(rebalance_timeout_ms=300_000, subscribed_topic_names=member.subscribed_topic_names)
        h.heartbeat(beat("g", member_id, member.member_epoch, member.assigned, **full))


def grow(h: EngineHarness, name: str) -> None:
    h.grow_topic(name, h.image.by_name[name].num_partitions + 1)


def moved(records: list[Any]) -> list[str]:
    return sorted(r.member_id for r in records if isinstance(r, TargetAssignmentMemberRecord))


@pytest.fixture
async def assigner() -> AsyncIterator[Assigner]:
    worker = Assigner(DEFERRED)
    yield worker
    await worker.close()


async def test_the_worker_computes_what_the_engine_computes(assigner: Assigner) -> None:
    h = big_group(assigner)
    assert moved(await compute_and_check(h, assigner)) == [f"m{i:02d}" for i in range(20)]
    grow(h, "foo")
    await compute_and_check(h, assigner)
    h.heartbeat(join("g", "new", ["bar"]))  # a join
    await compute_and_check(h, assigner)
    step_all(h)
    member = h.groups["g"].members["m04"]
    h.heartbeat(beat("g", "m04", member.member_epoch, subscribed_topic_names=("foo",)))  # a new subscription
    await compute_and_check(h, assigner)
    h.heartbeat(beat("g", "m05", -1))  # a leave
    grow(h, "bar")
    await compute_and_check(h, assigner)
    h.heartbeat(join("g", "rx", [], subscribed_topic_regex="ba.*"))  # by regex
    h.create_topic("baz", 30)
    await compute_and_check(h, assigner)
    h.apply("g", drain_member(h.groups["g"], "g", "m07", "", False, h.ctx()))  # a drain: sent as changed
    records = await compute_and_check(h, assigner)
    assert "m07" in moved(records) and not h.groups["g"].target_of("m07")
    h.apply("g", drain_member(h.groups["g"], "g", "m07", "", True, h.ctx()))  # and back
    await compute_and_check(h, assigner)
    assert h.groups["g"].target_of("m07")


async def test_after_the_first_computation_only_changed_members_are_sent(assigner: Assigner) -> None:
    h = big_group(assigner)
    first = assigner._request("g", h.groups["g"], pending(h))
    assert (first.base, len(first.members), first.size) == (0, 20, 20)
    await compute_and_check(h, assigner)
    step_all(h)
    grow(h, "foo")
    records = await compute_and_check(h, assigner)
    assert moved(records)

    # Members stepping to the new epoch change nothing the assignor reads, and the
    # targets the last computation moved were installed as the worker computed
    # them (its copy took them): nothing is sent.
    step_all(h)
    assert {type(r) for r in h.last_records} == {CurrentAssignmentRecord}
    grow(h, "bar")
    request = assigner._request("g", h.groups["g"], pending(h))
    assert request.base != 0
    assert (request.members, request.removed) == ((), ())
    records = await compute_and_check(h, assigner)
    assert moved(records)

    # A join and a leave are sent.
    h.heartbeat(join("g", "new", ["foo"]))
    h.heartbeat(beat("g", "m07", -1))
    request = assigner._request("g", h.groups["g"], pending(h))
    assert [m[0] for m in request.members] == ["new"]
    assert (request.removed, request.size) == (("m07",), 20)
    await compute_and_check(h, assigner)


async def test_targets_computed_but_not_installed_are_sent_again(assigner: Assigner) -> None:
    """The worker's copy takes the targets it computes; the coordinator may not
    install them (the group moved on): those members are sent with the targets
    the group holds."""
    h = big_group(assigner)
    await compute_and_check(h, assigner)
    step_all(h)
    grow(h, "foo")
    records = await assigner.compute("g", h.groups["g"], pending(h))  # not installed
    assert moved(records)
    grow(h, "bar")
    request = assigner._request("g", h.groups["g"], pending(h))
    assert sorted(m[0] for m in request.members) == moved(records)
    assert all(m[5] == h.groups["g"].target_of(m[0]) for m in request.members)
    await compute_and_check(h, assigner)
    # Installed as computed only in part (a record replayed that is not the worker's
    # own object counts as a change): that member is sent again.
    grow(h, "foo")
    records = await assigner.compute("g", h.groups["g"], pending(h))
    first = next(r for r in records if isinstance(r, TargetAssignmentMemberRecord))
    copied = [
        TargetAssignmentMemberRecord(r.member_id, dict(r.partitions)) if r is first else r for r in records
    ]
    h.apply("g", Result(True, tuple(copied)))
    grow(h, "bar")
    request = assigner._request("g", h.groups["g"], pending(h))
    assert [m[0] for m in request.members] == [first.member_id]
    await compute_and_check(h, assigner)


async def test_a_worker_that_lost_its_copy_gets_the_whole_group_again(assigner: Assigner) -> None:
    h = big_group(assigner)
    await compute_and_check(h, assigner)

    # The coordinator believes the worker holds a copy the worker does not know.
    assigner._sent["g"].token += 1_000
    grow(h, "foo")
    await compute_and_check(h, assigner)

    # The worker dies: a new one starts, without copies, and gets the whole group.
    pool = assigner._pool
    assert pool is not None
    for pid in list(pool._processes):
        os.kill(pid, signal.SIGKILL)
    grow(h, "bar")
    await compute_and_check(h, assigner)
    assert assigner._pool is not pool


async def test_a_missed_join_or_leave_is_caught_by_the_members_count(assigner: Assigner) -> None:
    h = big_group(assigner)
    await compute_and_check(h, assigner)
    h.heartbeat(join("g", "new", ["foo"]))
    assigner._sent["g"].changed.clear()  # as if the runtime had not told it
    await compute_and_check(h, assigner)
    assert "new" in h.groups["g"].target


async def test_a_forgotten_or_reloaded_group_is_sent_whole(assigner: Assigner) -> None:
    h = big_group(assigner)
    await compute_and_check(h, assigner)
    assigner.forget(["g"])
    grow(h, "foo")
    request = assigner._request("g", h.groups["g"], pending(h))
    assert (request.base, request.forget) == (0, ("g",))
    await compute_and_check(h, assigner)

    # A group loaded again from the store is another object: the copy was read from the old one.
    h.groups["g"] = copy.deepcopy(h.groups["g"])
    grow(h, "bar")
    request = assigner._request("g", h.groups["g"], pending(h))
    assert (request.base, len(request.members)) == (0, 20)
    await compute_and_check(h, assigner)


async def test_a_group_that_stops_asking_does_not_collect_changes(assigner: Assigner) -> None:
    h = big_group(assigner)
    await compute_and_check(h, assigner)
    # Members come and go while no computation is asked for: once more ids changed than
    # the group has members, the copy is dropped and the next request sends the group whole.
    for i in range(25):
        h.heartbeat(join("g", f"churn{i}", ["foo"]))
        h.heartbeat(beat("g", f"churn{i}", -1))
    assert "g" not in assigner._sent
    request = assigner._request("g", h.groups["g"], pending(h))
    assert (request.base, len(request.members), request.forget) == (0, 20, ("g",))
    await compute_and_check(h, assigner)


async def test_changes_made_while_the_worker_computes_are_sent_next_time(assigner: Assigner) -> None:
    """The runtime does not hold the group during a computation: a member that changes
    its subscription meanwhile is in the next request."""
    h = big_group(assigner)
    await compute_and_check(h, assigner)
    step_all(h)
    grow(h, "foo")
    computing = asyncio.create_task(assigner.compute("g", h.groups["g"], pending(h)))
    await asyncio.sleep(0)  # the request is built and sent
    member = h.groups["g"].members["m04"]
    h.heartbeat(beat("g", "m04", member.member_epoch, subscribed_topic_names=("bar",)))
    records = await computing
    h.apply("g", Result(True, tuple(records)))

    request = assigner._request("g", h.groups["g"], pending(h))
    assert request.base != 0
    assert "m04" in [m[0] for m in request.members]
    await compute_and_check(h, assigner)
    assert set(h.groups["g"].target["m04"]) == {"bar-id"}


# -- the summary of the targets the worker computed (reconciler/target_summary.py) --


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[Assigner]:
    """An assigner whose worker function runs in this process (in a thread), so
    that its copies and what the assignor reads can be looked at."""
    monkeypatch.setattr(assigner_module, "_config", DEFERRED)
    monkeypatch.setattr(assigner_module, "_copies", {})
    worker = Assigner(DEFERRED)
    pool = ThreadPoolExecutor(1)
    monkeypatch.setattr(worker, "_executor", lambda: pool)
    yield worker
    pool.shutdown()


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many members' current targets the rack- and weight-aware assignor
    read, per read, in the worker (the `in_process` thread; the engine's own
    computation that `compute_and_check` compares with runs on this one)."""
    seen: list[int] = []
    read = uniform_quota._valid_currents

    def counted(member_ids: list[str], *args: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            seen.append(len(member_ids))
        return read(member_ids, *args)

    monkeypatch.setattr(uniform_quota, "_valid_currents", counted)
    return seen


def set_topic(h: EngineHarness, name: str, partitions: int) -> None:
    """A topic whose partition p is in rack a, b or c (p mod 3)."""
    layout = tuple("abc"[p % 3] for p in range(partitions))
    h.image = h.image.with_topic(Topic(f"{name}-id", name, partitions, layout))
    h.refresh_all()


def racked_group(assigner: Assigner) -> WatchedHarness:
    """20 members in racks a, b and d (no partitions), capacities 1 - 3, over
    100 partitions in racks a, b, c: the rack- and weight-aware uniform assignor."""
    h = WatchedHarness(config=DEFERRED, now_ms=10_000, assigner=assigner)
    set_topic(h, "foo", 60)
    set_topic(h, "bar", 40)
    for i in range(20):
        h.heartbeat(join("g", f"m{i:02d}", ["foo", "bar"], rack_id="abd"[i % 3], capacity=1 + i % 3))
    return h


async def test_the_worker_reads_no_target_it_computed_itself(in_process: Assigner, scans: list[int]) -> None:
    """A join over targets the worker computed is computed from their summary,
    not by reading them; anything it cannot vouch for is read again. Every
    computation gives what the engine computes from the targets themselves."""
    h = racked_group(in_process)
    await compute_and_check(h, in_process)  # from nothing: nothing to read
    step_all(h)
    h.heartbeat(join("g", "new", ["foo", "bar"], rack_id="a", capacity=2))
    records = await compute_and_check(h, in_process)
    assert "new" in moved(records)
    assert scans == []

    # A leave: its partitions are unheld, and which ones only the targets tell.
    step_all(h)
    h.heartbeat(beat("g", "m04", -1))
    await compute_and_check(h, in_process)
    assert scans == [20]
    # Then joins are computed from the summary again.
    step_all(h)
    h.heartbeat(join("g", "new2", ["foo", "bar"], rack_id="b"))
    await compute_and_check(h, in_process)
    assert scans == [20]

    # A member that moves rack (its local count changes): read.
    step_all(h)
    member = h.groups["g"].members["m05"]
    h.heartbeat(beat("g", "m05", member.member_epoch, member.assigned, rack_id="a"))
    await compute_and_check(h, in_process)
    assert scans == [20, 21]

    # New topic metadata (a topic grown: a new Topic object): read.
    step_all(h)
    set_topic(h, "bar", 41)
    await compute_and_check(h, in_process)
    assert scans == [20, 21, 21]

    # Targets computed but not installed: the members are sent again, then read.
    step_all(h)
    h.heartbeat(join("g", "new3", ["foo", "bar"], rack_id="c"))
    await in_process.compute("g", h.groups["g"], pending(h))
    set_topic(h, "foo", 60)  # the same metadata, but a new object
    await compute_and_check(h, in_process)
    assert scans[-1] == 22
