"""Redundant assignment (issue 24): every partition on `replicas` distinct members,
each (partition, copy) slot with one owner at most, no member with two copies, and
members that see and send plain partitions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.reconciler import ConsumerGroupHeartbeatResponse, Group, MemberState
from regroup.reconciler.assignors import GroupSpec, MemberSpec
from regroup.reconciler.assignors.redundant import assign_redundant
from regroup.reconciler.model import Assignment
from regroup.reconciler.offsets import (
    OffsetToCommit,
    ResetOffsets,
    ResetTopic,
    commit_offsets,
    fetch_offsets,
    reset_offsets,
)
from regroup.reconciler.replicas import collapse, split, subscribed_with_copies, with_copies
from regroup.reconciler.topics import Topic
from tests.support.depth import examples
from tests.support.engine import EngineHarness, beat, join

G = "g"


class Client:
    """A member as its client sees it: the plain partitions of its last assignment."""

    def __init__(self, h: EngineHarness, member_id: str) -> None:
        self.h, self.member_id = h, member_id
        self.epoch = 0
        self.holds: Assignment = {}

    def apply(self, r: ConsumerGroupHeartbeatResponse) -> None:
        self.epoch = r.member_epoch
        if r.assignment is not None:
            assert collapse(r.assignment) == r.assignment  # never a copy topic on the wire
            self.holds = r.assignment

    def join(self, topics: list[str], replicas: int) -> None:
        self.apply(self.h.heartbeat(join(G, self.member_id, topics, replicas=replicas)))

    def beat(self) -> None:
        self.apply(self.h.heartbeat(beat(G, self.member_id, self.epoch, self.holds)))


def group(h: EngineHarness) -> Group:
    return h.groups[G]


def check_slots(h: EngineHarness) -> None:
    """At most one owner per slot; no member holding two copies of a partition."""
    owners: Counter[tuple[str, int]] = Counter()
    for m in group(h).members.values():
        copies: Counter[tuple[str, int]] = Counter()
        for a in (m.assigned, m.pending_revocation):
            for topic_id, partitions in a.items():
                for p in partitions:
                    owners[topic_id, p] += 1
                    copies[split(topic_id)[0], p] += 1
        assert max(copies.values(), default=0) <= 1, m
    assert max(owners.values(), default=0) <= 1


def settle(h: EngineHarness, clients: list[Client]) -> None:
    for _ in range(20):
        for c in clients:
            c.beat()
            check_slots(h)
        if group(h).state().value == "Stable":
            return
    raise AssertionError("did not settle")


def copies_of(h: EngineHarness, clients: list[Client]) -> Counter[tuple[str, int]]:
    """How many members hold each plain partition."""
    count: Counter[tuple[str, int]] = Counter()
    for c in clients:
        for topic_id, partitions in c.holds.items():
            count.update((topic_id, p) for p in partitions)
    return count


def test_each_partition_goes_to_n_distinct_members_balanced() -> None:
    h = EngineHarness()
    t = h.create_topic("docs", 6)
    clients = [Client(h, m) for m in ("a", "b", "c")]
    for c in clients:
        c.join(["docs"], replicas=2)
        check_slots(h)
    settle(h, clients)
    assert copies_of(h, clients) == Counter({(t, p): 2 for p in range(6)})
    assert sorted(sum(len(p) for p in c.holds.values()) for c in clients) == [4, 4, 4]
    assert all(m.state is MemberState.STABLE for m in group(h).members.values())


def test_fewer_members_than_copies_get_every_partition_once_each() -> None:
    h = EngineHarness()
    t = h.create_topic("docs", 4)
    a = Client(h, "a")
    a.join(["docs"], replicas=3)
    settle(h, [a])
    assert copies_of(h, [a]) == Counter({(t, p): 1 for p in range(4)})
    b = Client(h, "b")
    b.join(["docs"], replicas=3)
    settle(h, [a, b])
    assert copies_of(h, [a, b]) == Counter({(t, p): 2 for p in range(4)})


def test_a_leaver_copies_move_only_after_they_are_free_and_offsets_are_per_copy() -> None:
    h = EngineHarness()
    t = h.create_topic("docs", 3)
    clients = [Client(h, m) for m in ("a", "b", "c")]
    for c in clients:
        c.join(["docs"], replicas=2)
    settle(h, clients)

    # Each holder of partition 0 commits its own progress; each reads its own back.
    holders = [c for c in clients if 0 in c.holds.get(t, ())]
    assert len(holders) == 2
    for n, c in enumerate(holders):
        result = commit_offsets(
            group(h), G, c.member_id, c.epoch, [OffsetToCommit(t, 0, 100 + n, "")], h.ctx()
        )
        assert [o.error.name for o in result.response] == ["NONE"]
        h.apply(G, result)
    for n, c in enumerate(holders):
        (fetched,) = fetch_offsets(group(h), G, c.member_id, c.epoch, [(t, [0])])
        assert fetched.committed is not None and fetched.committed.offset == 100 + n
    # A member without partition 0 may not commit it.
    other = next(c for c in clients if c not in holders)
    refused = commit_offsets(
        group(h), G, other.member_id, other.epoch, [OffsetToCommit(t, 0, 7, "")], h.ctx()
    )
    assert [o.error.name for o in refused.response] == ["PARTITION_NOT_OWNED"]

    # b leaves: its copies go to the others, still two distinct holders per partition.
    b = clients[1]
    h.heartbeat(beat(G, "b", -1))
    clients.remove(b)
    settle(h, clients)
    assert copies_of(h, clients) == Counter({(t, p): 2 for p in range(3)})
    assert sorted(sum(len(p) for p in c.holds.values()) for c in clients) == [3, 3]


def test_a_lost_answer_in_a_redundant_group_is_forgiven_with_plain_partitions() -> None:
    h = EngineHarness()
    t = h.create_topic("docs", 4)
    a, b = Client(h, "a"), Client(h, "b")
    a.join(["docs"], replicas=2)
    settle(h, [a])
    b.join(["docs"], replicas=2)
    settle(h, [a, b])
    before = a.epoch
    # a's next answer is lost after a change: it retries with its previous epoch and
    # the plain partitions it holds, which map to the copies it holds.
    c = Client(h, "c")
    c.join(["docs"], replicas=2)
    h.heartbeat(beat(G, "a", a.epoch, a.holds))  # answer dropped
    r = h.heartbeat(beat(G, "a", before, a.holds))
    assert r.member_epoch >= before
    assert {split(x)[0] for x in group(h).members["a"].assigned} <= {t}


# -- the redundant assignor on its own -------------------------------------------------


@st.composite
def redundant_specs(draw: st.DrawFn) -> tuple[GroupSpec, int]:
    replicas = draw(st.integers(1, 4))
    topics = {
        f"T{i}": Topic(f"T{i}", f"t{i}", draw(st.integers(1, 7))) for i in range(draw(st.integers(1, 3)))
    }
    homogeneous = draw(st.booleans())
    members = {}
    for i in range(draw(st.integers(1, 6))):
        subscribed = (
            frozenset(topics)
            if homogeneous
            else draw(st.frozensets(st.sampled_from(sorted(topics)), min_size=1))
        )
        members[f"m{i}"] = MemberSpec(f"m{i}", None, None, subscribed_with_copies(subscribed, replicas), {})
    return GroupSpec(members, with_copies(topics, replicas), replicas=replicas), replicas


def _again(spec: GroupSpec, targets: Mapping[str, Assignment]) -> GroupSpec:
    """`spec` with `targets` as the members' current targets."""
    members = {
        m: MemberSpec(m, None, None, s.subscribed_topic_ids, targets[m]) for m, s in spec.members.items()
    }
    return GroupSpec(members, spec.topics, replicas=spec.replicas)


