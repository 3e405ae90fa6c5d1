"""The server-side assignors, through `GroupSpec` and `MemberSpec`."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

import pytest

from regroup.reconciler import Topic
from regroup.reconciler.assignors import (
    Assignor,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    SubscriptionType,
    UniformAssignor,
)
from regroup.reconciler.model import Assignment, make_assignment, partition_count

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()

Owners = dict[tuple[str, int], str]


def topics(**sizes: int) -> dict[str, Topic]:
    """Topics by id ("<name>-id"), with their partition counts."""
    return {f"{name}-id": Topic(f"{name}-id", name, count) for name, count in sizes.items()}


def tp(**partitions: Iterable[int]) -> Assignment:
    """An assignment keyed by topic name, e.g. tp(t1={0, 1})."""
    return make_assignment((f"{name}-id", p) for name, p in partitions.items())


def spec(
    all_topics: Mapping[str, Topic],
    subscriptions: Mapping[str, Iterable[str]],
    current: Mapping[str, Assignment] | None = None,
    instances: Mapping[str, str] | None = None,
) -> GroupSpec:
    """`subscriptions` maps member ids to topic names."""
    current = current or {}
    instances = instances or {}
    members = {
        member_id: MemberSpec(
            member_id=member_id,
            instance_id=instances.get(member_id),
            rack_id=None,
            subscribed_topic_ids=frozenset(f"{name}-id" for name in names),
            current=current.get(member_id, {}),
        )
        for member_id, names in subscriptions.items()
    }
    return GroupSpec(members=members, topics=all_topics)


def homogeneous(all_topics: Mapping[str, Topic], member_ids: Iterable[str], **kwargs: object) -> GroupSpec:
    names = [t.name for t in all_topics.values()]
    return spec(all_topics, {m: names for m in member_ids}, **kwargs)  # type: ignore[arg-type]


def owners(result: Mapping[str, Assignment]) -> Owners:
    out: Owners = {}
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            for partition in partitions:
                assert (topic_id, partition) not in out, f"{topic_id}-{partition} assigned twice"
                out[(topic_id, partition)] = member_id
    return out


def assert_valid(group: GroupSpec, result: Mapping[str, Assignment]) -> None:
    """Every member present; every subscribed partition assigned exactly once, to a subscriber."""
    assert set(result) == set(group.members)
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert partitions, f"{member_id} has an empty entry for {topic_id}"
            assert topic_id in group.members[member_id].subscribed_topic_ids
    subscribed = {t for m in group.members.values() for t in m.subscribed_topic_ids if t in group.topics}
    expected = {(t, p) for t in subscribed for p in range(group.topics[t].num_partitions)}
    assert set(owners(result)) == expected


def assert_balanced(result: Mapping[str, Assignment]) -> None:
    sizes = [partition_count(a) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1, sizes


def moved(before: Mapping[str, Assignment], after: Mapping[str, Assignment]) -> int:
    """Partitions that had an owner before and have another one now."""
    old, new = owners(before), owners(after)
    return sum(1 for tp_, member_id in old.items() if new.get(tp_) not in (None, member_id))


def is_subset(a: Assignment, b: Assignment) -> bool:
    return all(p <= b.get(t, frozenset()) for t, p in a.items())


def reordered(group: GroupSpec, seed: int) -> GroupSpec:
    """The same spec with members in another insertion order."""
    items = list(group.members.items())
    random.Random(seed).shuffle(items)
    return GroupSpec(members=dict(items), topics=group.topics)


# -- uniform, homogeneous ----------------------------------------------------


@pytest.mark.parametrize(("t1", "t2", "sizes"), [(7, 5, [4, 4, 4]), (7, 6, [5, 4, 4]), (1, 0, [1, 0, 0])])
def test_uniform_homogeneous_assigns_every_partition_once_and_balances(
    t1: int, t2: int, sizes: list[int]
) -> None:
    group = homogeneous(topics(t1=t1, t2=t2), ["a", "b", "c"])

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert sorted((partition_count(a) for a in result.values()), reverse=True) == sizes


def test_uniform_homogeneous_balanced_assignment_moves_nothing() -> None:
    all_topics = topics(t1=7, t2=3)
    # Balanced, but not what the assignor would pick from scratch.
    current = {"a": tp(t1={6, 5, 0}, t2={2}), "b": tp(t1={1, 3, 4}), "c": tp(t1={2}, t2={0, 1})}
    group = homogeneous(all_topics, ["a", "b", "c"], current=current)

    assert UNIFORM.assign(group) == current


def test_uniform_homogeneous_is_stable_across_runs() -> None:
    all_topics = topics(t1=7, t2=3)
    first = UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c"]))

    again = UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c"], current=first))

    assert again == first


@pytest.mark.parametrize(
    ("current", "expected_moves"),
    [
        # 12 partitions, 4 each; with d the quota is 3: each of a, b, c gives up exactly one.
        ({"a": tp(t1=range(0, 4)), "b": tp(t1=range(4, 8)), "c": tp(t1=range(8, 12))}, 3),
        # 10 partitions as 4/3/3; with d the quotas are 3, 3, 2, 2. The two extra slots go to
        # the largest holders, so only a (4 -> 3) and one of b, c (3 -> 2) give one up.
        ({"a": tp(t1=range(0, 4)), "b": tp(t1=range(4, 7)), "c": tp(t1=range(7, 10))}, 2),
    ],
)
def test_uniform_homogeneous_member_joining_moves_only_the_surplus(
    current: dict[str, Assignment], expected_moves: int
) -> None:
    total = sum(partition_count(a) for a in current.values())
    group = homogeneous(topics(t1=total), ["a", "b", "c", "d"], current=current)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert moved(current, result) == expected_moves
    assert partition_count(result["d"]) == expected_moves
    assert all(is_subset(result[m], current[m]) for m in current)


def test_uniform_homogeneous_member_leaving_moves_only_its_partitions() -> None:
    all_topics = topics(t1=7, t2=4)
    before = UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c", "d"]))
    remaining = {m: before[m] for m in ("a", "b", "d")}
    group = homogeneous(all_topics, remaining, current=remaining)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert moved(remaining, result) == 0
    assert all(is_subset(before[m], result[m]) for m in remaining)


def test_uniform_homogeneous_topic_growth_moves_nothing_assigned() -> None:
    before = UNIFORM.assign(homogeneous(topics(t1=6, t2=4), ["a", "b", "c"]))
    group = homogeneous(topics(t1=9, t2=4), ["a", "b", "c"], current=before)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert all(is_subset(before[m], result[m]) for m in before)


def test_uniform_homogeneous_drops_deleted_topics_and_unknown_partitions() -> None:
    current = {"a": tp(t1={0, 1}, gone={0, 1, 2}), "b": tp(t1={2, 3, 9})}
    group = homogeneous(topics(t1=4), ["a", "b"], current=current)

    assert UNIFORM.assign(group) == {"a": tp(t1={0, 1}), "b": tp(t1={2, 3})}


def test_uniform_with_no_members_or_no_topics() -> None:
    assert UNIFORM.assign(GroupSpec(members={}, topics=topics(t1=3))) == {}
    assert UNIFORM.assign(spec({}, {"a": [], "b": []})) == {"a": {}, "b": {}}


def random_topics(rng: random.Random) -> dict[str, Topic]:
    return topics(**{f"t{i}": rng.randint(1, 20) for i in range(rng.randint(1, 4))})


def random_current(
    rng: random.Random, all_topics: Mapping[str, Topic], members: list[str]
) -> dict[str, Assignment]:
    """A disjoint, possibly unbalanced and partial current target, with some stale entries."""
    pairs: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    for topic_id, topic in all_topics.items():
        for p in range(topic.num_partitions + 2):  # a few partitions past the end: ignored
            if rng.random() < 0.6:
                pairs[rng.choice(members)].append((topic_id, p))
    if rng.random() < 0.3:
        pairs[rng.choice(members)].append(("deleted-id", 0))
    return {m: make_assignment((t, [p]) for t, p in ps) for m, ps in pairs.items()}


@pytest.mark.parametrize("seed", range(50))
def test_uniform_homogeneous_randomized(seed: int) -> None:
    rng = random.Random(seed)
    all_topics = random_topics(rng)
    members = [f"m{i}" for i in range(rng.randint(1, 8))]
    current = random_current(rng, all_topics, members)
    group = homogeneous(all_topics, members, current=current)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert UNIFORM.assign(reordered(group, seed)) == result
    # Sticky: a member keeps as much of its (still valid) current target as its new size allows.
    for m in members:
        valid = {(t, p) for t, ps in current[m].items() if t in all_topics for p in ps}
        valid = {(t, p) for t, p in valid if p < all_topics[t].num_partitions}
        kept = {(t, p) for t, ps in result[m].items() for p in ps} & valid
        assert len(kept) == min(len(valid), partition_count(result[m]))


@pytest.mark.parametrize("seed", range(30))
def test_uniform_homogeneous_joins_into_a_balanced_group_cut_the_last_ids_in_any_member_order(
    seed: int,
) -> None:
    """The coordinator passes members in id order, which the join path uses to find
    the members giving a partition up; any other order must give the same target."""
    rng = random.Random(seed)
    all_topics = random_topics(rng)
    ids = sorted(f"m{rng.getrandbits(32):08x}" for _ in range(rng.randint(2, 60)))
    settled = UNIFORM.assign(homogeneous(all_topics, ids))
    joiners = sorted(f"m{rng.getrandbits(32):08x}" for _ in range(rng.randint(1, 30)))
    everyone = sorted(set(ids) | set(joiners))
    group = homogeneous(all_topics, everyone, current=settled)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert UNIFORM.assign(reordered(group, seed)) == result
    total = sum(t.num_partitions for t in all_topics.values())
    base = total // len(everyone)
    # Minimal moves: a member keeps its whole target if it may, else its quota of it.
    for m in ids:
        kept = sum(len(p & result[m].get(t, frozenset())) for t, p in settled[m].items())
        assert kept == min(partition_count(settled[m]), partition_count(result[m]))
        assert partition_count(result[m]) >= min(base, partition_count(settled[m]))


def typed(group: GroupSpec) -> GroupSpec:
    """The spec with its subscription type stated, as the coordinator passes it."""
    subscriptions = {m.subscribed_topic_ids for m in group.members.values()}
    kind = SubscriptionType.HOMOGENEOUS if len(subscriptions) <= 1 else SubscriptionType.HETEROGENEOUS
    return GroupSpec(members=group.members, topics=group.topics, subscription_type=kind)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_a_stated_subscription_type_gives_the_same_target(assignor: Assignor, seed: int) -> None:
    rng = random.Random(seed)
    all_topics = random_topics(rng)
    names = [t.name for t in all_topics.values()]
    members = [f"m{i}" for i in range(rng.randint(1, 8))]
    if seed % 2:  # heterogeneous: each member a random non-empty part of the topics
        subscriptions = {m: rng.sample(names, rng.randint(1, len(names))) for m in members}
    else:
        subscriptions = {m: names for m in members}
    group = spec(all_topics, subscriptions, current=random_current(rng, all_topics, members))

    result = assignor.assign(typed(group))

    assert_valid(group, result)
    assert assignor.assign(group) == result
    assert typed(group).is_homogeneous() == group.is_homogeneous()


# -- uniform, heterogeneous --------------------------------------------------


def test_uniform_heterogeneous_assigns_each_topic_to_its_subscribers() -> None:
    group = spec(topics(t1=4, t2=6, t3=2), {"a": ["t1"], "b": ["t1", "t2"], "c": ["t2", "t3"]})
    assert not group.is_homogeneous()

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert UNIFORM.assign(reordered(group, 1)) == result
    assert UNIFORM.assign(group) == result


def test_uniform_heterogeneous_balances_when_subscriptions_allow() -> None:
    group = spec(topics(t1=4, t2=2), {"a": ["t1", "t2"], "b": ["t1"]})

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert result["a"] == tp(t1={2}, t2={0, 1})
    assert result["b"] == tp(t1={0, 1, 3})


def test_uniform_heterogeneous_reassigns_partitions_of_unsubscribed_topics() -> None:
    current = {"a": tp(t1={0, 1}, t2={0, 1}), "b": tp(t1={2, 3})}
    group = spec(topics(t1=4, t2=2), {"a": ["t1"], "b": ["t1", "t2"]}, current=current)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert result["b"][("t2-id")] == frozenset({0, 1})
    assert "t2-id" not in result["a"]


@pytest.mark.parametrize("seed", range(50))
def test_uniform_heterogeneous_randomized(seed: int) -> None:
    rng = random.Random(1_000 + seed)
    all_topics = random_topics(rng)
    names = [t.name for t in all_topics.values()]
    members = [f"m{i}" for i in range(rng.randint(2, 8))]
    subscriptions = {m: rng.sample(names, rng.randint(0, len(names))) for m in members}
    group = spec(all_topics, subscriptions, current=random_current(rng, all_topics, members))

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert UNIFORM.assign(reordered(group, seed)) == result
    # Feeding the result back as the current target changes nothing.
    again = spec(all_topics, subscriptions, current=result)
    assert UNIFORM.assign(again) == result


# -- range -------------------------------------------------------------------


def test_range_gives_contiguous_ranges_and_one_more_to_the_first_members() -> None:
    group = homogeneous(topics(t1=7, t2=8), ["a", "b", "c"])

    result = RANGE.assign(group)

    assert result == {
        "a": tp(t1={0, 1, 2}, t2={0, 1, 2}),
        "b": tp(t1={3, 4}, t2={3, 4, 5}),
        "c": tp(t1={5, 6}, t2={6, 7}),
    }


def test_range_co_partitions_topics_with_equal_partition_counts() -> None:
    group = homogeneous(topics(t1=5, t2=5, t3=5), ["c", "a", "b"])

    result = RANGE.assign(group)

    assert_valid(group, result)
    by_owner = owners(result)
    for p in range(5):
        assert by_owner[("t1-id", p)] == by_owner[("t2-id", p)] == by_owner[("t3-id", p)]
    assert result["a"] == tp(t1={0, 1}, t2={0, 1}, t3={0, 1})


def test_range_orders_static_members_by_instance_id_before_dynamic_members() -> None:
    group = homogeneous(topics(t1=4), ["a", "b", "y", "z"], instances={"y": "i2", "z": "i1"})

    result = RANGE.assign(group)

    assert result == {"z": tp(t1={0}), "y": tp(t1={1}), "a": tp(t1={2}), "b": tp(t1={3})}


def test_range_splits_each_topic_among_its_subscribers_only() -> None:
    group = spec(topics(t1=3, t2=3), {"a": ["t1"], "b": ["t1", "t2"], "c": ["t2"]})

    result = RANGE.assign(group)

    assert_valid(group, result)
    assert result == {"a": tp(t1={0, 1}), "b": tp(t1={2}, t2={0, 1}), "c": tp(t2={2})}


def test_range_with_more_members_than_partitions() -> None:
    group = homogeneous(topics(t1=2), ["a", "b", "c"])

    assert RANGE.assign(group) == {"a": tp(t1={0}), "b": tp(t1={1}), "c": {}}


def test_range_is_deterministic_and_ignores_the_current_target() -> None:
    all_topics = topics(t1=5, t2=3)
    group = homogeneous(all_topics, ["a", "b", "c"])
    result = RANGE.assign(group)

    assert RANGE.assign(reordered(group, 7)) == result
    scrambled = {"a": tp(t1={4}), "b": tp(t2={0, 1, 2}), "c": tp(t1={0, 1})}
    assert RANGE.assign(homogeneous(all_topics, ["a", "b", "c"], current=scrambled)) == result


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_assignors_ignore_topics_nobody_subscribes_to(assignor: Assignor) -> None:
    group = spec(topics(t1=3, t2=4), {"a": ["t1"], "b": ["t1"]})

    result = assignor.assign(group)

    assert_valid(group, result)
    assert all("t2-id" not in a for a in result.values())


# -- the fast paths: object reuse, fresh blocks, stale and invalid input -----


def test_uniform_homogeneous_balanced_input_returns_the_same_objects() -> None:
    """An unchanged target is the very object passed in: the caller's diff is then `is`."""
    all_topics = topics(t1=7, t2=3)
    first = UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c"]))

    again = UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c"], current=first))

    assert all(again[m] is first[m] for m in first)


