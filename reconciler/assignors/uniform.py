"""The uniform assignor: balanced and sticky.

Homogeneous groups (every member subscribes to the same topics) end balanced
to within one partition, and the move from the current target is the minimum:
an already balanced assignment moves nothing, a join takes only the surplus of
the most loaded members, a leave hands only the leaver's partitions out.

Heterogeneous groups keep every still-valid partition, give unassigned ones to
the least loaded eligible member, then move partitions from the most to the
least loaded eligible member while that narrows the gap by more than one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from ..model import Assignment
from .base import GroupSpec, MemberSpec


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        if not spec.members:
            return {}
        if spec.is_homogeneous():
            return _assign_homogeneous(spec)
        return _assign_heterogeneous(spec)


def _valid_current(member: MemberSpec, spec: GroupSpec) -> list[tuple[str, int]]:
    """The member's current partitions that still exist and it still subscribes to."""
    valid: list[tuple[str, int]] = []
    for topic_id in sorted(member.current):
        topic = spec.topics.get(topic_id)
        if topic is None or topic_id not in member.subscribed_topic_ids:
            continue
        valid.extend((topic_id, p) for p in sorted(member.current[topic_id]) if p < topic.num_partitions)
    return valid


def _to_assignment(pairs: Iterable[tuple[str, int]]) -> Assignment:
    grouped: dict[str, list[int]] = {}
    for topic_id, partition in pairs:
        grouped.setdefault(topic_id, []).append(partition)
    return {t: frozenset(p) for t, p in grouped.items()}


def _assign_homogeneous(spec: GroupSpec) -> dict[str, Assignment]:
    members = sorted(spec.members)
    topic_ids = sorted(next(iter(spec.members.values())).subscribed_topic_ids & spec.topics.keys())
    total = sum(spec.topics[t].num_partitions for t in topic_ids)
    base, extra = divmod(total, len(members))

    # Keep phase: each member keeps what it can of its current target, the
    # largest holders first so that the `extra` slots go where they move least.
    valid = {m: _valid_current(spec.members[m], spec) for m in members}
    kept: dict[str, list[tuple[str, int]]] = {}
    taken: set[tuple[str, int]] = set()
    for member_id in sorted(members, key=lambda m: (-len(valid[m]), m)):
        # Current targets never overlap; filtering keeps the counts right if they ever did.
        candidates = [tp for tp in valid[member_id] if tp not in taken]
        quota = base
        if extra > 0 and len(candidates) > base:
            quota += 1
            extra -= 1
        keep = candidates[:quota]
        taken.update(keep)
        kept[member_id] = keep

    # Fill phase: unassigned partitions, in order, to members under quota.
    pool = (
        (topic_id, p)
        for topic_id in topic_ids
        for p in range(spec.topics[topic_id].num_partitions)
        if (topic_id, p) not in taken
    )
    for member_id in members:
        while len(kept[member_id]) < base:
            kept[member_id].append(next(pool))
    for member_id in members:
        if extra == 0:
            break
        if len(kept[member_id]) == base:
            kept[member_id].append(next(pool))
            extra -= 1
    return {m: _to_assignment(kept[m]) for m in members}


def _assign_heterogeneous(spec: GroupSpec) -> dict[str, Assignment]:
    members = sorted(spec.members)
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    taken: set[tuple[str, int]] = set()
    for member_id in members:
        for tp in _valid_current(spec.members[member_id], spec):
            if tp not in taken:
                taken.add(tp)
                owned[member_id].add(tp)

    subscribers = {
        t: [m for m in members if t in spec.members[m].subscribed_topic_ids] for t in sorted(spec.topics)
    }
    # Topics with fewer subscribers first: they have the fewest choices.
    for topic_id in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        eligible = subscribers[topic_id]
        if not eligible:
            continue
        heap = [(len(owned[m]), m) for m in eligible]
        heapq.heapify(heap)
        for p in range(spec.topics[topic_id].num_partitions):
            if (topic_id, p) in taken:
                continue
            load, member_id = heapq.heappop(heap)
            owned[member_id].add((topic_id, p))
            heapq.heappush(heap, (load + 1, member_id))

    _balance_heterogeneous(owned, subscribers)
    return {m: _to_assignment(sorted(owned[m])) for m in members}


def _balance_heterogeneous(owned: dict[str, set[tuple[str, int]]], subscribers: dict[str, list[str]]) -> None:
    """Moves partitions from the most to the least loaded eligible member, per topic."""
    moved = True
    while moved:
        moved = False
        for topic_id, eligible in subscribers.items():
            if len(eligible) < 2:
                continue
            while True:
                low = min(eligible, key=lambda m: (len(owned[m]), m))
                holders = [m for m in eligible if any(tp[0] == topic_id for tp in owned[m])]
                if not holders:
                    break
                high = max(holders, key=lambda m: (len(owned[m]), m))
                if len(owned[high]) - len(owned[low]) <= 1:
                    break
                partition = max(tp for tp in owned[high] if tp[0] == topic_id)
                owned[high].remove(partition)
                owned[low].add(partition)
                moved = True
