"""A sticky, balanced assignor for consumer groups, computed by a member (Kafka's "uniform").

Each member keeps the partitions of its current target that are still valid
(the topic still exists with the same id, the partition is below the count,
the member still subscribes to the topic); a partition claimed by two members
stays with the first by member id. Partitions are ordered as on the server:
by topic id, then partition number. Then:

- homogeneous subscriptions (every member subscribes to the same topics):
  quotas of `partitions // members`, the remainder going first to the members
  above that quota, those that hold the most first (ties by member id), then
  to the others by member id, so that counts differ by at most one and the
  fewest partitions move; members above their quota give up their highest partitions,
  and the unassigned and given-up partitions fill the members below theirs;
- heterogeneous subscriptions: a greedy. Unassigned partitions go, topic by
  topic (topics with the fewest subscribers first, ties by topic id), to the least-loaded
  subscriber; then, while some member holds a partition that a subscriber of
  its topic with at least two fewer partitions could take, the most loaded
  such member hands one over (preferring partitions it did not hold before).
  Every move lowers the sum of squared counts, so this ends; at the end no
  single move can improve the balance.

Rack awareness is not implemented.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from regroup.client.assignors.base import (
    CONSUMER,
    AssignmentPlan,
    AssignorMember,
    GroupSnapshot,
    Resource,
    SimpleAssignor,
    TopicInfo,
)
from regroup.client.types import TopicPartition


class UniformAssignor(SimpleAssignor):
    """Sticky and balanced partition assignment for consumer groups."""

    name: str = "uniform"
    serves = CONSUMER

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        refused = self.refuse(group)
        if refused is not None:
            return refused
        members = sorted(group.members, key=lambda m: m.member_id)
        if not members:
            return AssignmentPlan(assignments={})
        topics = {t.name: t for t in sorted(group.topics, key=lambda t: (t.name, t.topic_id))}
        subs = {m.member_id: frozenset(t for t in m.subscribed_topics if t in topics) for m in members}
        owner = _valid_current(members, subs, topics)
        if len(set(subs.values())) == 1:
            out = _homogeneous(members, next(iter(subs.values())), topics, owner)
        else:
            out = _heterogeneous(members, subs, topics, owner)
        return AssignmentPlan(assignments={mid: frozenset(rs) for mid, rs in out.items()})


def _global_order(tp: TopicPartition) -> tuple[str, int]:
    """Partitions in the server's global order: by topic id (what identifies a
    topic), then partition; not by name, which the server never sees."""
    return (tp.topic_id, tp.partition)


def _valid_current(
    members: list[AssignorMember], subs: dict[str, frozenset[str]], topics: dict[str, TopicInfo]
) -> dict[TopicPartition, str]:
    """The partitions each member keeps from its current target: partition -> member id."""
    owner: dict[TopicPartition, str] = {}
    for m in members:
        mine = subs[m.member_id]
        for r in sorted(r for r in m.assignment if isinstance(r, TopicPartition)):
            info = topics.get(r.topic)
            if (
                info is not None
                and r.topic in mine
                and r.topic_id == info.topic_id
                and 0 <= r.partition < info.num_partitions
                and r not in owner
            ):
                owner[r] = m.member_id
    return owner


def _homogeneous(
    members: list[AssignorMember],
    subscribed: frozenset[str],
    topics: dict[str, TopicInfo],
    owner: dict[TopicPartition, str],
) -> dict[str, set[Resource]]:
    held: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
    pool: list[TopicPartition] = []
    for name in sorted(subscribed, key=lambda n: topics[n].topic_id):
        info = topics[name]
        for p in range(info.num_partitions):
            tp = TopicPartition(name, p, info.topic_id)
            holder = owner.get(tp)
            if holder is None:
                pool.append(tp)
            else:
                held[holder].append(tp)
    total = len(pool) + sum(len(v) for v in held.values())
    base, extra = divmod(total, len(members))
    # The members above base keep base + 1 first, the largest holders first, so that
    # they give up the least; the slots left go to the others by member id (as on
    # the server: none of them gives anything up either way).
    above = sorted((mid for mid in held if len(held[mid]) > base), key=lambda mid: (-len(held[mid]), mid))
    by_load = above + sorted(mid for mid in held if len(held[mid]) <= base)
    quota = {mid: base + (1 if i < extra else 0) for i, mid in enumerate(by_load)}
    for mid, tps in held.items():
        surplus = len(tps) - quota[mid]
        if surplus > 0:
            tps.sort(key=_global_order)
            pool.extend(tps[-surplus:])
            del tps[-surplus:]
    pool.sort(key=_global_order)
    out: dict[str, set[Resource]] = {}
    i = 0
    for m in members:
        tps = held[m.member_id]
        deficit = quota[m.member_id] - len(tps)
        if deficit > 0:
            tps.extend(pool[i : i + deficit])
            i += deficit
        out[m.member_id] = set(tps)
    return out


def _heterogeneous(
    members: list[AssignorMember],
    subs: dict[str, frozenset[str]],
    topics: dict[str, TopicInfo],
    owner: dict[TopicPartition, str],
) -> dict[str, set[Resource]]:
    original = dict(owner)
    count: dict[str, int] = dict.fromkeys(subs, 0)
    # member -> topic -> partition numbers
    owned: dict[str, dict[str, set[int]]] = {mid: defaultdict(set) for mid in subs}
    for tp, mid in owner.items():
        owned[mid][tp.topic].add(tp.partition)
        count[mid] += 1

    subscribers: dict[str, list[str]] = defaultdict(list)
    for mid in sorted(subs):
        for t in subs[mid]:
            subscribers[t].append(mid)

    # 1. Unassigned partitions to the least-loaded subscriber, constrained topics first.
    for name in sorted(subscribers, key=lambda t: (len(subscribers[t]), topics[t].topic_id)):
        info = topics[name]
        free = [p for p in range(info.num_partitions) if TopicPartition(name, p, info.topic_id) not in owner]
        if not free:
            continue
        heap = [(count[mid], mid) for mid in subscribers[name]]
        heapq.heapify(heap)
        for p in free:
            c, mid = heapq.heappop(heap)
            owned[mid][name].add(p)
            count[mid] = c + 1
            heapq.heappush(heap, (c + 1, mid))

    # 2. Rebalance. Members with the same subscriptions form a class with a
    # lazy min-heap of (count, member id); an entry is current when its count
    # equals the member's count.
    class_of: dict[str, frozenset[str]] = dict(subs)
    class_heaps: dict[frozenset[str], list[tuple[int, str]]] = defaultdict(list)
    for mid in sorted(subs):
        class_heaps[class_of[mid]].append((count[mid], mid))
    for h in class_heaps.values():
        heapq.heapify(h)
    classes_of_topic: dict[str, list[frozenset[str]]] = defaultdict(list)
    for cls in sorted(class_heaps, key=lambda c: sorted(c)):
        for t in cls:
            classes_of_topic[t].append(cls)

    def least_loaded(topic: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for cls in classes_of_topic[topic]:
            h = class_heaps[cls]
            while h and h[0][0] != count[h[0][1]]:
                heapq.heappop(h)
            if h and (best is None or h[0] < best):
                best = h[0]
        return best

    def is_fresh(mid: str, topic: str, p: int) -> bool:
        return original.get(TopicPartition(topic, p, topics[topic].topic_id)) != mid

    # A lazy min-heap over the members that can take something: nobody can
    # give to a member above the smallest count + 1.
    least = [(count[mid], mid) for mid in sorted(subs) if subs[mid]]
    heapq.heapify(least)

    def global_min() -> int:
        while least[0][0] != count[least[0][1]]:
            heapq.heappop(least)
        return least[0][0]

    moved = bool(least)
    while moved:
        moved = False
        most = [(-count[mid], mid) for mid in subs]
        heapq.heapify(most)
        while most:
            negc, src = heapq.heappop(most)
            if -negc != count[src]:
                continue
            if count[src] - 1 <= global_min():
                break
            best: tuple[int, bool, str, str] | None = None
            for t in sorted(t for t, ps in owned[src].items() if ps):
                cand = least_loaded(t)
                if cand is None or cand[0] >= count[src] - 1:
                    continue
                has_fresh = any(is_fresh(src, t, p) for p in owned[src][t])
                key = (cand[0], not has_fresh, t, cand[1])
                if best is None or key < best:
                    best = key
            if best is None:
                continue
            _, _, t, dst = best
            ps = owned[src][t]
            fresh = [p for p in ps if is_fresh(src, t, p)]
            p = max(fresh) if fresh else max(ps)
            ps.discard(p)
            owned[dst][t].add(p)
            count[src] -= 1
            count[dst] += 1
            for mid in (src, dst):
                heapq.heappush(class_heaps[class_of[mid]], (count[mid], mid))
                heapq.heappush(least, (count[mid], mid))
                heapq.heappush(most, (-count[mid], mid))
            moved = True

    return {
        mid: {TopicPartition(t, p, topics[t].topic_id) for t, ps in owned[mid].items() for p in ps}
        for mid in sorted(subs)
    }
