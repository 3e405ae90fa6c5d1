"""The range assignor: contiguous, co-partitioned ranges per topic.

For each topic, the members subscribing to it are sorted (static members by
instance id first, then dynamic members by member id) and each receives a
contiguous range of partitions; the first `n % m` members get one more. Two
topics with the same partition count and subscribers are split the same way,
so partition p of both lands on the same member (co-partitioning).

When racks are in play (some member has a rack, some topic partition racks),
range_racks.py splits instead: the same co-partitioning and per-topic balance,
with each member given units of its own rack where balance allows.

Example: topics t0 and t1 with 3 partitions, members A and B:
A gets t0[0,1] and t1[0,1]; B gets t0[2] and t1[2].

Speed. Members are grouped by subscription once, so a topic's subscribers are
worked out per distinct subscription rather than by scanning every member for
every topic. Topics with the same subscribers and partition count form one
class whose split is computed once and handed to each member for all the
class's topics at once. Only the first min(partitions, subscribers) members of
a topic receive anything, so only those are put in order (a partial sort when
there are many more subscribers than partitions), and the members that receive
nothing share the empty assignment.
"""

from __future__ import annotations

import heapq
from typing import TypeVar

from ..model import EMPTY_ASSIGNMENT, Assignment
from .base import GroupSpec, MemberSpec
from .racks import racks_in_play

_K = TypeVar("_K", str, tuple[str, str])


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        if racks_in_play(spec.members.values(), spec.topics.values()):
            # Racks: another split (range_racks.py), imported here because it
            # reuses this module's ordering.
            from .range_racks import assign_range_with_racks

            return assign_range_with_racks(spec)
        members = list(spec.members.values())
        if not members:
            return {}
        groups: dict[frozenset[str], list[MemberSpec]]
        if spec.is_homogeneous():
            groups = {members[0].subscribed_topic_ids: members}
        else:
            groups = {}
            for member in members:
                groups.setdefault(member.subscribed_topic_ids, []).append(member)

        # Topics by the subscriptions that include them, i.e. by subscribers.
        grouped = list(groups.values())
        groups_of_topic: dict[str, list[int]] = {}
        for g, subscription in enumerate(groups):
            for topic_id in subscription:
                if topic_id in spec.topics:
                    groups_of_topic.setdefault(topic_id, []).append(g)
        topics_by_subscribers: dict[tuple[int, ...], list[str]] = {}
        for topic_id in sorted(groups_of_topic):
            topics_by_subscribers.setdefault(tuple(groups_of_topic[topic_id]), []).append(topic_id)

        assigned: dict[str, dict[str, frozenset[int]]] = {}
        ints: tuple[int, ...] = ()
        for key, topic_ids in topics_by_subscribers.items():
            subscribers = grouped[key[0]] if len(key) == 1 else [m for g in key for m in grouped[g]]
            count = len(subscribers)
            # Co-partitioned topics: same subscribers, same partition count.
            by_size: dict[int, list[str]] = {}
            for topic_id in topic_ids:
                by_size.setdefault(spec.topics[topic_id].num_partitions, []).append(topic_id)
            largest = max(by_size)
            if len(ints) < largest:
                ints = tuple(range(largest))
            order = _first_in_order(subscribers, min(largest, count))
            for size, same in by_size.items():
                base, extra = divmod(size, count)
                start = 0
                for index in range(min(size, count)):
                    end = start + base + (index < extra)
                    partitions = frozenset(ints[start:end])
                    start = end
                    member_id = order[index]
                    assignment = assigned.get(member_id)
                    if assignment is None:
                        assigned[member_id] = dict.fromkeys(same, partitions)
                    elif len(same) == 1:
                        assignment[same[0]] = partitions
                    else:
                        assignment.update(dict.fromkeys(same, partitions))

        result: dict[str, Assignment] = dict.fromkeys(spec.members, EMPTY_ASSIGNMENT)
        result.update(assigned)
        return result


def _first_in_order(members: list[MemberSpec], k: int) -> list[str]:
    """The ids of the first `k` members in range order: static members by
    instance id (then member id), then dynamic members by member id."""
    # Comprehensions, not map(attrgetter): the specialised slot load is 2x faster.
    instance_ids = [m.instance_id for m in members]
    if instance_ids.count(None) == len(instance_ids):
        return _smallest(k, [m.member_id for m in members])
    static = [(m.instance_id, m.member_id) for m in members if m.instance_id is not None]
    dynamic = [m.member_id for m in members if m.instance_id is None]
    first = [member_id for _, member_id in _smallest(k, static)]
    return first + _smallest(k - len(first), dynamic)


def _smallest(k: int, items: list[_K]) -> list[_K]:
    """The `k` smallest items, sorted; a heap when `k` is much below len(items)."""
    if k <= 0:
        return []
    if 16 * k <= len(items):
        return heapq.nsmallest(k, items)
    return sorted(items)[:k]