def test_uniform_homogeneous_join_reuses_the_untouched_members_objects() -> None:
    members = [f"m{i:03}" for i in range(50)]
    all_topics = topics(t1=500, t2=500)  # 20 each; with one more member, 19 or 20
    before = UNIFORM.assign(homogeneous(all_topics, members))
    group = homogeneous(all_topics, [*members, "zz-new"], current=before)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    # 1000 = 51 * 19 + 31: the 31 first by id keep 20, the other 19 give one up.
    cut = [m for m in members if result[m] is not before[m]]
    assert cut == members[31:]
    assert all(partition_count(result[m]) == 19 and is_subset(result[m], before[m]) for m in cut)
    assert moved(before, result) == 19 == partition_count(result["zz-new"])


def test_uniform_homogeneous_leave_reuses_the_remaining_members_objects() -> None:
    members = [f"m{i:03}" for i in range(40)]
    all_topics = topics(t1=300, t2=101)
    before = UNIFORM.assign(homogeneous(all_topics, members))
    remaining = {m: before[m] for m in members if m != "m007"}
    group = homogeneous(all_topics, remaining, current=remaining)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert moved(remaining, result) == 0
    # Only members that received some of the leaver's partitions have a new object.
    changed = [m for m in remaining if result[m] is not remaining[m]]
    assert sum(partition_count(result[m]) - partition_count(remaining[m]) for m in changed) == (
        partition_count(before["m007"])
    )


