"""The summary of the targets (reconciler/target_summary.py): what the rack-
and weight-aware uniform assignor says of the targets it returns is what they
hold, and a computation handed that summary back, instead of reading the
targets, computes exactly what one that reads them does."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.reconciler import GroupConfig, Record, Topic, replay_all
from regroup.reconciler.assignors import (
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    TargetSummary,
    UniformAssignor,
    uniform_quota,
)
from regroup.reconciler.model import Assignment, make_assignment
from regroup.reconciler.records import TargetAssignmentEpochRecord
from regroup.reconciler.target_assignment import install_computed_target, pending_assignment, pending_target
from regroup.reconciler.target_summary import ComputedSummary, TargetSummaryKeeper
from regroup.server.memstore import _as_stored
from tests.support.depth import examples
from tests.support.engine import EngineHarness, beat, join

UNIFORM = UniformAssignor()


@st.composite
def specs(draw: st.DrawFn) -> GroupSpec:
    """A homogeneous group of 1 - 12 members (racks a, b, c, d or none; weighted
    or not) over 1 - 4 topics of 1 - 30 partitions (racks cycling, random or
    none), each partition held by a random member or none."""
    topics: dict[str, Topic] = {}
    for i in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 30))
        kind = draw(st.sampled_from(["cycle", "random", "none"]))
        layout: tuple[str, ...] = ()
        if kind == "cycle":
            layout = tuple("abc"[p % 3] for p in range(n))
        elif kind == "random":
            layout = tuple(draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n)))
        topics[f"T{i}"] = Topic(f"T{i}", f"t{i}", n, layout)
    member_ids = [f"m{i:02d}" for i in range(draw(st.integers(1, 12)))]
    weighted = draw(st.booleans())
    held: dict[str, list[tuple[str, int]]] = {m: [] for m in member_ids}
    if draw(st.booleans()):  # else a new group: nothing held
        for t, topic in topics.items():
            for p in range(topic.num_partitions):
                holder = draw(st.sampled_from([None, *member_ids]))
                if holder is not None:
                    held[holder].append((t, p))
    members = {
        m: MemberSpec(
            m,
            None,
            draw(st.sampled_from([None, "a", "b", "c", "d"])),
            frozenset(topics),
            make_assignment((t, [p]) for t, p in held[m]),
            draw(st.integers(1, 4)) if weighted else 1,
        )
        for m in member_ids
    }
    return GroupSpec(members=members, topics=topics)


def recount(spec: GroupSpec, targets: list[Assignment]) -> tuple[list[int], list[int]]:
    """Each target's size and its partitions in its member's rack, counted."""
    sizes, local = [], []
    for member, target in zip(spec.members.values(), targets, strict=True):
        sizes.append(sum(map(len, target.values())))
        racks = {t: spec.topics[t].partition_racks for t in target}
        local.append(
            sum(1 for t, ps in target.items() for p in ps if racks[t] and racks[t][p] == member.rack_id)
            if member.rack_id is not None
            else 0
        )
    return sizes, local


def summarised(spec: GroupSpec) -> GroupAssignment | None:
    """The uniform assignor's result, when it came with a summary (weights or racks in play)."""
    result = UNIFORM.assign(spec)
    assert isinstance(result, GroupAssignment)
    return result if result.summary is not None else None


@settings(max_examples=examples(300), deadline=None)
@given(spec=specs())
def test_the_summary_counts_the_targets_returned(spec: GroupSpec) -> None:
    result = summarised(spec)
    if result is None:
        return  # neither weights nor racks: the rack-blind code, which gives none
    assert result.summary is not None
    sizes, local = recount(spec, list(result.targets))
    assert list(result.summary.sizes) == sizes
    if result.summary.local_counts is not None:
        assert list(result.summary.local_counts) == local


@settings(max_examples=examples(300), deadline=None)
@given(spec=specs(), data=st.data())
def test_a_computation_given_the_summary_computes_what_reading_the_targets_does(
    spec: GroupSpec, data: st.DataObject
) -> None:
    """The result fed back with its summary as the keeper holds it, after
    members join (nothing held), leave, or change capacity."""
    first = summarised(spec)
    if first is None:
        return
    assert first.summary is not None
    keeper = TargetSummaryKeeper()
    keeper.computed(ComputedSummary(list(first.member_ids), first.summary, "topics"))
    members = {
        m: dataclasses.replace(
            s, current=first[m], capacity=data.draw(st.integers(1, 4)) if s.capacity != 1 else 1
        )
        for m, s in spec.members.items()
    }
    for m in data.draw(st.lists(st.sampled_from(sorted(members)), unique=True, max_size=2)):
        if len(members) > 1:
            del members[m]
            keeper.removed(m)
    for i in range(data.draw(st.integers(0, 3))):
        rack = data.draw(st.sampled_from([None, "a", "b", "c"]))
        members[f"n{i}"] = MemberSpec(f"n{i}", None, rack, frozenset(spec.topics), {}, 1)
    members = dict(sorted(members.items()))
    following = dataclasses.replace(spec, members=members)
    summary = keeper.summary(list(members), "topics")
    assert summary is not None
    told = UNIFORM.assign(dataclasses.replace(following, current_summary=summary))
    assert dict(told) == dict(UNIFORM.assign(following))


