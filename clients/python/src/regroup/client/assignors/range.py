"""Kafka's range assignor for consumer groups, computed by a member.

The same rules as the server's `range` assignor (one meaning per assignor
name), written plainly: for each topic, its subscribers in range order get
contiguous ranges of its partitions, and the first `partitions % subscribers`
of them get one partition more. Range order (Kafka's RangeAssignor): static
members first, by instance id, then dynamic members by member id, so that a
static member that restarts under a new member id gets the same ranges back.
Not sticky: the result depends only on the members' ids, instance ids and
subscriptions and the topics' partition counts. Topics with the same partition
count and subscribers are split the same way (co-partitioning).

Racks (docs/assignment.md, "Racks"): when some member has a rack and some
topic has partition racks, each class of co-partitioned topics (the same
subscribers, the same partition count n) is split by *units*: unit p is
partition p of every topic of the class, so co-partitioning stays. A unit's
rack is the most common rack of its partition among the class's topics that
have racks (ties: the smallest rack name), none when none has. The m
subscribers still get base or base + 1 units each (base, extra =
divmod(n, m)), and within that:
1. the extra units go first to subscribers whose rack gains a local unit by
   one (rack r gains min(subscribers of r, max(0, units of r - base *
   subscribers of r))), in range order, then to the first subscribers in range
   order (shares.choose_extras);
2. each subscriber takes units of its own rack, in index order, up to its
   share (subscribers of a rack in range order);
3. the subscribers with room, in range order, take the remaining units in
   index order.
A class without unit racks, or whose subscribers have none, gets exactly the
contiguous ranges above.
"""

from __future__ import annotations

from collections import Counter

from regroup.client.assignors.base import (
    CONSUMER,
    AssignmentPlan,
    AssignorMember,
    GroupSnapshot,
    Resource,
    SimpleAssignor,
    TopicInfo,
)
from regroup.client.assignors.shares import choose_extras, rack_gains, racks_in_play
from regroup.client.types import TopicPartition


def range_order(member: AssignorMember) -> tuple[bool, str, str]:
    """Static members (by instance id) before dynamic ones (by member id)."""
    if member.instance_id is not None:
        return (False, member.instance_id, member.member_id)
    return (True, member.member_id, "")


class RangeAssignor(SimpleAssignor):
    """Contiguous ranges of each topic's partitions over its subscribers (Kafka's "range")."""

    name: str = "range"
    serves = CONSUMER

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        refused = self.refuse(group)
        if refused is not None:
            return refused
        return self.without_draining(group, self._assign)

    def _assign(self, group: GroupSnapshot) -> AssignmentPlan:
        members = sorted(group.members, key=range_order)
        out: dict[str, set[Resource]] = {m.member_id: set() for m in members}
        if racks_in_play([m.rack_id for m in members], [t.partition_racks for t in group.topics]):
            return _with_racks(group, members, out)
        for topic in group.topics:
            subscribers = [m.member_id for m in members if topic.name in m.subscribed_topics]
            if not subscribers:
                continue
            per_member, extra = divmod(topic.num_partitions, len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                length = per_member + (1 if i < extra else 0)
                out[member_id].update(
                    TopicPartition(topic.name, p, topic.topic_id) for p in range(start, start + length)
                )
                start += length
        return AssignmentPlan(assignments={mid: frozenset(rs) for mid, rs in out.items()})


def _with_racks(
    group: GroupSnapshot, members: list[AssignorMember], out: dict[str, set[Resource]]
) -> AssignmentPlan:
    """The split by units when racks are in play (see the module docs); `members` in range order."""
    # Classes of co-partitioned topics: the same subscribers and partition count.
    classes: dict[tuple[tuple[str, ...], int], list[TopicInfo]] = {}
    for topic in group.topics:
        subscribers = tuple(m.member_id for m in members if topic.name in m.subscribed_topics)
        if subscribers and topic.num_partitions > 0:
            classes.setdefault((subscribers, topic.num_partitions), []).append(topic)
    rack_of_member = {m.member_id: m.rack_id for m in members}
    for (subscribers, size), topics in classes.items():
        units = _units_of(subscribers, size, _unit_racks(topics, size), rack_of_member)
        for member_id, indices in units.items():
            for topic in topics:
                out[member_id].update(TopicPartition(topic.name, p, topic.topic_id) for p in indices)
    return AssignmentPlan(assignments={mid: frozenset(rs) for mid, rs in out.items()})


def _unit_racks(topics: list[TopicInfo], size: int) -> list[str | None]:
    """Each unit's rack: the most common rack of that partition among the topics
    with racks (ties: the smallest name); None when no topic has racks."""
    layouts = [t.partition_racks for t in topics if t.partition_racks]
    if not layouts:
        return [None] * size
    out: list[str | None] = []
    for p in range(size):
        counts = Counter(layout[p] for layout in layouts)
        most = max(counts.values())
        out.append(min(rack for rack, count in counts.items() if count == most))
    return out


def _units_of(
    subscribers: tuple[str, ...],
    size: int,
    unit_racks: list[str | None],
    rack_of_member: dict[str, str | None],
) -> dict[str, list[int]]:
    """The units of each subscriber (in range order) of a class of `size` units."""
    base, extra = divmod(size, len(subscribers))
    floors = dict.fromkeys(subscribers, base)
    fractional = set(subscribers) if extra else set()
    racks = {m: rack_of_member[m] for m in subscribers}
    rack_sizes = Counter(rack for rack in unit_racks if rack is not None)
    gains = rack_gains(racks, floors, fractional, rack_sizes)[1]
    # Range ignores the current target: no subscriber is sticky.
    chosen = choose_extras(subscribers, fractional, extra, set(), racks, gains)
    room = {m: base + (m in chosen) for m in subscribers}
    units: dict[str, list[int]] = {m: [] for m in subscribers}
    taken: set[int] = set()
    # Each subscriber takes units of its own rack, in index order, up to its room.
    for m in subscribers:
        if racks[m] is None:
            continue
        mine = [u for u in range(size) if unit_racks[u] == racks[m] and u not in taken][: room[m]]
        units[m] += mine
        taken.update(mine)
        room[m] -= len(mine)
    # The subscribers with room take the remaining units, in index order.
    rest = [u for u in range(size) if u not in taken]
    for m in subscribers:
        mine, rest = rest[: room[m]], rest[room[m] :]
        units[m] += mine
    return {m: sorted(u) for m, u in units.items() if u}