def test_uniform_homogeneous_fresh_assignment_gives_contiguous_blocks_in_id_order() -> None:
    all_topics = topics(a=5, b=3, c=4)  # the global order: a-id, b-id, c-id
    group = homogeneous(all_topics, ["m3", "m1", "m2", "m0", "m4"])

    result = UNIFORM.assign(group)

    # 12 = 5 * 2 + 2: m0 and m1 take 3, the others 2, each the next block.
    assert result == {
        "m0": tp(a={0, 1, 2}),
        "m1": tp(a={3, 4}, b={0}),
        "m2": tp(b={1, 2}),
        "m3": tp(c={0, 1}),
        "m4": tp(c={2, 3}),
    }


def test_uniform_homogeneous_fresh_assignment_with_more_members_than_partitions() -> None:
    group = homogeneous(topics(t1=2, t2=1), ["c", "a", "d", "b", "e"])

    result = UNIFORM.assign(group)

    assert result == {"a": tp(t1={0}), "b": tp(t1={1}), "c": tp(t2={0}), "d": {}, "e": {}}


def test_uniform_homogeneous_topic_recreated_under_a_new_id() -> None:
    """The old id is gone from the spec: its partitions are dropped, the new
    topic's handed out from scratch, and the rest stays where it was."""
    before = UNIFORM.assign(homogeneous(topics(t1=6, t2=6), ["a", "b", "c"]))
    # a: t1 0-3; b: t1 4-5 and t2 0-1; c: t2 2-5.
    recreated = {"t1-id": Topic("t1-id", "t1", 6), "t2-new": Topic("t2-new", "t2", 6)}
    subscribed = frozenset(recreated)
    members = {m: MemberSpec(m, None, None, subscribed, before[m]) for m in before}
    group = GroupSpec(members=members, topics=recreated)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert all("t2-id" not in result[m] for m in result)
    # 12 partitions, 4 each: a keeps its 4 of t1, b its 2 and takes 2 of the
    # new t2, c (whose topic is gone) takes the other 4.
    assert result["a"] is before["a"]
    assert result["b"]["t1-id"] == before["b"]["t1-id"]
    assert partition_count(result["b"]) == partition_count(result["c"]) == 4