def test_the_summary_stands_for_reading_the_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a summary that holds every partition, the targets are not read; one
    that leaves partitions unheld (a member left) or lacks the local counts
    racks need is not enough."""
    topics = {"T": Topic("T", "t", 12, tuple("ab"[p % 2] for p in range(12)))}
    members = {m: MemberSpec(m, None, rack, frozenset(topics), {}) for m, rack in (("m0", "a"), ("m1", "b"))}
    spec = GroupSpec(members=members, topics=topics)
    first = summarised(spec)
    assert first is not None and first.summary is not None
    reads: list[int] = []
    read = uniform_quota._valid_currents
    monkeypatch.setattr(
        uniform_quota, "_valid_currents", lambda ids, *a: reads.append(len(ids)) or read(ids, *a)
    )
    joined = {
        **{m: dataclasses.replace(s, current=first[m]) for m, s in members.items()},
        "m2": MemberSpec("m2", None, "a", frozenset(topics), {}),
    }
    after = dataclasses.replace(spec, members=joined)
    sizes = [*first.summary.sizes, 0]
    local = [*(first.summary.local_counts or ()), 0]
    expected = dict(UNIFORM.assign(after))
    assert reads == [3]
    assert (
        dict(UNIFORM.assign(dataclasses.replace(after, current_summary=TargetSummary(sizes, local))))
        == expected
    )
    assert reads == [3]  # not read
    for partial in (TargetSummary(sizes, None), TargetSummary([sizes[0], 0, 0], [local[0], 0, 0])):
        assert dict(UNIFORM.assign(dataclasses.replace(after, current_summary=partial))) == expected
    assert reads == [3, 3, 3]


def test_the_keeper_vouches_only_for_what_the_last_computation_gave() -> None:
    keeper = TargetSummaryKeeper()
    assert keeper.summary(["a"], 1) is None  # nothing computed yet
    computed = ComputedSummary(["a", "b"], TargetSummary([3, 2], [1, 2]), 1)
    keeper.computed(computed)
    assert keeper.summary(["a", "b"], 1) is computed.summary  # the same members: as computed
    assert keeper.summary(["a", "b", "c"], 1) == TargetSummary(
        [3, 2, 0], [1, 2, 0]
    )  # c joined: holds nothing
    assert keeper.summary(["a", "b"], 2) is None  # other topics
    copy = keeper.copy()
    keeper.changed("c", {})  # a member sent again with no target: still vouched for
    keeper.removed("b")
    assert keeper.summary(["a", "c"], 1) == TargetSummary([3, 0], [1, 0])
    assert keeper.summary(["a", "b"], 1) == TargetSummary([3, 0], [1, 0])  # b emptied
    assert copy.summary(["a", "b"], 1) == TargetSummary([3, 2], [1, 2])  # the copy was not told
    keeper.changed("a", {"T": frozenset({0})})  # a target from elsewhere
    assert keeper.summary(["a", "c"], 1) is None
    assert copy.summary(["a", "b"], 1) is not None
    keeper.changed("a", {})  # emptied again: vouched for (it holds nothing)
    assert keeper.summary(["a", "c"], 1) == TargetSummary([0, 0], [0, 0])
    keeper.computed(None)  # a computation that gave no summary
    assert keeper.summary(["a", "c"], 1) is None
    keeper.computed(ComputedSummary(["a", "c"], TargetSummary([1, 1]), 3))
    assert keeper.summary(["a", "c"], 3) == TargetSummary([1, 1], None)
    keeper.computed(None)  # targets installed from elsewhere (a client's): nothing vouched for
    assert keeper.summary(["a", "c"], 3) is None


# -- the group's own keeper (targets computed inline) -------------------------------


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many members each read of the current targets covered."""
    counted: list[int] = []
    read = uniform_quota._valid_currents
    monkeypatch.setattr(
        uniform_quota, "_valid_currents", lambda ids, *a: counted.append(len(ids)) or read(ids, *a)
    )
    return counted


def _racked_harness(interval_ms: int = 0) -> EngineHarness:
    h = EngineHarness(config=GroupConfig(assignment_interval_ms=interval_ms))
    for name, count in (("t0", 12), ("t1", 7)):
        h.image = h.image.with_topic(
            Topic(f"{name}-id", name, count, tuple("abc"[p % 3] for p in range(count)))
        )
    return h


def _join(h: EngineHarness, member: str, rack: str) -> None:
    h.heartbeat(join("g", member, ["t0", "t1"], rack_id=rack))


def test_joins_over_targets_computed_in_heartbeats_read_no_target(reads: list[int]) -> None:
    h = _racked_harness()
    for i, rack in enumerate("abcab"):
        _join(h, f"m{i}", rack)
    # The first computation had no targets to read; each join after it was given
    # the summary of the one before.
    assert reads == []
    assert h.groups["g"].target_summary.summary(sorted(h.groups["g"].members), None) is None  # other topics
    h.heartbeat(beat("g", "m1", -1))
    _join(h, "m5", "c")  # the leave's partitions are held by nobody: read
    assert reads == [5]


