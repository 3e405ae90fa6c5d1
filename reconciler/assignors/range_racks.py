"""The range assignor when racks are in play (range.py dispatches here; without
racks it runs its own code, untouched).

Range splits each *class* of co-partitioned topics (the same subscribers and
the same partition count n) among its m subscribers, and that stays so:
partition p of every topic of a class goes to one member (the *unit* p), and
each subscriber gets base or base + 1 units (base, extra = divmod(n, m)), so
range's per-topic balance is unchanged. What racks change is which member gets
which units, in this order:

1. Balance, as above: exactly `extra` subscribers get base + 1.
2. Locality: the number of local units (member rack == unit rack) is the most
   any such split has (the count of racks.py, on units); a unit's rack is the
   rack of partition p of the class's topics, the most common one when they
   differ (ties: the smallest rack name), none when no topic of the class has
   racks. When the class's topics share one rack layout (topics created
   together usually do) this is also the most local (member, partition)
   pairs; when they differ it is a heuristic.
3. Range order (static members by instance id, then dynamic members by member
   id), for everything 1 and 2 leave open: the extra units go first to
   members whose rack gains a local unit by it, in range order, then to the
   first members in range order; each member takes its rack's units in index
   order, then the members with room, in range order, take the remaining
   units in index order.

Range ignores the current target, with or without racks. A class with no unit
racks, or no subscriber with a rack, is split exactly as without racks
(contiguous ranges, the first `extra` members one longer); with racks a
member's units are contiguous within its rack's units, not in general.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate, compress, repeat
from operator import add, eq, not_, sub

from ..model import EMPTY_ASSIGNMENT, Assignment
from ..topics import Topic
from .base import GroupSpec, MemberSpec
from .racks import rack_gains
from .range import _first_in_order
from .shares import choose_extras


def assign_range_with_racks(spec: GroupSpec) -> dict[str, Assignment]:
    """The range target of `spec`, racks in play."""
    members = list(spec.members.values())
    if not members:
        return {}
    by_subscription: dict[frozenset[str], list[MemberSpec]]
    if spec.is_homogeneous():  # one group without a pass over the members, as range.py
        by_subscription = {members[0].subscribed_topic_ids: members}
    else:
        by_subscription = {}
        for member in members:
            by_subscription.setdefault(member.subscribed_topic_ids, []).append(member)
    grouped = list(by_subscription.values())
    groups_of_topic: dict[str, list[int]] = {}
    for g, subscription in enumerate(by_subscription):
        for topic_id in subscription:
            if topic_id in spec.topics:
                groups_of_topic.setdefault(topic_id, []).append(g)
    classes: dict[tuple[tuple[int, ...], int], list[str]] = {}
    for topic_id in sorted(groups_of_topic):
        key = (tuple(groups_of_topic[topic_id]), spec.topics[topic_id].num_partitions)
        classes.setdefault(key, []).append(topic_id)

    assigned: dict[str, dict[str, frozenset[int]]] = {}
    for (groups, size), topic_ids in classes.items():
        if size == 0:
            continue
        subscribers = grouped[groups[0]] if len(groups) == 1 else [m for g in groups for m in grouped[g]]
        ids = [m.member_id for m in subscribers]
        instance_ids = [m.instance_id for m in subscribers]
        # Range order: with no static members, by member id (_first_in_order's rule).
        order = (
            sorted(ids) if instance_ids.count(None) == len(ids) else _first_in_order(subscribers, len(ids))
        )
        if order == ids:
            # Already in range order (dynamic members, kept in id order by the
            # group): the racks in that order without a dict over the members.
            racks = [m.rack_id for m in subscribers]
        else:
            rack_of = {m.member_id: m.rack_id for m in subscribers}
            racks = list(map(rack_of.__getitem__, order))
        units = unit_racks([spec.topics[t] for t in topic_ids])
        split = split_units(size, racks, units)
        if not assigned:  # the first class: every member's target made in C
            targets = map(dict.fromkeys, repeat(topic_ids), map(frozenset, split.values()))
            assigned.update(zip(map(order.__getitem__, split), targets, strict=True))
            continue
        for i, indices in split.items():
            partitions = frozenset(indices)
            assigned.setdefault(order[i], {}).update(dict.fromkeys(topic_ids, partitions))

    result: dict[str, Assignment] = dict.fromkeys(spec.members, EMPTY_ASSIGNMENT)
    result.update(assigned)
    return result


def unit_racks(topics: Sequence[Topic]) -> tuple[str | None, ...] | None:
    """The rack of each unit (partition index) of a class of topics of one
    size: the most common rack of that partition among the topics with racks,
    ties to the smallest name; None when no topic has racks."""
    layouts = [t.partition_racks for t in topics if t.partition_racks]
    if not layouts:
        return None
    if layouts.count(layouts[0]) == len(layouts):
        return layouts[0]
    return tuple(
        min(Counter(column).items(), key=_most_then_name)[0] for column in zip(*layouts, strict=True)
    )


def _most_then_name(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def split_units(
    size: int, racks: Sequence[str | None], units: Sequence[str | None] | None
) -> dict[int, list[int]]:
    """The units (0 .. size - 1) of each member that gets any, by its index in
    range order; `racks`: the members' racks in range order, `units`: each
    unit's rack (None: no racks). Only members that receive are visited (a
    topic may have far fewer partitions than subscribers), found by C passes."""
    count = len(racks)
    base, extra = divmod(size, count)
    floors = [base] * count
    candidates = [extra > 0] * count
    gains: dict[str, int] = {}
    by_rack: dict[str, list[int]] = {}
    if units is not None and racks.count(None) != len(racks):
        for index, rack in enumerate(units):
            if rack is not None:
                by_rack.setdefault(rack, []).append(index)
        sizes = {rack: len(indices) for rack, indices in by_rack.items()}
        gains = rack_gains(racks, floors, candidates, sizes)[1]
    chosen = choose_extras(extra, range(count), candidates, [0] * count, floors, racks, gains)
    room = list(map(add, floors, chosen))
    out: dict[int, list[int]] = {}
    taken = [False] * size
    # Each member takes its rack's units in index order, up to its room.
    receiving = list(compress(range(count), room))
    receiving_racks = list(map(racks.__getitem__, receiving))
    # In C per rack: the members' rooms in order give where each one's slice of
    # the rack's units starts and ends, and those that start before the end get one.
    for rack in sorted(by_rack):
        indices = by_rack[rack]
        takers = list(compress(receiving, map(eq, receiving_racks, repeat(rack))))
        rooms = list(map(room.__getitem__, takers))
        ends = list(accumulate(rooms, initial=0))
        served = bisect_left(ends, len(indices), 0, len(takers))
        slices = list(map(indices.__getitem__, map(slice, ends[:served], ends[1 : served + 1])))
        out.update(zip(takers[:served], slices, strict=True))
        # Plain loops: a subscript store is 2-4x cheaper than map(list.__setitem__).
        for i, left in zip(takers[:served], map(sub, rooms, map(len, slices)), strict=True):
            room[i] = left
        for index in indices[: ends[served]]:
            taken[index] = True
    # The members with room, in range order, take the rest in index order.
    rest = list(compress(range(size), map(not_, taken))) if by_rack else range(size)
    pos = 0
    # (Nothing left: no scan of the members at all.)
    for i in compress(range(count), room) if len(rest) else ():
        if pos == len(rest):
            break
        more = list(rest[pos : pos + room[i]])
        pos += len(more)
        out[i] = sorted(out[i] + more) if i in out else more
    return out