def test_uniform_homogeneous_topic_growth_hands_out_only_the_new_partitions() -> None:
    members = [f"m{i}" for i in range(7)]
    before = UNIFORM.assign(homogeneous(topics(t1=20, t2=9), members))
    group = homogeneous(topics(t1=31, t2=9), members, current=before)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert moved(before, result) == 0
    assert all(is_subset(before[m], result[m]) for m in members)


def test_uniform_homogeneous_overlapping_current_targets_are_resolved() -> None:
    """Targets this assignor computed never overlap; if the input does, every
    partition still ends with exactly one member."""
    all_topics = topics(t1=6, t2=2)
    current = {
        "a": tp(t1={0, 1, 2}, t2={0}),
        "b": tp(t1={2, 3}, t2={0, 1}),  # t1-2 and t2-0 also held by a
        "c": tp(t1={3, 4, 5, -1}),  # t1-3 also held by b; -1 is no partition
    }
    group = homogeneous(all_topics, ["a", "b", "c"], current=current)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert UNIFORM.assign(reordered(group, 3)) == result
    assert UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c"], current=result)) == result


def test_uniform_homogeneous_accepts_any_mapping_as_current() -> None:
    from types import MappingProxyType

    all_topics = topics(t1=7, t2=3)
    first = UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c"]))
    proxied = {m: MappingProxyType(dict(a)) for m, a in first.items()}

    result = UNIFORM.assign(homogeneous(all_topics, ["a", "b", "c", "d"], current=proxied))

    assert_valid(homogeneous(all_topics, ["a", "b", "c", "d"]), result)
    assert_balanced(result)
    assert all(is_subset(result[m], first[m]) for m in first)


