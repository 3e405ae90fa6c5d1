"""The client-side assignors: range, uniform, eager, incremental_cooperative."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Iterable, Mapping
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.client.assignors import (
    CONNECT,
    CONSUMER,
    AssignmentPlan,
    AssignorMember,
    ClientAssignor,
    EagerAssignor,
    GroupSnapshot,
    IncrementalCooperativeAssignor,
    RangeAssignor,
    TopicInfo,
    UniformAssignor,
)
from regroup.client.assignors.base import Resource
from regroup.client.types import ConnectorTaskId, TopicPartition
from tests.support.depth import examples

DELAY = 300_000

#: (member id, subscribed topics, current assignment)
MemberSpec = tuple[str, Iterable[str], Iterable[Resource]]


# ---------------------------------------------------------------- helpers


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p, f"id-{topic}")


def T(connector: str, task: int) -> ConnectorTaskId:
    return ConnectorTaskId(connector, task)


def consumer_group(
    topics: Mapping[str, int],
    members: Iterable[MemberSpec],
) -> GroupSnapshot:
    ms = tuple(
        sorted(
            (
                AssignorMember(mid, subscribed_topics=frozenset(subs), assignment=frozenset(assigned))
                for mid, subs, assigned in members
            ),
            key=lambda m: m.member_id,
        )
    )
    return GroupSnapshot(
        group_id="g",
        group_type=CONSUMER,
        group_epoch=1,
        assignor="uniform",
        members=ms,
        topics=tuple(TopicInfo(f"id-{name}", name, n) for name, n in sorted(topics.items())),
    )


def worker(mid: str, url: str = "", assignment: Iterable[Resource] = ()) -> AssignorMember:
    return AssignorMember(mid, url=url, assignment=frozenset(assignment))


def connect_group(
    connectors: Mapping[str, int], workers: Iterable[AssignorMember], state: bytes = b"", now_ms: int = 0
) -> GroupSnapshot:
    return GroupSnapshot(
        group_id="c",
        group_type=CONNECT,
        group_epoch=1,
        assignor="incremental_cooperative",
        members=tuple(sorted(workers, key=lambda m: m.member_id)),
        connectors=dict(connectors),
        state=state,
        now_ms=now_ms,
    )


def check_valid(group: GroupSnapshot, plan: AssignmentPlan) -> None:
    """What the coordinator checks, plus: every member appears."""
    assert plan.error == 0, plan.error_message
    members = {m.member_id: m for m in group.members}
    assert set(plan.assignments) == set(members)
    seen: list[Resource] = [r for rs in plan.assignments.values() for r in rs]
    assert len(seen) == len(set(seen)), "a resource assigned twice"
    assert not (set(seen) & plan.unassigned)
    assert set(seen) | plan.unassigned == group.resources()
    if group.group_type == CONSUMER:
        for mid, rs in plan.assignments.items():
            for r in rs:
                assert isinstance(r, TopicPartition)
                assert r.topic in members[mid].subscribed_topics


def counts(plan: AssignmentPlan, kind: type | None = None) -> dict[str, int]:
    return {
        mid: sum(1 for r in rs if kind is None or isinstance(r, kind)) for mid, rs in plan.assignments.items()
    }


def spread(plan: AssignmentPlan, kind: type | None = None) -> int:
    c = counts(plan, kind).values()
    return max(c) - min(c) if c else 0


def moved(before: Mapping[str, frozenset[Resource]], after: Mapping[str, frozenset[Resource]]) -> int:
    """How many resources that had an owner now have another."""
    owner = {r: mid for mid, rs in before.items() for r in rs}
    return sum(1 for mid, rs in after.items() for r in rs if r in owner and owner[r] != mid)


def test_assignors_satisfy_the_protocol() -> None:
    assignors: list[ClientAssignor] = [
        RangeAssignor(),
        UniformAssignor(),
        EagerAssignor(),
        IncrementalCooperativeAssignor(),
    ]
    assert [a.name for a in assignors] == ["range", "uniform", "eager", "incremental_cooperative"]
    for a in assignors:
        version, _ = a.metadata()
        assert a.minimum_version <= version <= a.maximum_version


def test_wrong_group_type_is_an_error() -> None:
    consumer = consumer_group({"a": 1}, [("m1", ["a"], [])])
    connect = connect_group({"A": 1}, [worker("w1")])
    assert RangeAssignor().assign(connect).error != 0
    assert UniformAssignor().assign(connect).error != 0
    assert EagerAssignor().assign(consumer).error != 0
    assert IncrementalCooperativeAssignor().assign(consumer).error != 0


# ---------------------------------------------------------------- range


def test_range_contiguous_ranges_extra_to_the_first() -> None:
    group = consumer_group({"a": 5, "b": 2}, [("m1", ["a", "b"], []), ("m2", ["a", "b"], [])])
    plan = RangeAssignor().assign(group)
    check_valid(group, plan)
    assert plan.assignments["m1"] == {tp("a", 0), tp("a", 1), tp("a", 2), tp("b", 0)}
    assert plan.assignments["m2"] == {tp("a", 3), tp("a", 4), tp("b", 1)}


def test_range_only_subscribed_topics_and_every_member_appears() -> None:
    group = consumer_group(
        {"a": 3, "b": 3},
        [("m1", ["a"], []), ("m2", ["a", "b"], []), ("m3", ["b"], []), ("m4", [], [])],
    )
    plan = RangeAssignor().assign(group)
    check_valid(group, plan)
    assert plan.assignments["m1"] == {tp("a", 0), tp("a", 1)}
    assert plan.assignments["m2"] == {tp("a", 2), tp("b", 0), tp("b", 1)}
    assert plan.assignments["m3"] == {tp("b", 2)}
    assert plan.assignments["m4"] == frozenset()


def test_range_orders_static_members_by_instance_id_before_dynamic_members() -> None:
    """The server's (and Kafka's) range order. The oracle's counterexample: one
    partition, a dynamic member "-" and a static "1": it goes to the static one."""
    members = [
        AssignorMember("a", subscribed_topics=frozenset({"t"})),
        AssignorMember("b", subscribed_topics=frozenset({"t"})),
        AssignorMember("y", instance_id="i2", subscribed_topics=frozenset({"t"})),
        AssignorMember("z", instance_id="i1", subscribed_topics=frozenset({"t"})),
    ]
    group = GroupSnapshot("g", CONSUMER, 1, "range", tuple(members), (TopicInfo("id-t", "t", 4),))
    plan = RangeAssignor().assign(group)
    check_valid(group, plan)
    assert plan.assignments == {"z": {tp("t", 0)}, "y": {tp("t", 1)}, "a": {tp("t", 2)}, "b": {tp("t", 3)}}


def test_range_is_deterministic() -> None:
    members: list[MemberSpec] = [(f"m{i}", ["a", "b"], []) for i in range(7)]
    g1 = consumer_group({"a": 10, "b": 3}, members)
    g2 = consumer_group({"a": 10, "b": 3}, list(reversed(members)))
    assert RangeAssignor().assign(g1) == RangeAssignor().assign(g2)


# ---------------------------------------------------------------- uniform


def test_uniform_fresh_group_is_balanced() -> None:
    group = consumer_group({"a": 7, "b": 4}, [(f"m{i}", ["a", "b"], []) for i in range(3)])
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert spread(plan) <= 1


def test_uniform_member_joining_moves_the_minimum() -> None:
    topics = {"a": 10, "b": 7}
    uniform = UniformAssignor()
    group = consumer_group(topics, [(f"m{i}", ["a", "b"], []) for i in range(3)])
    first = uniform.assign(group)
    joined = consumer_group(
        topics,
        [(f"m{i}", ["a", "b"], first.assignments[f"m{i}"]) for i in range(3)] + [("m9", ["a", "b"], [])],
    )
    second = uniform.assign(joined)
    check_valid(joined, second)
    assert spread(second) <= 1
    assert moved(first.assignments, second.assignments) == 17 // 4
    assert len(second.assignments["m9"]) == 17 // 4


def test_uniform_member_leaving_moves_only_its_partitions() -> None:
    topics = {"a": 12}
    uniform = UniformAssignor()
    group = consumer_group(topics, [(f"m{i}", ["a"], []) for i in range(4)])
    first = uniform.assign(group)
    left = consumer_group(topics, [(f"m{i}", ["a"], first.assignments[f"m{i}"]) for i in range(3)])
    second = uniform.assign(left)
    check_valid(left, second)
    assert spread(second) == 0
    for i in range(3):
        assert first.assignments[f"m{i}"] <= second.assignments[f"m{i}"]


def test_uniform_drops_invalid_current_partitions() -> None:
    group = consumer_group(
        {"a": 2, "b": 2},
        [
            # gone topic, partition out of range, unsubscribed topic, recreated topic (other id)
            ("m1", ["a"], [tp("gone", 0), tp("a", 5), tp("b", 0), TopicPartition("a", 0, "old-id")]),
            ("m2", ["a", "b"], [tp("a", 1)]),
            # claimed twice: the first member by id keeps it
            ("m3", ["a", "b"], [tp("a", 1), tp("b", 1)]),
        ],
    )
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert tp("a", 1) in plan.assignments["m2"]
    assert tp("b", 1) in plan.assignments["m3"]


def test_uniform_heterogeneous_balances_where_it_can() -> None:
    # m1 can only take "a"; the greedy must leave "b" to m2 and give m1 most of "a".
    group = consumer_group({"a": 4, "b": 2}, [("m1", ["a"], []), ("m2", ["a", "b"], [])])
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert counts(plan) == {"m1": 3, "m2": 3}
    # Starting unbalanced (m2 holds everything), the same balance with the fewest moves.
    start = consumer_group(
        {"a": 4, "b": 2},
        [("m1", ["a"], []), ("m2", ["a", "b"], [tp("a", p) for p in range(4)] + [tp("b", 0), tp("b", 1)])],
    )
    plan = UniformAssignor().assign(start)
    check_valid(start, plan)
    assert counts(plan) == {"m1": 3, "m2": 3}


def test_uniform_orders_partitions_by_topic_id_as_the_server_does() -> None:
    """The global order of partitions is by topic id, then partition, as on the
    server, not by topic name. The oracle's counterexample: t0 (id 7c1e) and t1
    (id 0b3a), one partition each, two members: the first by id gets t1-0."""
    t0, t1 = TopicInfo("7c1e", "t0", 1), TopicInfo("0b3a", "t1", 1)
    t0_0, t1_0 = TopicPartition("t0", 0, "7c1e"), TopicPartition("t1", 0, "0b3a")

    def group(*members: AssignorMember) -> GroupSnapshot:
        return GroupSnapshot("g", CONSUMER, 1, "uniform", members, (t0, t1))

    def member(mid: str, topics: Iterable[str], owned: Iterable[TopicPartition] = ()) -> AssignorMember:
        return AssignorMember(mid, subscribed_topics=frozenset(topics), assignment=frozenset(owned))

    fresh = UniformAssignor().assign(group(member("0", ["t0", "t1"]), member("1", ["t0", "t1"])))
    assert fresh.assignments == {"0": {t1_0}, "1": {t0_0}}
    # A member above its quota gives up the last of its partitions in that order.
    joined = UniformAssignor().assign(
        group(member("a", ["t0", "t1"], [t0_0, t1_0]), member("b", ["t0", "t1"]))
    )
    assert joined.assignments == {"a": {t1_0}, "b": {t0_0}}
    # Heterogeneous: topics with as many subscribers are filled in topic id order.
    mixed = UniformAssignor().assign(
        group(member("a", ["t0", "t1"]), member("b", ["t0", "t1"]), member("c", []))
    )
    assert mixed.assignments == {"a": {t1_0}, "b": {t0_0}, "c": frozenset()}


def test_uniform_gives_the_extra_partitions_left_to_members_at_or_below_base_by_member_id() -> None:
    """As on the server: the slots of base + 1 that no member above base takes go
    to the others by member id, whatever they hold (none of them gives anything
    up either way). The oracle found it with 13 partitions and 4 members, one of
    them holding one; the smallest case: 3 partitions, b holds one, a none."""
    group = consumer_group({"t": 3}, [("a", ["t"], []), ("b", ["t"], [tp("t", 0)])])
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert plan.assignments == {"a": {tp("t", 1), tp("t", 2)}, "b": {tp("t", 0)}}


def test_uniform_heterogeneous_balances_topic_by_topic_as_the_server_does() -> None:
    """The server's rule: topic after topic (by id), the most loaded holder (ties:
    the largest member id) gives its highest partition of the topic to the least
    loaded subscriber (ties: the smallest member id). The oracle's counterexample:
    the fill leaves "0" and "00" with 2 each, "1" with none; "00" gives y-1 to "1"
    (the client used to move y-0 from "0", the smallest id)."""
    x, y = TopicInfo("7c1e", "x", 3), TopicInfo("3e77", "y", 2)
    subscriptions = {"0": {"x", "y"}, "00": {"x", "y"}, "000": {"x"}, "1": {"y"}}
    members = tuple(AssignorMember(m, subscribed_topics=frozenset(s)) for m, s in subscriptions.items())
    group = GroupSnapshot("g", CONSUMER, 1, "uniform", members, (x, y))
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)

    def of(topic: TopicInfo, *partitions: int) -> set[TopicPartition]:
        return {TopicPartition(topic.name, p, topic.topic_id) for p in partitions}

    # Filled y first (its id is smaller; both topics have three subscribers), then x.
    assert plan.assignments == {"0": of(y, 0) | of(x, 1), "00": of(x, 2), "000": of(x, 0), "1": of(y, 1)}


def test_uniform_is_deterministic() -> None:
    rng = random.Random(7)
    topics = {"a": 9, "b": 5, "c": 3}
    members: list[MemberSpec] = [
        (f"m{i}", rng.sample(sorted(topics), rng.randint(1, 3)), []) for i in range(6)
    ]
    g1 = consumer_group(topics, members)
    g2 = consumer_group(topics, list(reversed(members)))
    assert UniformAssignor().assign(g1) == UniformAssignor().assign(g2)


# How fast the client assignors are is measured by bench/assignors.py, not asserted
# here: unit tests make no wall-clock assertions (issue 19).


def test_uniform_large_group() -> None:
    topics = {f"t{i:03}": 100 for i in range(100)}  # 10,000 partitions
    names = sorted(topics)
    uniform = UniformAssignor()
    fresh = consumer_group(topics, [(f"m{i:04}", names, []) for i in range(1000)])
    first = uniform.assign(fresh)
    joined = consumer_group(
        topics,
        [(f"m{i:04}", names, first.assignments[f"m{i:04}"]) for i in range(1000)] + [("new", names, [])],
    )
    second = uniform.assign(joined)
    assert spread(first) == 0 and spread(second) <= 1
    assert moved(first.assignments, second.assignments) == 10_000 // 1001


def test_uniform_large_heterogeneous_group() -> None:
    topics = {f"t{i:03}": 100 for i in range(100)}
    names = sorted(topics)
    rng = random.Random(1)
    # 1,000 members, nearly all with a subscription of their own.
    group = consumer_group(
        topics, [(f"m{i:04}", rng.sample(names, rng.randint(1, 100)), []) for i in range(1000)]
    )
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert _locally_optimal(group, plan)


@st.composite
def consumer_groups(draw: st.DrawFn) -> GroupSnapshot:
    n_topics = draw(st.integers(1, 4))
    topics = {f"t{i}": draw(st.integers(0, 12)) for i in range(n_topics)}
    names = sorted(topics)
    homogeneous = draw(st.booleans())
    common = draw(st.sets(st.sampled_from(names), min_size=1))
    candidates = [tp(t, p) for t in [*names, "gone"] for p in range(14)]
    members: list[MemberSpec] = []
    for i in range(draw(st.integers(1, 8))):
        subs = common if homogeneous else draw(st.sets(st.sampled_from(names)))
        members.append((f"m{i}", subs, draw(st.sets(st.sampled_from(candidates), max_size=10))))
    return consumer_group(topics, members)


def _locally_optimal(group: GroupSnapshot, plan: AssignmentPlan) -> bool:
    """No single partition could move to a subscriber of its topic holding two fewer."""
    c = counts(plan)
    least: dict[str, int] = {}  # topic -> the smallest count among its subscribers
    for m in group.members:
        for topic in m.subscribed_topics:
            least[topic] = min(least.get(topic, c[m.member_id]), c[m.member_id])
    return all(
        least[r.topic] >= c[mid] - 1
        for mid, rs in plan.assignments.items()
        for r in rs
        if isinstance(r, TopicPartition)
    )


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(consumer_groups())
def test_uniform_property_valid_balanced_sticky(group: GroupSnapshot) -> None:
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert plan == UniformAssignor().assign(group)
    assert _locally_optimal(group, plan)
    if len({m.subscribed_topics for m in group.members}) == 1:
        assert spread(plan) <= 1
        # Each member keeps as much of its valid current assignment as its quota allows.
        base = len(group.resources()) // len(group.members)
        valid = group.resources()
        claimed: set[Resource] = set()
        for m in group.members:
            mine = {r for r in m.assignment if r in valid and r not in claimed}
            claimed |= mine
            assert len(mine & plan.assignments[m.member_id]) >= min(len(mine), base)


# ---------------------------------------------------------------- racks and weights


def racked_group(
    assignor: str,
    topics: Mapping[str, tuple[str, ...] | int],
    members: Iterable[tuple[str, str | None, int, Iterable[Resource]]],
) -> GroupSnapshot:
    """Every member subscribes to every topic. `topics`: name -> partition racks
    (or a partition count, without racks); `members`: (id, rack, capacity, current)."""
    infos = tuple(
        TopicInfo(f"id-{name}", name, spec, ())
        if isinstance(spec, int)
        else TopicInfo(f"id-{name}", name, len(spec), spec)
        for name, spec in sorted(topics.items())
    )
    return GroupSnapshot(
        group_id="g",
        group_type=CONSUMER,
        group_epoch=1,
        assignor=assignor,
        members=tuple(
            sorted(
                (
                    AssignorMember(
                        mid,
                        rack_id=rack,
                        capacity=capacity,
                        subscribed_topics=frozenset(topics),
                        assignment=frozenset(current),
                    )
                    for mid, rack, capacity, current in members
                ),
                key=lambda m: m.member_id,
            )
        ),
        topics=infos,
    )


def local_pairs(group: GroupSnapshot, plan: AssignmentPlan) -> int:
    racks = {t.name: t.partition_racks for t in group.topics}
    rack_of = {m.member_id: m.rack_id for m in group.members}
    return sum(
        1
        for mid, rs in plan.assignments.items()
        for r in rs
        if isinstance(r, TopicPartition) and racks[r.topic] and racks[r.topic][r.partition] == rack_of[mid]
    )


def test_uniform_weighs_members_by_capacity() -> None:
    """docs/assignment.md, "Weights": capacity 3 and 1 share 12 partitions 9 and 3."""
    group = racked_group("uniform", {"w": 12}, [("big", None, 3, []), ("small", None, 1, [])])
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert counts(plan) == {"big": 9, "small": 3}


def test_uniform_gives_members_partitions_of_their_rack() -> None:
    """docs/assignment.md, "Racks": three racks, two partitions each, a member in each."""
    group = racked_group(
        "uniform",
        {"e": ("a", "b", "c") * 2},
        [("m1", "c", 1, []), ("m2", "a", 1, []), ("m3", "b", 1, [])],
    )
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    assert plan.assignments == {
        "m1": {tp("e", 2), tp("e", 5)},
        "m2": {tp("e", 0), tp("e", 3)},
        "m3": {tp("e", 1), tp("e", 4)},
    }


def test_uniform_takes_a_rack_partition_from_a_member_of_another_rack() -> None:
    """Locality before stickiness: b's partition held by the member of rack a
    moves to the member of rack b, which gives up its partition of rack a."""
    group = racked_group(
        "uniform",
        {"e": ("a", "b")},
        [("ma", "a", 1, [tp("e", 1)]), ("mb", "b", 1, [tp("e", 0)])],
    )
    plan = UniformAssignor().assign(group)
    assert plan.assignments == {"ma": {tp("e", 0)}, "mb": {tp("e", 1)}}


def test_uniform_keeps_an_assignment_that_is_balanced_and_as_local_as_possible() -> None:
    """Rack a has three partitions and one member, whose share is two at most: one
    of them cannot be local, and which member holds it is left to stickiness."""
    current = {"ma": [tp("e", 0), tp("e", 3)], "mb": [tp("e", 1)], "mc": [tp("e", 2)]}
    group = racked_group(
        "uniform",
        {"e": ("a", "b", "a", "a")},
        [("ma", "a", 1, current["ma"]), ("mb", "b", 1, current["mb"]), ("mc", None, 1, current["mc"])],
    )
    plan = UniformAssignor().assign(group)
    assert plan.assignments == {m: frozenset(rs) for m, rs in current.items()}


def test_range_with_racks_keeps_co_partitioning_and_gives_units_of_the_members_rack() -> None:
    group = racked_group(
        "range",
        {"x": ("a", "a", "b", "b"), "y": ("a", "a", "b", "b")},
        [("m1", "b", 1, []), ("m2", "a", 1, [])],
    )
    plan = RangeAssignor().assign(group)
    check_valid(group, plan)
    assert plan.assignments == {
        "m1": {tp("x", 2), tp("x", 3), tp("y", 2), tp("y", 3)},
        "m2": {tp("x", 0), tp("x", 1), tp("y", 0), tp("y", 1)},
    }


def test_range_with_racks_gives_the_extra_unit_where_it_adds_a_local_one() -> None:
    """Three units, two of rack b: the member of rack b gets the extra one, though
    the member of rack a comes first in range order."""
    group = racked_group("range", {"x": ("a", "b", "b")}, [("m1", "a", 1, []), ("m2", "b", 1, [])])
    plan = RangeAssignor().assign(group)
    assert plan.assignments == {"m1": {tp("x", 0)}, "m2": {tp("x", 1), tp("x", 2)}}


@st.composite
def racked_groups(draw: st.DrawFn) -> GroupSnapshot:
    racks = ("a", "b", "c")
    topics: dict[str, tuple[str, ...] | int] = {}
    for name in ("t0", "t1")[: draw(st.integers(1, 2))]:
        n = draw(st.integers(0, 6))
        topics[name] = (
            tuple(draw(st.lists(st.sampled_from(racks), min_size=n, max_size=n)))
            if draw(st.booleans())
            else n
        )
    candidates = [tp(t, p) for t in topics for p in range(7)]
    members = [
        (
            f"m{i}",
            draw(st.sampled_from((None, *racks))),
            draw(st.sampled_from((1, 1, 2, 3))),
            draw(st.sets(st.sampled_from(candidates), max_size=4)),
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    return racked_group("uniform", topics, members)


def _most_local(group: GroupSnapshot) -> int:
    """The most local pairs of any assignment with quotas by share, by brute force
    over which members get the extra partition: given the quotas, rack r can have
    min(partitions of r, quotas of its members) local pairs, and no more."""
    total = sum(t.num_partitions for t in group.topics)
    weight = sum(m.capacity for m in group.members)
    floors = {m.member_id: total * m.capacity // weight for m in group.members}
    fractional = [m.member_id for m in group.members if total * m.capacity % weight]
    extra = total - sum(floors.values())
    sizes: dict[str, int] = {}
    for t in group.topics:
        for rack in t.partition_racks:
            sizes[rack] = sizes.get(rack, 0) + 1
    best = 0
    for chosen in itertools.combinations(fractional, extra):
        quota: dict[str, int] = {}
        for m in group.members:
            if m.rack_id is not None:
                quota[m.rack_id] = quota.get(m.rack_id, 0) + floors[m.member_id] + (m.member_id in chosen)
        best = max(best, sum(min(n, quota.get(rack, 0)) for rack, n in sizes.items()))
    return best


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(racked_groups())
def test_uniform_property_racks_and_weights(group: GroupSnapshot) -> None:
    """Homogeneous groups: valid, each member within one partition of its exact
    share, as local as any such assignment, and a result fed back is kept."""
    plan = UniformAssignor().assign(group)
    check_valid(group, plan)
    total = sum(t.num_partitions for t in group.topics)
    weight = sum(m.capacity for m in group.members)
    for m in group.members:
        share = Fraction(total * m.capacity, weight)
        assert math.floor(share) <= len(plan.assignments[m.member_id]) <= math.ceil(share)
    assert local_pairs(group, plan) == _most_local(group)
    again = dataclasses.replace(
        group,
        members=tuple(
            dataclasses.replace(m, assignment=plan.assignments[m.member_id]) for m in group.members
        ),
    )
    assert UniformAssignor().assign(again).assignments == plan.assignments


# ---------------------------------------------------------------- eager


def test_eager_round_robin_connectors_then_tasks() -> None:
    group = connect_group({"A": 2, "B": 1}, [worker("w2"), worker("w1")])
    plan = EagerAssignor().assign(group)
    check_valid(group, plan)
    # A, B, A-0, A-1, B-0 round-robin over w1, w2
    assert plan.assignments == {"w1": {"A", T("A", 0), T("B", 0)}, "w2": {"B", T("A", 1)}}


def test_eager_is_not_sticky_but_deterministic() -> None:
    current = {"w1": frozenset({"B", T("A", 1)}), "w2": frozenset({"A", T("A", 0), T("B", 0)})}
    group = connect_group({"A": 2, "B": 1}, [worker(w, assignment=rs) for w, rs in current.items()])
    plan = EagerAssignor().assign(group)
    check_valid(group, plan)
    assert plan.assignments["w1"] == {"A", T("A", 0), T("B", 0)}
    assert plan == EagerAssignor().assign(group)


def test_eager_without_workers_leaves_everything_unassigned() -> None:
    group = connect_group({"A": 2}, [])
    plan = EagerAssignor().assign(group)
    check_valid(group, plan)
    assert plan.unassigned == {"A", T("A", 0), T("A", 1)}


# ---------------------------------------------------------------- incremental_cooperative

#: The seed's config topic: AC0, AT1, AT2, BC0, BT1.
SEED = {"A": 2, "B": 1}
A, A0, A1, B, B0 = "A", T("A", 0), T("A", 1), "B", T("B", 0)


def _run(
    assignor: IncrementalCooperativeAssignor,
    connectors: Mapping[str, int],
    workers: Iterable[AssignorMember],
    state: bytes,
    now_ms: int,
) -> tuple[GroupSnapshot, AssignmentPlan]:
    group = connect_group(connectors, workers, state, now_ms)
    plan = assignor.assign(group)
    check_valid(group, plan)
    return group, plan


def _steady_three_workers(ica: IncrementalCooperativeAssignor) -> AssignmentPlan:
    """Epoch 35 of the seed: W1 [AC0, AT1], W2 [BC0, BT1], W3 [AT2]."""
    _, plan = _run(
        ica,
        SEED,
        [
            worker("m1", "http://w1", [A, A0]),
            worker("m2", "http://w2", [B, B0]),
            worker("m3", "http://w3", [A1]),
        ],
        b"",
        0,
    )
    assert plan.assignments == {"m1": {A, A0}, "m2": {B, B0}, "m3": {A1}}
    assert plan.unassigned == frozenset() and plan.rebalance_at_ms is None
    return plan


def test_ica_case_study_empty_group_then_w2_joins() -> None:
    ica = IncrementalCooperativeAssignor()
    _, first = _run(ica, SEED, [worker("m1", "http://w1")], b"", 0)
    assert first.assignments == {"m1": {A, A0, A1, B, B0}}
    assert first.unassigned == frozenset() and first.rebalance_at_ms is None

    _, second = _run(
        ica,
        SEED,
        [worker("m1", "http://w1", first.assignments["m1"]), worker("m2", "http://w2")],
        first.state,
        1,
    )
    # The seed's target at epoch 2: W1 [AC0, AT1, AT2], W2 [BC0, BT1]; two moves, the minimum.
    assert second.assignments == {"m1": {A, A0, A1}, "m2": {B, B0}}
    assert moved(first.assignments, second.assignments) == 2
    assert second.rebalance_at_ms is None


def test_ica_case_study_worker_leaving_the_group() -> None:
    ica = IncrementalCooperativeAssignor(scheduled_rebalance_max_delay_ms=DELAY)
    plan = _steady_three_workers(ica)
    w1, w3 = worker("m1", "http://w1", [A, A0]), worker("m3", "http://w3", [A1])

    # W2 is fenced out: nothing moves, its work is held back.
    _, held = _run(ica, SEED, [w1, w3], plan.state, 1_000)
    assert held.assignments == {"m1": {A, A0}, "m3": {A1}}
    assert held.unassigned == {B, B0}
    assert held.rebalance_at_ms == 1_000 + DELAY

    # Another computation before the deadline keeps holding, with the original deadline.
    _, still = _run(ica, SEED, [w1, w3], held.state, 5_000)
    assert still.assignments == held.assignments
    assert still.unassigned == {B, B0}
    assert still.rebalance_at_ms == 1_000 + DELAY

    # At the deadline the held work goes to W1 and W3, balanced; nothing they had moves.
    _, after = _run(ica, SEED, [w1, w3], still.state, 1_000 + DELAY)
    assert after.unassigned == frozenset() and after.rebalance_at_ms is None
    assert {A, A0} <= after.assignments["m1"] and {A1} <= after.assignments["m3"]
    assert spread(after, str) <= 1 and spread(after, ConnectorTaskId) <= 1
    assert json.loads(after.state)["held"] == {}


def test_ica_case_study_worker_bounces() -> None:
    ica = IncrementalCooperativeAssignor(scheduled_rebalance_max_delay_ms=DELAY)
    plan = _steady_three_workers(ica)
    w1, w3 = worker("m1", "http://w1", [A, A0]), worker("m3", "http://w3", [A1])
    _, held = _run(ica, SEED, [w1, w3], plan.state, 1_000)
    assert held.unassigned == {B, B0}

    # W2 comes back under a new member id, same URL, before the deadline.
    _, back = _run(ica, SEED, [w1, worker("m2-new", "http://w2"), w3], held.state, 2_000)
    assert back.assignments == {"m1": {A, A0}, "m2-new": {B, B0}, "m3": {A1}}
    assert back.unassigned == frozenset() and back.rebalance_at_ms is None


def test_ica_bounce_not_seen_as_a_departure_gets_its_work_back() -> None:
    ica = IncrementalCooperativeAssignor()
    plan = _steady_three_workers(ica)
    # The coordinator replaced m2 by m2-new before any computation saw W2 missing.
    members = [
        worker("m1", "http://w1", [A, A0]),
        worker("m2-new", "http://w2"),
        worker("m3", "http://w3", [A1]),
    ]
    _, back = _run(ica, SEED, members, plan.state, 10)
    assert back.assignments == {"m1": {A, A0}, "m2-new": {B, B0}, "m3": {A1}}


def test_ica_new_work_is_assigned_at_once_while_holding() -> None:
    ica = IncrementalCooperativeAssignor()
    plan = _steady_three_workers(ica)
    w1, w3 = worker("m1", "http://w1", [A, A0]), worker("m3", "http://w3", [A1])
    _, held = _run(ica, {**SEED, "C": 2}, [w1, w3], plan.state, 1_000)
    assert held.unassigned == {B, B0}
    assert {"C", T("C", 0), T("C", 1)} <= held.assignments["m1"] | held.assignments["m3"]
    assert held.rebalance_at_ms == 1_000 + DELAY


def test_ica_removed_connectors_are_dropped_everywhere() -> None:
    ica = IncrementalCooperativeAssignor()
    plan = _steady_three_workers(ica)
    w1, w3 = worker("m1", "http://w1", [A, A0]), worker("m3", "http://w3", [A1])
    _, held = _run(ica, SEED, [w1, w3], plan.state, 1_000)
    # B is deleted while held, A shrinks to one task.
    group, after = _run(ica, {"A": 1}, [w1, w3], held.state, 2_000)
    assert after.unassigned == frozenset() and after.rebalance_at_ms is None
    assert group.resources() == {A, A0}
    state = json.loads(after.state)
    assert state["held"] == {}
    assert state["workers"] == {
        "http://w1": {"connectors": ["A"], "tasks": [["A", 0]]},
        "http://w3": {"connectors": [], "tasks": []},
    }


def test_ica_worker_joining_moves_the_minimum() -> None:
    ica = IncrementalCooperativeAssignor()
    connectors = {f"c{i}": 3 for i in range(7)}  # 7 connectors, 21 tasks
    workers = [worker(f"m{i}", f"http://w{i}") for i in range(4)]
    _, first = _run(ica, connectors, workers, b"", 0)
    assert spread(first, str) <= 1 and spread(first, ConnectorTaskId) <= 1
    members = [worker(w.member_id, w.url, first.assignments[w.member_id]) for w in workers]
    _, second = _run(ica, connectors, [*members, worker("m9", "http://w9")], first.state, 1)
    assert spread(second, str) <= 1 and spread(second, ConnectorTaskId) <= 1
    assert moved(first.assignments, second.assignments) == 7 // 5 + 21 // 5


def test_ica_state_round_trip_is_a_fixed_point() -> None:
    ica = IncrementalCooperativeAssignor()
    plan = _steady_three_workers(ica)
    w1, w3 = worker("m1", "http://w1", [A, A0]), worker("m3", "http://w3", [A1])
    _, held = _run(ica, SEED, [w1, w3], plan.state, 1_000)
    state = json.loads(held.state)
    assert state == {
        "version": 1,
        "workers": {
            "http://w1": {"connectors": ["A"], "tasks": [["A", 0]]},
            "http://w3": {"connectors": [], "tasks": [["A", 1]]},
        },
        "held": {"http://w2": {"deadline_ms": 1_000 + DELAY, "connectors": ["B"], "tasks": [["B", 0]]}},
    }
    _, again = _run(ica, SEED, [w1, w3], held.state, 1_000)
    assert again == held


def test_ica_identity_falls_back_to_instance_then_member_id() -> None:
    ica = IncrementalCooperativeAssignor()
    members = [AssignorMember("m1", instance_id="i1"), AssignorMember("m2")]
    _, plan = _run(ica, SEED, members, b"", 0)
    assert set(json.loads(plan.state)["workers"]) == {"i1", "m2"}


def test_ica_without_workers_everything_is_unassigned() -> None:
    ica = IncrementalCooperativeAssignor()
    plan = _steady_three_workers(ica)
    _, empty = _run(ica, SEED, [], plan.state, 1_000)
    assert empty.assignments == {} and empty.unassigned == {A, A0, A1, B, B0}
    assert empty.rebalance_at_ms is None
    assert json.loads(empty.state)["held"] == {}


def test_ica_unreadable_state_counts_as_empty() -> None:
    ica = IncrementalCooperativeAssignor()
    for state in (b"not json", b'{"version": 99}', b"[1]", b'{"version": 1, "workers": 3}'):
        _, plan = _run(ica, SEED, [worker("m1", "http://w1")], state, 0)
        assert plan.assignments == {"m1": {A, A0, A1, B, B0}}


def test_ica_zero_delay_reassigns_at_once() -> None:
    ica = IncrementalCooperativeAssignor(scheduled_rebalance_max_delay_ms=0)
    plan = _steady_three_workers(ica)
    w1, w3 = worker("m1", "http://w1", [A, A0]), worker("m3", "http://w3", [A1])
    _, after = _run(ica, SEED, [w1, w3], plan.state, 1_000)
    assert after.unassigned == frozenset() and after.rebalance_at_ms is None


def test_ica_is_deterministic() -> None:
    ica = IncrementalCooperativeAssignor()
    workers = [worker(f"m{i}", f"http://w{i}") for i in range(5)]
    connectors = {f"c{i}": i for i in range(6)}
    g1 = connect_group(connectors, workers)
    g2 = connect_group(connectors, list(reversed(workers)))
    assert ica.assign(g1) == ica.assign(g2)


@st.composite
def ica_histories(draw: st.DrawFn) -> list[tuple[dict[str, int], list[str], int]]:
    """Steps of (connectors, present worker urls, time advance)."""
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        connectors = {f"c{i}": draw(st.integers(0, 5)) for i in range(5) if draw(st.booleans())}
        urls = sorted(draw(st.sets(st.sampled_from([f"w{i}" for i in range(6)]), max_size=5)))
        steps.append((connectors, urls, draw(st.sampled_from([0, 1, DELAY // 2, DELAY]))))
    return steps


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ica_histories(), st.integers(0, 3))
def test_ica_property_valid_balanced_holds(
    steps: list[tuple[dict[str, int], list[str], int]], bounce_seed: int
) -> None:
    ica = IncrementalCooperativeAssignor(scheduled_rebalance_max_delay_ms=DELAY)
    state, now = b"", 0
    assignment: dict[str, frozenset[Resource]] = {}  # url -> resources
    generation: dict[str, int] = {}
    previous: set[Resource] = set()
    for n, (connectors, urls, advance) in enumerate(steps):
        now += advance
        members = []
        for url in urls:
            # Now and then a worker restarts under a new member id (same url).
            if url not in generation or (n + bounce_seed + int(url[1:])) % 4 == 0:
                generation[url] = generation.get(url, 0) + 1
                members.append(worker(f"{url}-{generation[url]}", url))
            else:
                members.append(worker(f"{url}-{generation[url]}", url, assignment.get(url, ())))
        group, plan = _run(ica, connectors, members, state, now)
        assert plan == ica.assign(group)
        assert spread(plan, str) <= 1 and spread(plan, ConnectorTaskId) <= 1
        if not members:
            assert plan.unassigned == group.resources()
        if plan.unassigned and members:
            assert plan.rebalance_at_ms is not None and now < plan.rebalance_at_ms <= now + DELAY
        else:
            assert plan.rebalance_at_ms is None
        if not state:
            assert plan.unassigned == frozenset() or not members
        # Only work that was assigned before is ever held back: new work is assigned at once.
        assert plan.unassigned <= previous or not members
        previous = set(plan.unassigned).union(*plan.assignments.values())
        assignment = {m.url: plan.assignments[m.member_id] for m in members}
        state = plan.state
