"""Randomized safety tests of the pure engine (hypothesis): the simulated group of
tests/support/group_machine.py run as state machines, and a plain @given test of the
server assignors on their own."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.reconciler import Topic
from regroup.reconciler.assignors import BUILTIN_ASSIGNORS, GroupSpec, MemberSpec
from regroup.reconciler.model import Assignment
from tests.support.depth import examples
from tests.support.group_machine import (
    _DATABASE,
    PARTITION_ASSIGNORS,
    TP,
    GroupMachine,
    _norm,
    _pairs,
    machine_settings,
)

TestGroupMachine = GroupMachine.TestCase


class RedundantGroupMachine(GroupMachine):
    """The same machine with members asking for 2 or 3 copies of each partition (the
    group takes the largest, so the count changes as members come and go): every check
    above holds per (partition, copy) slot, no member ever holds two copies of one
    partition, and the group converges to min(replicas, subscribers) copies of each."""

    REPLICAS = (2, 3, 2, 1)


RedundantGroupMachine.TestCase.settings = machine_settings(200)
TestRedundantGroupMachine = RedundantGroupMachine.TestCase


# -- the assignors on their own --------------------------------------------


@st.composite
def group_specs(draw: st.DrawFn) -> GroupSpec:
    """Members with subscriptions and disjoint current targets, some of them stale
    (a deleted topic, topics no longer subscribed)."""
    topics = {
        f"T{i}": Topic(f"T{i}", f"t{i}", draw(st.integers(1, 8))) for i in range(draw(st.integers(1, 3)))
    }
    member_ids = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    common = draw(st.frozensets(st.sampled_from(sorted(topics))))
    homogeneous = draw(st.booleans())
    subscriptions = {
        m: common if homogeneous else draw(st.frozensets(st.sampled_from(sorted(topics)))) for m in member_ids
    }
    current: dict[str, dict[str, set[int]]] = {m: {} for m in member_ids}
    universe = [(t.topic_id, p) for t in topics.values() for p in range(t.num_partitions)]
    universe += [("gone", 0), ("gone", 1)]
    for topic_id, partition in universe:
        holder = draw(st.sampled_from([None, *member_ids]))
        if holder is not None:
            current[holder].setdefault(topic_id, set()).add(partition)
    members = {
        m: MemberSpec(
            member_id=m,
            instance_id=draw(st.sampled_from([None, f"i{m}"])),
            rack_id=None,
            subscribed_topic_ids=subscriptions[m],
            current=_norm(current[m]),
        )
        for m in member_ids
    }
    used = frozenset().union(*subscriptions.values())
    return GroupSpec(members=members, topics={t: topics[t] for t in sorted(used)})


def _with_current(spec: GroupSpec, result: Mapping[str, Assignment]) -> GroupSpec:
    members = {m: dataclasses.replace(s, current=result[m]) for m, s in spec.members.items()}
    return GroupSpec(members=members, topics=spec.topics)


@settings(max_examples=examples(150), deadline=None, database=_DATABASE)
@given(spec=group_specs(), name=st.sampled_from(PARTITION_ASSIGNORS))
def test_assignors_give_every_subscribed_partition_to_exactly_one_subscriber(
    spec: GroupSpec, name: str
) -> None:
    assignor = BUILTIN_ASSIGNORS[name]
    result = assignor.assign(spec)
    assert set(result) == set(spec.members)
    assert assignor.assign(spec) == result, "assignors must be deterministic"

    owners: dict[TP, str] = {}
    for member_id, assignment in result.items():
        for tp in _pairs(assignment):
            assert tp not in owners, f"{tp} given to {owners[tp]} and {member_id}"
            assert tp[0] in spec.members[member_id].subscribed_topic_ids, f"{member_id} got unsubscribed {tp}"
            owners[tp] = member_id
    expected = {(t, p) for t, topic in spec.topics.items() for p in range(topic.num_partitions)}
    assert set(owners) == expected

    sizes = [len(_pairs(a)) for a in result.values()]
    if name == "uniform":
        # Stable: an assignment fed back as the current one moves nothing.
        assert assignor.assign(_with_current(spec, result)) == result
        if spec.is_homogeneous():
            assert max(sizes) - min(sizes) <= 1, sizes
            base = len(expected) // len(spec.members)
            for member_id, member in spec.members.items():
                # Sticky: a member keeps its valid current partitions up to its fair share.
                valid = _pairs(member.current) & expected
                kept = valid & _pairs(result[member_id])
                assert len(kept) >= min(len(valid), base), (member_id, valid, result[member_id])
    else:
        for topic_id in spec.topics:
            subscribers = [m for m, s in spec.members.items() if topic_id in s.subscribed_topic_ids]
            per_member = [sorted(result[m].get(topic_id, ())) for m in subscribers]
            assert max(map(len, per_member)) - min(map(len, per_member)) <= 1
            for partitions in per_member:
                # Contiguous ranges, the range assignor's point.
                assert not partitions or partitions == list(range(partitions[0], partitions[-1] + 1))