@pytest.mark.parametrize("seed", range(12))
def test_uniform_homogeneous_randomized_large(seed: int) -> None:
    """Enough members for the partial selections by id (heap and sort) to run."""
    rng = random.Random(5_000 + seed)
    members = [f"m{rng.randrange(10**6):06}-{i}" for i in range(rng.choice([150, 300, 700]))]
    all_topics = topics(**{f"t{i}": rng.randint(1, 400) for i in range(rng.randint(1, 6))})
    previous = rng.sample(members, len(members) * rng.randint(5, 10) // 10)
    before = UNIFORM.assign(homogeneous(all_topics, previous))
    if rng.random() < 0.5:  # some members also hold more than their share
        extra = rng.sample(previous, min(len(previous), 20))
        before = dict(before)
        for m in extra:
            before[m] = {}
    group = homogeneous(all_topics, members, current=before)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    assert UNIFORM.assign(reordered(group, seed)) == result
    for m in members:
        valid = {(t, p) for t, ps in before.get(m, {}).items() for p in ps}
        kept = {(t, p) for t, ps in result[m].items() for p in ps} & valid
        assert len(kept) == min(len(valid), partition_count(result[m]))


def test_uniform_heterogeneous_overlapping_current_targets_are_resolved() -> None:
    all_topics = topics(t1=4, t2=3)
    current = {"a": tp(t1={0, 1}, t2={0}), "b": tp(t1={1, 2, 7}), "c": tp(t2={0, 1})}
    group = spec(all_topics, {"a": ["t1", "t2"], "b": ["t1"], "c": ["t2"]}, current=current)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert UNIFORM.assign(reordered(group, 5)) == result
    again = spec(all_topics, {"a": ["t1", "t2"], "b": ["t1"], "c": ["t2"]}, current=result)
    assert UNIFORM.assign(again) == result


def _range_reference(group: GroupSpec) -> dict[str, Assignment]:
    """The range assignor's definition, written plainly."""

    def order(m: MemberSpec) -> tuple[int, str, str]:
        return (0, m.instance_id, m.member_id) if m.instance_id is not None else (1, m.member_id, "")

    ordered = sorted(group.members.values(), key=order)
    out: dict[str, dict[str, frozenset[int]]] = {m.member_id: {} for m in ordered}
    for topic_id, topic in group.topics.items():
        subscribers = [m.member_id for m in ordered if topic_id in m.subscribed_topic_ids]
        if not subscribers:
            continue
        base, extra = divmod(topic.num_partitions, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = base + (1 if index < extra else 0)
            if size:
                out[member_id][topic_id] = frozenset(range(start, start + size))
            start += size
    return dict(out)


@pytest.mark.parametrize("seed", range(20))
def test_range_matches_its_definition(seed: int) -> None:
    """Grouping by subscription, co-partitioned classes and partial sorts change nothing."""
    rng = random.Random(9_000 + seed)
    all_topics = topics(**{f"t{i}": rng.choice([1, 3, 8, 8, 40, 300]) for i in range(rng.randint(1, 8))})
    names = [t.name for t in all_topics.values()]
    subscription_choices = [rng.sample(names, rng.randint(0, len(names))) for _ in range(rng.randint(1, 4))]
    member_ids = [f"m{rng.randrange(10**6):06}-{i}" for i in range(rng.choice([3, 40, 400]))]
    static = {m: f"i{rng.randrange(10**6)}-{m}" for m in member_ids if rng.random() < 0.3}
    group = spec(all_topics, {m: rng.choice(subscription_choices) for m in member_ids}, instances=static)

    result = RANGE.assign(group)

    assert result == _range_reference(group)
    assert RANGE.assign(reordered(group, seed)) == result


@pytest.mark.parametrize(("size", "joining"), [(400, 1), (1000, 10), (300, 150)])
def test_uniform_homogeneous_joins_cut_the_last_members_by_id(size: int, joining: int) -> None:
    """Joins into a balanced group: who gives a partition up is chosen by a
    partial selection (one or a few members), or a sort (many)."""
    members = [f"m{i:05}" for i in range(size)]
    all_topics = topics(t1=size * 5)
    before = UNIFORM.assign(homogeneous(all_topics, members))
    newcomers = [f"n{i:05}" for i in range(joining)]
    group = homogeneous(all_topics, [*reversed(members), *newcomers], current=before)

    result = UNIFORM.assign(group)

    assert_valid(group, result)
    assert_balanced(result)
    base, extra = divmod(size * 5, size + joining)
    # The extra slots go to the largest holders (all equal) by id: the first
    # `extra` members keep base + 1, the others are cut to base.
    keep = min(extra, size)
    assert [m for m in members if result[m] is before[m]] == (members[:keep] if base + 1 == 5 else [])
    assert all(partition_count(result[m]) == base for m in members[keep:])
    assert moved(before, result) == sum(partition_count(result[n]) for n in newcomers)