def test_joins_over_targets_computed_by_the_timer_read_no_target(reads: list[int]) -> None:
    h = _racked_harness(interval_ms=5_000)
    _join(h, "m0", "a")
    for i, rack in enumerate("bca", start=1):
        _join(h, f"m{i}", rack)  # not due: the timer computes
        h.advance(5_000)
    assert h.timer_computations and reads == []


def test_what_changes_a_target_from_elsewhere_is_read_again(reads: list[int]) -> None:
    """A rack move or new topic metadata between computations (the timer's),
    and a target installed from a computation made elsewhere."""
    h = _racked_harness(interval_ms=5_000)
    for i, rack in enumerate("abc"):
        _join(h, f"m{i}", rack)
        h.advance(5_000)
    assert reads == []
    group = h.groups["g"]
    h.heartbeat(beat("g", "m0", group.members["m0"].member_epoch, group.members["m0"].assigned, rack_id="c"))
    h.advance(5_000)
    assert reads == [3]  # m0 counts differently now
    h.image = h.image.with_topic(Topic("t1-id", "t1", 7, tuple("cba"[p % 3] for p in range(7))))
    h.refresh_all()
    h.advance(5_000)
    assert reads == [3, 3]  # the same topics, other racks
    _join(h, "m3", "a")
    h.advance(5_000)
    assert reads == [3, 3]
    # A target computed in the worker (its records carry no summary) or by a
    # client: the group's keeper vouches for nothing until it computes again.
    group = h.groups["g"]
    records = pending_assignment(group, h.ctx())
    assert records is None
    _join(h, "m4", "b")
    pending = pending_target(h.groups["g"], h.ctx())
    assert pending is not None
    group = h.groups["g"]
    computed = pending.with_members(group.members, group.target, group.member_ids_in_order())
    h.apply("g", install_computed_target(group, computed.compute(h.config), h.ctx()))
    assert h.groups["g"].target_summary.summary(list(computed.spec.members), None) is None
    _join(h, "m5", "c")
    h.advance(5_000)
    assert reads[-1] == 6


def test_a_group_loaded_from_its_stored_records_reads_its_targets_once(reads: list[int]) -> None:
    """The summary is soft state: the stored epoch record has none."""
    h = _racked_harness()
    log: list[Record] = []
    for i, rack in enumerate("abc"):
        _join(h, f"m{i}", rack)
        log.extend(h.last_records)
    epoch_records = [r for r in log if isinstance(r, TargetAssignmentEpochRecord)]
    assert all(r.summary is not None for r in epoch_records)
    stored = [_as_stored(r) for r in log]
    assert epoch_records[0] == dataclasses.replace(epoch_records[0], summary=None)  # not compared
    assert not any(isinstance(r, TargetAssignmentEpochRecord) and r.summary for r in stored)
    loaded = replay_all(None, "g", stored)
    assert loaded is not None
    h.groups["g"] = loaded
    _join(h, "m3", "a")
    _join(h, "m4", "b")
    assert reads == [4]


@settings(max_examples=examples(200), deadline=None)
@given(
    data=st.data(),
    computed_ids=st.lists(st.sampled_from([f"m{i:02}" for i in range(30)]), unique=True, max_size=20),
)
def test_a_summary_spliced_for_the_members_told_of_equals_one_looked_up(
    data: st.DataObject, computed_ids: list[str]
) -> None:
    """Joins, leaves and emptied targets the keeper was told of, and members
    in or out it was not told of (or in another order): the summary is the
    computation's entry for every member it still vouches for, 0 for the rest."""
    computed_ids.sort()
    sizes = [data.draw(st.integers(0, 5)) for _ in computed_ids]
    local = [data.draw(st.integers(0, s)) for s in sizes]
    keeper = TargetSummaryKeeper()
    keeper.computed(ComputedSummary(list(computed_ids), TargetSummary(sizes, local), "k"))
    members = set(computed_ids)
    emptied: set[str] = set()
    for member_id in data.draw(st.lists(st.sampled_from([f"m{i:02}" for i in range(30)]), max_size=6)):
        action = data.draw(st.sampled_from(["join", "leave", "empty", "untold"]))
        if action == "join" and member_id not in members:
            members.add(member_id)
            keeper.joined(member_id)
            emptied.add(member_id)
        elif action == "leave" and member_id in members:
            members.discard(member_id)
            keeper.removed(member_id)
            emptied.add(member_id)
        elif action == "empty" and member_id in members:
            keeper.changed(member_id, {})
            emptied.add(member_id)
        elif action == "untold" and member_id in members and member_id not in emptied:
            members.discard(member_id)  # withheld (draining): not told, still vouched for
    order = sorted(members)
    if data.draw(st.booleans()):
        order.reverse()
    by_id = {m: (s, c) for m, s, c in zip(computed_ids, sizes, local, strict=True) if m not in emptied}
    expected = TargetSummary(
        [by_id.get(m, (0, 0))[0] for m in order], [by_id.get(m, (0, 0))[1] for m in order]
    )
    assert keeper.summary(order, "k") == expected