@settings(max_examples=examples(300), deadline=None)
@given(redundant_specs())
def test_redundant_assignor_fills_every_slot_once_with_distinct_members_and_is_sticky(
    case: tuple[GroupSpec, int],
) -> None:
    spec, replicas = case
    targets = assign_redundant(spec, replicas)
    slots: Counter[tuple[str, int]] = Counter()
    for member_id, target in targets.items():
        plain = [(split(t)[0], p) for t, ps in target.items() for p in ps]
        assert len(plain) == len(set(plain)), f"{member_id} got two copies"
        for t, ps in target.items():
            assert split(t)[0] in spec.members[member_id].subscribed_topic_ids
            slots.update((t, p) for p in ps)
    for topic_id, topic in spec.topics.items():
        base, copy = split(topic_id)
        subscribers = sum(base in m.subscribed_topic_ids for m in spec.members.values())
        for p in range(topic.num_partitions):
            assert slots[topic_id, p] == (1 if copy < min(replicas, subscribers) else 0)
    loads = [sum(len(ps) for ps in t.values()) for t in targets.values()]
    if len({m.subscribed_topic_ids for m in spec.members.values()}) == 1:
        assert max(loads) - min(loads) <= 1, loads
    # Sticky: the result, given back as the current targets, comes back unchanged (the same objects).
    current = _again(spec, targets)
    again = assign_redundant(current, replicas)
    assert all(again[m] is current.members[m].current for m in targets)


def test_a_reset_of_a_topic_resets_every_copy_of_its_offsets() -> None:
    h = EngineHarness()
    t = h.create_topic("docs", 2)
    clients = [Client(h, m) for m in ("a", "b")]
    for c in clients:
        c.join(["docs"], replicas=2)
    settle(h, clients)
    for n, c in enumerate(clients):  # each holds both partitions, a copy each
        h.apply(
            G, commit_offsets(group(h), G, c.member_id, c.epoch, [OffsetToCommit(t, 0, 10 + n, "")], h.ctx())
        )
    assert sorted(group(h).offsets) == sorted([(t, 0), (f"{t}#1", 0)])
    for c in clients:
        h.heartbeat(beat(G, c.member_id, -1))

    for topics in ((ResetTopic(name="docs"),), ()):  # the topic named, or every topic
        result = reset_offsets(group(h), ResetOffsets(G, topics, shift_by=5), h.ctx())
        lines = [
            (p.topic_id, p.partition, p.current_offset, p.new_offset) for p in result.response.partitions
        ]
        assert sorted(lines) == sorted([(t, 0, 10, 15), (f"{t}#1", 0, 11, 16)])
        assert all(p.error.name == "NONE" for p in result.response.partitions)
    h.apply(G, result)
    assert {k: v.offset for k, v in group(h).offsets.items()} == {(t, 0): 15, (f"{t}#1", 0): 16}
