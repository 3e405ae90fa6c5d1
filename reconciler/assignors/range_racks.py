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

from collections import Counter
from collections.abc import Sequence

from ..model import EMPTY_ASSIGNMENT, Assignment
from ..topics import Topic
from .base import GroupSpec, MemberSpec
from .racks import rack_gains
from .range import _first_in_order
from .shares import choose_extras


def assign_range_with_racks(spec: GroupSpec) -> dict[str, Assignment]:
    """The range target of `spec`, racks in play."""
    members = list(spec.members.values())
    by_subscription: dict[frozenset[str], list[MemberSpec]] = {}
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
        subscribers = [m for g in groups for m in grouped[g]]
        by_id = {m.member_id: m for m in subscribers}
        order = _first_in_order(subscribers, len(subscribers))
        racks = [by_id[member_id].rack_id for member_id in order]
        units = unit_racks([spec.topics[t] for t in topic_ids])
        for member_id, indices in zip(order, split_units(size, racks, units), strict=True):
            if indices:
                partitions = frozenset(indices)
                assigned.setdefault(member_id, {}).update(dict.fromkeys(topic_ids, partitions))

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
) -> list[list[int]]:
    """The units (0 .. size - 1) of each member, `racks` giving the members'
    racks in range order and `units` each unit's rack (None: no racks)."""
    count = len(racks)
    base, extra = divmod(size, count)
    floors = [base] * count
    candidates = [extra > 0] * count
    gains: dict[str, int] = {}
    by_rack: dict[str, list[int]] = {}
    if units is not None and any(rack is not None for rack in racks):
        for index, rack in enumerate(units):
            if rack is not None:
                by_rack.setdefault(rack, []).append(index)
        sizes = {rack: len(indices) for rack, indices in by_rack.items()}
        gains = rack_gains(racks, floors, candidates, sizes)[1]
    order = range(count)
    chosen = choose_extras(extra, order, candidates, [0] * count, floors, racks, gains)
    room = [f + c for f, c in zip(floors, chosen, strict=True)]
    out: list[list[int]] = [[] for _ in range(count)]
    taken = [False] * size
    # Each member takes its rack's units in index order, up to its room.
    next_of_rack = dict.fromkeys(by_rack, 0)
    for i, rack in enumerate(racks):
        if rack is None or rack not in by_rack:
            continue
        start = next_of_rack[rack]
        mine = by_rack[rack][start : start + room[i]]
        next_of_rack[rack] = start + len(mine)
        out[i] = mine
        room[i] -= len(mine)
        for index in mine:
            taken[index] = True
    # The members with room, in range order, take the rest in index order.
    rest = [index for index in range(size) if not taken[index]] if by_rack else range(size)
    pos = 0
    for i in order:
        if room[i]:
            out[i] = sorted(out[i] + list(rest[pos : pos + room[i]]))
            pos += room[i]
    return out
