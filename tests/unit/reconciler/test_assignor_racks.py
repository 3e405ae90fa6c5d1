"""Rack-aware and weighted assignors (issue 24, items 1 and 2): properties
checked against brute force on small groups.

uniform (homogeneous; weighted or not, racks or not): every partition exactly
once; each member within one partition of its exact share (floor or ceil of
N * capacity / sum of capacities); the most local pairs any such assignment
has (found by enumerating every one); an assignment fed back, or any
assignment that is already balanced and as local as possible, comes back
unchanged; the member order of the spec does not matter.

range with racks: every partition exactly once to a subscriber; co-partitioned
topics (same subscribers, same size) split alike; per topic balanced within
one; the most local units any such split has (enumerated); no racks in a class:
exactly the rack-blind split.

uniform heterogeneous: racks and capacities are ignored (the documented
guarantee): the same target as without them.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from regroup.reconciler import Topic
from regroup.reconciler.assignors import GroupSpec, MemberSpec, RangeAssignor, UniformAssignor, uniform_quota
from regroup.reconciler.assignors.shares import choose_extras
from regroup.reconciler.assignors.uniform import _fresh
from regroup.reconciler.assignors.uniform_quota import assign_by_quota
from regroup.reconciler.model import Assignment, make_assignment
from regroup.reconciler.rack_locality import RackLocality, rack_locality
from tests.support.depth import examples

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
RACKS = ("a", "b", "c")
TP = tuple[str, int]


def pairs(assignment: Assignment) -> set[TP]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def owners(result: Mapping[str, Assignment]) -> dict[TP, str]:
    out: dict[TP, str] = {}
    for member_id, assignment in result.items():
        for tp in pairs(assignment):
            assert tp not in out, f"{tp} given twice"
            out[tp] = member_id
    return out


def rack_of(spec: GroupSpec, tp: TP) -> str | None:
    racks = spec.topics[tp[0]].partition_racks
    return racks[tp[1]] if racks else None


def local_pairs(spec: GroupSpec, result: Mapping[str, Assignment]) -> int:
    return sum(
        1
        for tp, member_id in owners(result).items()
        if spec.members[member_id].rack_id is not None
        and spec.members[member_id].rack_id == rack_of(spec, tp)
    )


def exact_shares(spec: GroupSpec, total: int) -> dict[str, Fraction]:
    weight = sum(m.capacity for m in spec.members.values())
    return {m: Fraction(total * s.capacity, weight) for m, s in spec.members.items()}


def with_current(spec: GroupSpec, result: Mapping[str, Assignment]) -> GroupSpec:
    members = {m: dataclasses.replace(s, current=result[m]) for m, s in spec.members.items()}
    return dataclasses.replace(spec, members=members)


def reordered(spec: GroupSpec, seed: int) -> GroupSpec:
    items = list(spec.members.items())
    random.Random(seed).shuffle(items)
    return dataclasses.replace(spec, members=dict(items))


# -- strategies ----------------------------------------------------------------


@st.composite
def rack_topics(draw: st.DrawFn, max_total: int) -> dict[str, Topic]:
    """1 - 3 topics, some with partition racks, `max_total` partitions at most."""
    topics: dict[str, Topic] = {}
    left = max_total
    for i in range(draw(st.integers(1, 3))):
        if left == 0:
            break
        n = draw(st.integers(1, min(4, left)))
        left -= n
        racks = (
            tuple(draw(st.lists(st.sampled_from(RACKS), min_size=n, max_size=n)))
            if draw(st.booleans())
            else ()
        )
        topics[f"T{i}"] = Topic(f"T{i}", f"t{i}", n, racks)
    return topics


@st.composite
def uniform_specs(draw: st.DrawFn, weighted: bool, max_total: int = 7, max_members: int = 4) -> GroupSpec:
    """A homogeneous group; members' racks from a, b, d (d has no partitions)
    or none; capacities 1 - 3 when `weighted`; random disjoint current targets,
    one of them maybe with a deleted topic and a partition past the end."""
    topics = draw(rack_topics(max_total))
    member_ids = [f"m{i}" for i in range(draw(st.integers(1, max_members)))]
    subscribed = frozenset(topics)
    current: dict[str, list[TP]] = {m: [] for m in member_ids}
    for t, topic in topics.items():
        for p in range(topic.num_partitions):
            holder = draw(st.sampled_from([None, *member_ids]))
            if holder is not None:
                current[holder].append((t, p))
    # A deleted topic, and a partition past the end of its topic: both dropped.
    stale = draw(st.sampled_from([None, *member_ids]))
    if stale is not None:
        current[stale] += [("gone", 0), ("T0", topics["T0"].num_partitions)]
    members = {
        m: MemberSpec(
            member_id=m,
            instance_id=None,
            rack_id=draw(st.sampled_from([None, "a", "b", "d"])),
            subscribed_topic_ids=subscribed,
            current=make_assignment((t, [p]) for t, p in current[m]),
            capacity=draw(st.integers(1, 3)) if weighted else 1,
        )
        for m in member_ids
    }
    return GroupSpec(members=members, topics=topics)


# -- brute force ---------------------------------------------------------------


def proportional_choices(spec: GroupSpec) -> tuple[list[TP], list[tuple[str, ...]]]:
    """Every assignment of all partitions (in `universe` order, the owner of
    each) with each member within one partition of its exact share."""
    universe = [(t, p) for t, topic in sorted(spec.topics.items()) for p in range(topic.num_partitions)]
    member_ids = sorted(spec.members)
    share = exact_shares(spec, len(universe))
    floors = {m: share[m].numerator // share[m].denominator for m in member_ids}
    ceilings = {m: -(-share[m].numerator // share[m].denominator) for m in member_ids}
    choices = []
    for choice in itertools.product(member_ids, repeat=len(universe)):
        if all(floors[m] <= choice.count(m) <= ceilings[m] for m in member_ids):
            choices.append(choice)
    return universe, choices


def choice_local(spec: GroupSpec, universe: list[TP], choice: tuple[str, ...]) -> int:
    racks = [rack_of(spec, tp) for tp in universe]
    return sum(
        1
        for rack, m in zip(racks, choice, strict=True)
        if rack is not None and spec.members[m].rack_id == rack
    )


def as_assignment(spec: GroupSpec, universe: list[TP], choice: tuple[str, ...]) -> dict[str, Assignment]:
    return {
        m: make_assignment((t, [p]) for (t, p), owner in zip(universe, choice, strict=True) if owner == m)
        for m in spec.members
    }


def brute_best(spec: GroupSpec) -> int:
    universe, choices = proportional_choices(spec)
    return max(choice_local(spec, universe, c) for c in choices)


# -- uniform, homogeneous: weighted and rack-aware -----------------------------


def check_uniform(spec: GroupSpec) -> dict[str, Assignment]:
    result = dict(UNIFORM.assign(spec))
    universe = {(t, p) for t, topic in spec.topics.items() for p in range(topic.num_partitions)}
    assert set(result) == set(spec.members)
    assert set(owners(result)) == universe, "every partition exactly once"
    share = exact_shares(spec, len(universe))
    for member_id, target in result.items():
        assert abs(len(pairs(target)) - share[member_id]) < 1, (member_id, share[member_id], target)
    assert dict(UNIFORM.assign(spec)) == result, "deterministic"
    assert dict(UNIFORM.assign(reordered(spec, 7))) == result, "independent of the member order"
    again = UNIFORM.assign(with_current(spec, result))
    assert all(again[m] is result[m] for m in result), "an assignment fed back comes back unchanged"
    return result


@settings(max_examples=examples(150), deadline=None)
@given(spec=uniform_specs(weighted=False))
def test_uniform_with_racks_is_balanced_and_as_local_as_balance_allows(spec: GroupSpec) -> None:
    result = check_uniform(spec)
    sizes = [len(pairs(a)) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1
    best = brute_best(spec)
    assert local_pairs(spec, result) == best
    floor = sum(t.num_partitions for t in spec.topics.values()) // len(spec.members)
    for member_id, member in spec.members.items():
        # Sticky within locality: a member keeps its current partitions of its own
        # rack up to its floor (locality never asks it to give those up).
        valid = {t_p for t_p in pairs(member.current) if t_p[0] in spec.topics}
        valid = {t_p for t_p in valid if t_p[1] < spec.topics[t_p[0]].num_partitions}
        local = {t_p for t_p in valid if rack_of(spec, t_p) == member.rack_id}
        if member.rack_id is not None:
            assert len(local & pairs(result[member_id])) >= min(len(local), floor)
    report = rack_locality(spec, result)
    assert report == RackLocality(
        best, sum(t.num_partitions for t in spec.topics.values() if t.partition_racks), best
    )


@settings(max_examples=examples(150), deadline=None)
@given(spec=uniform_specs(weighted=True, max_total=6, max_members=3))
def test_uniform_weighted_is_within_one_of_each_share_and_as_local_as_that_allows(spec: GroupSpec) -> None:
    result = check_uniform(spec)
    best = brute_best(spec)
    assert local_pairs(spec, result) == best
    assert rack_locality(spec, result).best_achievable == best


@settings(max_examples=examples(100), deadline=None)
@given(spec=uniform_specs(weighted=True, max_total=7, max_members=4), weighted=st.booleans())
def test_uniform_from_nothing_is_within_each_share_and_as_local_as_that_allows(
    spec: GroupSpec, weighted: bool
) -> None:
    """No current targets (a new group): the path that hands out whole racks."""
    members = {
        m: dataclasses.replace(s, current={}, capacity=s.capacity if weighted else 1)
        for m, s in spec.members.items()
    }
    fresh = dataclasses.replace(spec, members=members)
    result = check_uniform(fresh)
    assert local_pairs(fresh, result) == brute_best(fresh)


@settings(max_examples=examples(60), deadline=None)
@given(spec=uniform_specs(weighted=True, max_total=6, max_members=3), pick=st.integers(0, 10**6))
def test_uniform_returns_any_balanced_and_most_local_assignment_unchanged(spec: GroupSpec, pick: int) -> None:
    universe, choices = proportional_choices(spec)
    local = [choice_local(spec, universe, c) for c in choices]
    optimal = [c for c, n in zip(choices, local, strict=True) if n == max(local)]
    chosen = as_assignment(spec, universe, optimal[pick % len(optimal)])
    result = UNIFORM.assign(with_current(spec, chosen))
    assert dict(result) == chosen


@settings(max_examples=examples(100), deadline=None)
@given(spec=uniform_specs(weighted=True, max_total=7, max_members=4))
def test_uniform_keeps_current_partitions_up_to_each_quota_without_racks(spec: GroupSpec) -> None:
    """Without racks, stickiness is the next priority after balance: a member
    keeps min(its valid current partitions, its floor)."""
    plain = dataclasses.replace(
        spec, members={m: dataclasses.replace(s, rack_id=None) for m, s in spec.members.items()}
    )
    result = check_uniform(plain)
    universe = {(t, p) for t, topic in spec.topics.items() for p in range(topic.num_partitions)}
    share = exact_shares(plain, len(universe))
    for member_id, member in plain.members.items():
        floor = share[member_id].numerator // share[member_id].denominator
        held = pairs(member.current) & universe  # stale ones are dropped, not kept
        assert len(held & pairs(result[member_id])) >= min(len(held), floor)


def test_weighted_shares_are_floor_or_ceil_of_the_exact_share() -> None:
    topics = {"T": Topic("T", "t", 10)}
    members = {
        m: MemberSpec(m, None, None, frozenset(topics), {}, capacity=c)
        for m, c in (("a", 1), ("b", 2), ("c", 3))
    }
    result = UNIFORM.assign(GroupSpec(members=members, topics=topics))
    # Shares 10/6, 20/6, 30/6 = 1.67, 3.33, 5: floors 1, 3, 5 and one extra, to the
    # first fractional member by id.
    assert [len(result[m]["T"]) for m in "abc"] == [2, 3, 5]


def test_weighted_join_moves_only_what_the_new_shares_require() -> None:
    topics = {"T": Topic("T", "t", 12)}
    before = {"a": {"T": frozenset(range(6))}, "b": {"T": frozenset(range(6, 12))}}
    members = {
        "a": MemberSpec("a", None, None, frozenset(topics), before["a"], capacity=1),
        "b": MemberSpec("b", None, None, frozenset(topics), before["b"], capacity=1),
        "c": MemberSpec("c", None, None, frozenset(topics), {}, capacity=2),
    }
    result = UNIFORM.assign(GroupSpec(members=members, topics=topics))
    # Shares 3, 3, 6: a and b each give up 3, nothing else moves.
    assert result["a"]["T"] <= before["a"]["T"] and len(result["a"]["T"]) == 3
    assert result["b"]["T"] <= before["b"]["T"] and len(result["b"]["T"]) == 3
    assert len(result["c"]["T"]) == 6


def test_rack_with_no_members_falls_back_to_balance() -> None:
    topics = {"T": Topic("T", "t", 6, ("a", "a", "z", "z", "z", "z"))}
    members = {m: MemberSpec(m, None, r, frozenset(topics), {}) for m, r in (("m0", "a"), ("m1", "b"))}
    result = UNIFORM.assign(GroupSpec(members=members, topics=topics))
    assert result["m0"]["T"] >= {0, 1}
    assert [len(result[m]["T"]) for m in ("m0", "m1")] == [3, 3]


def test_a_rack_move_brings_partitions_home_and_moves_nothing_else() -> None:
    topics = {"T": Topic("T", "t", 4, ("a", "a", "b", "b"))}
    current = {"m0": {"T": frozenset({0, 2})}, "m1": {"T": frozenset({1, 3})}}
    members = {
        m: MemberSpec(m, None, r, frozenset(topics), current[m]) for m, r in (("m0", "a"), ("m1", "b"))
    }
    result = UNIFORM.assign(GroupSpec(members=members, topics=topics))
    assert dict(result) == {"m0": {"T": frozenset({0, 1})}, "m1": {"T": frozenset({2, 3})}}


@pytest.mark.parametrize("seed", range(5))
def test_quota_path_without_racks_or_weights_gives_the_fresh_split(seed: int) -> None:
    """The general path, forced with capacities 1 and no racks, hands a fresh
    group the same contiguous blocks as the tuned path."""
    rng = random.Random(seed)
    topics = {f"T{i}": Topic(f"T{i}", f"t{i}", rng.randint(1, 20)) for i in range(rng.randint(1, 4))}
    member_ids = sorted(f"m{rng.randrange(10**6)}" for _ in range(rng.randint(1, 12)))
    members = {m: MemberSpec(m, None, None, frozenset(topics), {}) for m in member_ids}
    spec = GroupSpec(members=members, topics=topics)
    ids = sorted(topics)
    sizes = [topics[t].num_partitions for t in ids]
    assert dict(assign_by_quota(spec, ids, sizes, weighted=False, racks=False)) == dict(
        _fresh(member_ids, ids, sizes)
    )


def test_member_racks_without_topic_racks_run_the_rack_blind_code() -> None:
    topics = {"T": Topic("T", "t", 7)}
    plain = {m: MemberSpec(m, None, None, frozenset(topics), {}) for m in ("x", "y", "z")}
    racked = {m: dataclasses.replace(s, rack_id="a") for m, s in plain.items()}
    for assignor in (UNIFORM, RANGE):
        assert dict(assignor.assign(GroupSpec(members=racked, topics=topics))) == dict(
            assignor.assign(GroupSpec(members=plain, topics=topics))
        )


# -- uniform, heterogeneous: racks and capacities ignored ----------------------


@settings(max_examples=examples(80), deadline=None)
@given(data=st.data())
def test_uniform_heterogeneous_ignores_racks_and_capacities(data: st.DataObject) -> None:
    spec = data.draw(uniform_specs(weighted=True))
    subscriptions = {
        m: data.draw(st.frozensets(st.sampled_from(sorted(spec.topics)), min_size=1)) for m in spec.members
    }
    hetero = dataclasses.replace(
        spec,
        members={
            m: dataclasses.replace(s, subscribed_topic_ids=subscriptions[m]) for m, s in spec.members.items()
        },
    )
    plain = dataclasses.replace(
        hetero,
        members={m: dataclasses.replace(s, rack_id=None, capacity=1) for m, s in hetero.members.items()},
    )
    assume(not hetero.is_homogeneous())
    assert dict(UNIFORM.assign(hetero)) == dict(UNIFORM.assign(plain))
    assert rack_locality(hetero, UNIFORM.assign(hetero)).best_achievable is None


# -- range with racks ----------------------------------------------------------


@st.composite
def range_specs(draw: st.DrawFn) -> GroupSpec:
    """Topics of sizes 1 - 5; topics of one size share one rack layout (or none),
    as topics created together do; members with racks and any subscriptions."""
    layouts: dict[int, tuple[str, ...]] = {}
    topics: dict[str, Topic] = {}
    for i in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 5))
        if n not in layouts:
            layouts[n] = (
                tuple(draw(st.lists(st.sampled_from(RACKS), min_size=n, max_size=n)))
                if draw(st.booleans())
                else ()
            )
        topics[f"T{i}"] = Topic(f"T{i}", f"t{i}", n, layouts[n])
    member_ids = [f"m{i}" for i in range(draw(st.integers(1, 4)))]
    homogeneous = draw(st.booleans())
    everything = frozenset(topics)
    members = {
        m: MemberSpec(
            member_id=m,
            instance_id=draw(st.sampled_from([None, f"i{m}"])),
            rack_id=draw(st.sampled_from([None, "a", "b", "d"])),
            subscribed_topic_ids=everything
            if homogeneous
            else draw(st.frozensets(st.sampled_from(sorted(topics)), min_size=1)),
            current={},
        )
        for m in member_ids
    }
    return GroupSpec(members=members, topics=topics)


def range_classes(spec: GroupSpec) -> dict[tuple[frozenset[str], int], list[str]]:
    classes: dict[tuple[frozenset[str], int], list[str]] = {}
    for topic_id, topic in sorted(spec.topics.items()):
        subscribers = frozenset(m for m, s in spec.members.items() if topic_id in s.subscribed_topic_ids)
        if subscribers:
            classes.setdefault((subscribers, topic.num_partitions), []).append(topic_id)
    return classes


def brute_range_best(spec: GroupSpec, subscribers: Sequence[str], size: int, topic_ids: list[str]) -> int:
    """The most local pairs of any balanced, co-partitioned split of one class."""
    base, extra = divmod(size, len(subscribers))
    best = 0
    for choice in itertools.product(subscribers, repeat=size):
        counts = [choice.count(m) for m in subscribers]
        if all(base <= c <= base + 1 for c in counts) and counts.count(base + 1) == extra:
            local = sum(
                1
                for t in topic_ids
                for p, m in enumerate(choice)
                if spec.topics[t].partition_racks
                and spec.members[m].rack_id == spec.topics[t].partition_racks[p]
            )
            best = max(best, local)
    return best


@settings(max_examples=examples(150), deadline=None)
@given(spec=range_specs())
def test_range_with_racks_co_partitions_balances_and_is_as_local_as_balance_allows(spec: GroupSpec) -> None:
    result = RANGE.assign(spec)
    assert set(result) == set(spec.members)
    assert RANGE.assign(reordered(spec, 3)) == result, "independent of the member order"
    subscribed = {t for s in spec.members.values() for t in s.subscribed_topic_ids}
    expected = {(t, p) for t in subscribed for p in range(spec.topics[t].num_partitions)}
    got = owners(result)
    assert set(got) == expected
    for tp, member_id in got.items():
        assert tp[0] in spec.members[member_id].subscribed_topic_ids
    best_total = 0
    for (subscribers, size), topic_ids in range_classes(spec).items():
        first = topic_ids[0]
        for member_id in subscribers:
            mine = result[member_id].get(first, frozenset())
            for other in topic_ids[1:]:
                assert result[member_id].get(other, frozenset()) == mine, "co-partitioned"
        counts = [len(result[m].get(first, ())) for m in subscribers]
        assert max(counts) - min(counts) <= 1
        best = brute_range_best(spec, sorted(subscribers), size, topic_ids)
        local = sum(
            1
            for t in topic_ids
            for p in range(size)
            if spec.topics[t].partition_racks
            and spec.members[got[(t, p)]].rack_id == spec.topics[t].partition_racks[p]
        )
        assert local == best, (subscribers, size, topic_ids)
        best_total += best
    assert rack_locality(spec, result, "range") == (
        local_pairs(spec, result),
        sum(t.num_partitions for t in spec.topics.values() if t.partition_racks and t.topic_id in subscribed),
        best_total,
    )


@settings(max_examples=examples(80), deadline=None)
@given(spec=range_specs())
def test_range_classes_without_racks_split_as_without_racks(spec: GroupSpec) -> None:
    no_racks = dataclasses.replace(
        spec, topics={t: dataclasses.replace(topic, partition_racks=()) for t, topic in spec.topics.items()}
    )
    rack_path = dataclasses.replace(no_racks, topics={**no_racks.topics, "Z": Topic("Z", "z", 1, ("a",))})
    # An unsubscribed topic with racks sends range down the rack path; every
    # subscribed class has none, so the split must be the rack-blind one.
    plain = RANGE.assign(no_racks)
    assert RANGE.assign(rack_path) == plain


def test_capacities_below_one_count_as_one() -> None:
    topics = {"T": Topic("T", "t", 6)}
    members = {
        m: MemberSpec(m, None, None, frozenset(topics), {}, capacity=c) for m, c in (("a", 0), ("b", 2))
    }
    result = UNIFORM.assign(GroupSpec(members=members, topics=topics))
    assert [len(result[m]["T"]) for m in "ab"] == [2, 4]


def test_rack_locality_has_no_best_for_range_classes_with_different_layouts() -> None:
    topics = {"A": Topic("A", "a", 2, ("x", "y")), "B": Topic("B", "b", 2, ("y", "x"))}
    members = {m: MemberSpec(m, None, r, frozenset(topics), {}) for m, r in (("m0", "x"), ("m1", "y"))}
    spec = GroupSpec(members=members, topics=topics)
    result = RANGE.assign(spec)
    report = rack_locality(spec, result, "range")
    assert report.partitions_with_known_racks == 4
    assert report.local_partitions == 2  # each unit is local for one topic of two, whoever gets it
    assert report.best_achievable is None
    assert rack_locality(spec, result, "some-client-assignor").best_achievable is None


@settings(max_examples=examples(300), deadline=None)
@given(
    held=st.dictionaries(
        st.sampled_from([f"t{i:02}" for i in range(20)]),
        st.frozensets(st.integers(0, 12), min_size=1, max_size=6),
        max_size=20,
    ),
    empty=st.booleans(),
    cut=st.integers(-2, 12),
    from_end=st.booleans(),
)
def test_first_in_order_keeps_the_first_k_partitions_in_the_global_order(
    held: dict[str, frozenset[int]], empty: bool, cut: int, from_end: bool
) -> None:
    """Whichever way it finds them (a bisection, or a cut of the last topic or
    two for a member cut by a few), the first k (topic, partition) pairs in
    order, empty topics out; the cut also says what it left out."""
    total = sum(map(len, held.values()))
    k = total - cut if from_end else cut * 10
    pairs = sorted((t, p) for t, ps in held.items() for p in ps)
    expected: dict[str, set[int]] = {}
    for t, p in pairs[: max(k, 0)]:
        expected.setdefault(t, set()).add(p)
    tail = uniform_quota._all_but_last(held, total - k) if k > 0 else None
    if empty:
        held["t99"] = frozenset()
    kept = uniform_quota.first_in_order(held, k)
    assert kept == {t: frozenset(ps) for t, ps in expected.items()}
    assert all(type(ps) is frozenset for ps in kept.values())
    if tail is not None:
        cut_kept, left_out = tail
        assert cut_kept == kept
        assert sorted((t, p) for t, ps in left_out for p in ps) == pairs[k:]


@settings(max_examples=examples(500), deadline=None)
@given(data=st.data(), n=st.integers(1, 40))
def test_choosing_extras_when_few_go_without_equals_the_walk(data: st.DataObject, n: int) -> None:
    """`choose_extras` with members in id order (a range) may find the few
    members left without the extra one from the end; given the same order as
    a list it always walks. Both choose the same members."""
    racks = data.draw(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=n, max_size=n))
    floors = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    counts = [f + data.draw(st.sampled_from([0, 1, 1, 1, -1])) for f in floors]
    candidates = [data.draw(st.sampled_from([True] * 9 + [False])) for _ in range(n)]
    extra = data.draw(st.integers(min(candidates.count(True), n // 2), candidates.count(True)))
    gains = {r: data.draw(st.integers(0, n)) for r in data.draw(st.sets(st.sampled_from("abc")))}
    walked = choose_extras(extra, list(range(n)), candidates, counts, floors, racks, gains)
    assert choose_extras(extra, range(n), candidates, counts, floors, racks, gains) == walked
    # The same with the members per rack counted by the caller (as uniform_quota does).
    counted = Counter(racks)
    assert choose_extras(extra, range(n), candidates, counts, floors, racks, gains, None, counted) == walked
    assert sum(walked) == extra and not any(c and not k for c, k in zip(walked, candidates, strict=True))


@settings(max_examples=examples(300), deadline=None)
@given(
    rooms=st.lists(st.sampled_from([0, 0, 1, 2, 2, 3, 5]) | st.integers(0, 40), max_size=30),
    data=st.data(),
)
def test_a_racks_takers_are_its_members_with_room_most_first_then_in_member_order(
    rooms: list[int], data: st.DataObject
) -> None:
    """B's takers of a rack, found from the rack's members as filed for the
    gains: those with room, most room first, member order among equals (a
    stable sort), whether rooms take few values or many."""
    members = sorted(data.draw(st.sets(st.integers(0, max(len(rooms) - 1, 0)))) if rooms else [])
    expected = sorted((i for i in members if rooms[i] > 0), key=lambda i: -rooms[i])
    assert uniform_quota._with_room(members, rooms) == expected


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data(), n=st.integers(1, 40))
def test_choosing_extras_from_the_callers_filing_by_rack_equals_the_walk(data: st.DataObject, n: int) -> None:
    """Given each rack's members as the caller filed them (members in id
    order, the coordinator's), `choose_extras` reads a rack's first members
    from there; it chooses what the walk over a list of the members chooses."""
    racks = data.draw(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=n, max_size=n))
    floors = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    # Mostly nothing held and every share fractional: the case the filing serves.
    held = data.draw(st.sampled_from([False, False, True]))
    counts = [f + data.draw(st.sampled_from([0, 0, 1, -1])) if held else 0 for f in floors]
    every_share_fractional = data.draw(st.sampled_from([True, True, False]))
    candidates = [every_share_fractional or data.draw(st.booleans()) for _ in range(n)]
    extra = data.draw(st.integers(0, candidates.count(True)))
    gains = {r: data.draw(st.integers(0, n)) for r in data.draw(st.sets(st.sampled_from("abc")))}
    groups = {r: [i for i in range(n) if racks[i] == r] for r in "abc" if r in racks}
    walked = choose_extras(extra, list(range(n)), candidates, counts, floors, racks, gains)
    assert choose_extras(extra, range(n), candidates, counts, floors, racks, gains, groups) == walked


@settings(max_examples=examples(200), deadline=None)
@given(
    steps=st.lists(
        st.tuples(rack_topics(max_total=8), st.lists(st.sampled_from(["a", "b", "d", None]), min_size=1)),
        min_size=1,
        max_size=12,
    )
)
def test_the_rack_index_is_reused_only_for_the_same_topics_layouts_and_member_racks(
    steps: list[tuple[dict[str, Topic], list[str | None]]],
) -> None:
    """Whatever came before (the index of recent computations is kept), the
    index is the one built from these topics, their layouts and these member
    racks; asked again with the same, it is the very same index."""
    for topics, racks in [*steps, *steps]:
        topic_ids = sorted(t for t, topic in topics.items() if topic.partition_racks)
        if not topic_ids:
            continue
        spec = GroupSpec(members={}, topics=topics)
        index = uniform_quota._local_index(spec, topic_ids, racks)
        layouts = [topics[t].partition_racks for t in topic_ids]
        assert index == uniform_quota._build_local_index(list(topic_ids), layouts, frozenset(racks))
        assert uniform_quota._local_index(spec, list(topic_ids), list(racks)) is index


@settings(max_examples=examples(200), deadline=None)
@given(spec=uniform_specs(weighted=True, max_total=24, max_members=9), weighted=st.booleans())
def test_every_handout_gets_its_takers_most_room_first(spec: GroupSpec, weighted: bool) -> None:
    """_hand_out and _hand_out_runs tell equal room along a run of takers from
    its first and last taker, which holds only if takers come most room first:
    every caller (steps B and D, with or without anything held) must pass them
    so."""
    seen: list[list[int]] = []
    hand_out, runs = uniform_quota._Build._hand_out, uniform_quota._Build._hand_out_runs

    def checked_hand_out(self: Any, takers: list[int], *args: Any, **kwargs: Any) -> int:
        seen.append([self.room[i] for i in takers])
        return hand_out(self, takers, *args, **kwargs)

    def checked_runs(self: Any, takers: list[int], *args: Any, **kwargs: Any) -> int:
        seen.append([self.room[i] for i in takers])
        return runs(self, takers, *args, **kwargs)

    if not weighted:
        members = {m: dataclasses.replace(s, capacity=1) for m, s in spec.members.items()}
        spec = dataclasses.replace(spec, members=members)
    fresh = {m: dataclasses.replace(s, current={}) for m, s in spec.members.items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uniform_quota._Build, "_hand_out", checked_hand_out)
        patch.setattr(uniform_quota._Build, "_hand_out_runs", checked_runs)
        for given in (spec, dataclasses.replace(spec, members=fresh)):
            UNIFORM.assign(given)
    assert all(rooms == sorted(rooms, reverse=True) for rooms in seen)
