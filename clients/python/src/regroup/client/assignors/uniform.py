"""A sticky, balanced assignor for consumer groups, computed by a member (Kafka's "uniform").

The same rules as the server's `uniform` assignor (one meaning per assignor
name: a group gets the same target whichever side computes it), written
plainly. The server's is tuned for 10,000 members and 100,000 partitions; this
one favours clarity, and the tests use it as the oracle for the server's.

Partitions are identified by topic id (a topic deleted and created again under
the same name is another topic), and the global order of partitions is by
topic id, then partition number.

Keep: members in member id order keep the partitions of their current target
that are still valid (the topic exists, the member still subscribes to it, the
partition is below the topic's count) and that no member before them kept (a
partition held twice stays with the first holder by member id).

Homogeneous subscriptions (every member subscribes to the same topics): the
group ends balanced to within one partition with the fewest moves. Every
member's quota is `partitions // members`, and `partitions % members` of them
get one more: first the members holding more than the base quota, the largest
holders first (ties by member id), so that those above it give up as little as
possible, then the others by member id. A member above its quota gives up the
last partitions of its share in the global order. The unassigned partitions,
in the global order, then fill the members below their quota, in member id
order. (With no current target at all, this hands out contiguous blocks.)

Heterogeneous subscriptions: a greedy that keeps every valid partition.
1. Fill: topics with the fewest subscribers first (they have the fewest
   choices; ties by topic id); each unassigned partition, in order, goes to
   the least loaded subscriber (ties by member id).
2. Balance: topic after topic (by topic id, those with two subscribers or
   more), the most loaded holder of the topic (ties: the largest member id)
   gives its highest partition of the topic to the least loaded subscriber
   (ties: the smallest member id) while their loads differ by more than one;
   whole passes over the topics repeat until one moves nothing. Every move
   lowers the sum of the squared loads, so this ends, and at the end no single
   partition could move to a subscriber of its topic holding two fewer.

Weighted members or racks (homogeneous subscriptions only; heterogeneous
ones ignore both): when some member's capacity is not 1, or racks are in play
(some member has a rack and some subscribed topic has partition racks), the
priorities are, strictly in this order (docs/assignment.md, "Racks" and
"Weights"):
1. Balance: each member gets its quota (shares.py: the floor or ceiling of its
   exact share, proportional to capacity).
2. Locality: as many local (member, partition) pairs (same rack) as any
   assignment with quotas like these has (shares.best_local).
3. Stickiness: an assignment that already meets 1 and 2 stays as it is;
   otherwise the extra partitions go by shares.choose_extras, then
   A. each member keeps its current partitions of its own rack, the first ones
      in the global order up to its quota;
   B. rack by rack, its members with room (most room first, then by member id)
      take the rack's partitions no one kept in A, in the global order: first
      those no member of another rack holds (unheld, or given up in A), then
      those held by members of other racks (taking them adds a local pair);
   C. each member keeps its other current partitions not taken in B, the first
      ones in the global order up to its room;
   D. the members with room, most room first, then by member id, take what is
      left in the global order.
"""

from __future__ import annotations

import bisect
import heapq

from regroup.client.assignors.base import (
    CONSUMER,
    AssignmentPlan,
    AssignorMember,
    GroupSnapshot,
    SimpleAssignor,
)
from regroup.client.assignors.shares import best_local, choose_extras, rack_gains, racks_in_play, shares
from regroup.client.types import TopicPartition

#: A partition as (topic id, partition number): tuples sort in the global order.
Partition = tuple[str, int]


class UniformAssignor(SimpleAssignor):
    """Sticky and balanced partition assignment for consumer groups."""

    name: str = "uniform"
    serves = CONSUMER

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        refused = self.refuse(group)
        if refused is not None:
            return refused
        return self.without_draining(group, self._assign)

    def _assign(self, group: GroupSnapshot) -> AssignmentPlan:
        members = sorted(group.members, key=lambda m: m.member_id)
        if not members:
            return AssignmentPlan(assignments={})
        by_name = {t.name: t for t in group.topics}
        sizes = {t.topic_id: t.num_partitions for t in group.topics}
        # Each member's subscription as topic ids (members name the topics they subscribe to).
        subscriptions = {
            m.member_id: frozenset(by_name[n].topic_id for n in m.subscribed_topics if n in by_name)
            for m in members
        }
        kept = _kept(members, subscriptions, sizes)
        if len(set(subscriptions.values())) == 1:
            subscribed = next(iter(subscriptions.values()))
            member_racks = {m.member_id: m.rack_id for m in members}
            layouts = {t.topic_id: t.partition_racks for t in group.topics if t.topic_id in subscribed}
            weighted = any(m.capacity != 1 for m in members)
            racks = racks_in_play(list(member_racks.values()), list(layouts.values()))
            if weighted or racks:
                capacities = {m.member_id: m.capacity for m in members}
                out = _by_quota(kept, subscribed, sizes, capacities, member_racks if racks else None, layouts)
            else:
                out = _homogeneous(kept, subscribed, sizes)
        else:
            out = _heterogeneous(kept, subscriptions, sizes)
        names = {t.topic_id: t.name for t in group.topics}
        return AssignmentPlan(
            assignments={
                member_id: frozenset(TopicPartition(names[t], p, t) for t, p in partitions)
                for member_id, partitions in out.items()
            }
        )


def _kept(
    members: list[AssignorMember], subscriptions: dict[str, frozenset[str]], sizes: dict[str, int]
) -> dict[str, set[Partition]]:
    """What each member keeps of its current target (members in member id order)."""
    taken: set[Partition] = set()
    kept: dict[str, set[Partition]] = {}
    for m in members:
        mine: set[Partition] = set()
        for r in m.assignment:
            if not isinstance(r, TopicPartition):
                continue
            partition = (r.topic_id, r.partition)
            if (
                r.topic_id in subscriptions[m.member_id]
                and 0 <= r.partition < sizes[r.topic_id]
                and partition not in taken
            ):
                mine.add(partition)
        taken |= mine
        kept[m.member_id] = mine
    return kept


def _homogeneous(
    kept: dict[str, set[Partition]], subscribed: frozenset[str], sizes: dict[str, int]
) -> dict[str, set[Partition]]:
    member_ids = list(kept)  # in member id order
    everything = [(t, p) for t in sorted(subscribed) for p in range(sizes[t])]
    base, extra = divmod(len(everything), len(member_ids))

    # Who gets base + 1: the members above base, largest holders first, then the rest by id.
    above = sorted((m for m in member_ids if len(kept[m]) > base), key=lambda m: (-len(kept[m]), m))
    others = [m for m in member_ids if len(kept[m]) <= base]
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(above + others)}

    # Members above their quota give up the end of their share in the global order.
    held = {m: sorted(kept[m]) for m in member_ids}
    for m in member_ids:
        del held[m][quota[m] :]
    owned = {p for partitions in held.values() for p in partitions}
    pool = [p for p in everything if p not in owned]

    # The unassigned partitions, in the global order, to the members below their quota, by id.
    start = 0
    for m in member_ids:
        need = quota[m] - len(held[m])
        held[m] += pool[start : start + need]
        start += need
    return {m: set(partitions) for m, partitions in held.items()}


def _by_quota(
    kept: dict[str, set[Partition]],
    subscribed: frozenset[str],
    sizes: dict[str, int],
    capacities: dict[str, int],
    member_racks: dict[str, str | None] | None,
    layouts: dict[str, tuple[str, ...]],
) -> dict[str, set[Partition]]:
    """The homogeneous target with weights or racks (see the module docs);
    `member_racks` is None when racks are not in play."""
    member_ids = list(kept)  # in member id order
    everything = [(t, p) for t in sorted(subscribed) for p in range(sizes[t])]  # the global order
    floors, fractional = shares(len(everything), capacities)
    extra = len(everything) - sum(floors.values())

    # A partition's rack, where racks are in play and its topic has them.
    rack_of: dict[Partition, str] = {}
    if member_racks is not None:
        rack_of = {(t, p): layouts[t][p] for t, p in everything if layouts.get(t)}

    def is_local(member_id: str, partition: Partition) -> bool:
        if member_racks is None or member_racks[member_id] is None:
            return False
        return rack_of.get(partition) == member_racks[member_id]

    rack_sizes: dict[str, int] = {}
    for rack in rack_of.values():
        rack_sizes[rack] = rack_sizes.get(rack, 0) + 1
    gains: dict[str, int] = {}
    if member_racks is not None:
        gains = rack_gains(member_racks, floors, fractional, rack_sizes)[1]

    # Already balanced (every partition held, each member within its quota) and as
    # local as possible: nothing moves.
    balanced = sum(len(p) for p in kept.values()) == len(everything) and all(
        floors[m] <= len(kept[m]) <= floors[m] + (m in fractional) for m in member_ids
    )
    if balanced and (
        member_racks is None
        or sum(1 for m in member_ids for p in kept[m] if is_local(m, p))
        == best_local(member_racks, floors, fractional, extra, rack_sizes)
    ):
        return {m: set(kept[m]) for m in member_ids}

    sticky = {m for m in member_ids if len(kept[m]) > floors[m]}
    chosen = choose_extras(member_ids, fractional, extra, sticky, member_racks or {}, gains)
    room = {m: floors[m] + (m in chosen) for m in member_ids}
    out: dict[str, set[Partition]] = {m: set() for m in member_ids}

    def most_room_first(members: list[str]) -> list[str]:
        """The members with room, most room first, in member id order among equal room."""
        with_room = [m for m in members if room[m] > 0]
        return sorted(with_room, key=lambda m: -room[m])  # a stable sort keeps the id order

    def take(member_id: str, partitions: list[Partition]) -> None:
        out[member_id].update(partitions)
        room[member_id] -= len(partitions)

    # A. Each member keeps its current local partitions, up to its quota.
    for m in member_ids:
        local = sorted(p for p in kept[m] if is_local(m, p))
        take(m, local[: room[m]])

    # B. Per rack, its members with room take the rack's partitions no one kept.
    if member_racks is not None:
        holder = {p: m for m, partitions in kept.items() for p in partitions}
        for rack in sorted(set(rack_of.values())):
            assigned = {p for partitions in out.values() for p in partitions}
            unkept = [p for p in everything if rack_of.get(p) == rack and p not in assigned]
            # A partition held by a member of this rack and not kept was given up in A.
            elsewhere = {p for p in unkept if p in holder and member_racks[holder[p]] != rack}
            pool = [p for p in unkept if p not in elsewhere] + [p for p in unkept if p in elsewhere]
            for m in most_room_first([m for m in member_ids if member_racks[m] == rack]):
                mine, pool = pool[: room[m]], pool[room[m] :]
                take(m, mine)

    # C. Each member keeps its other current partitions that B did not give away, up to its room.
    assigned = {p for partitions in out.values() for p in partitions}
    for m in member_ids:
        rest = sorted(p for p in kept[m] if p not in assigned)
        take(m, rest[: room[m]])

    # D. The members with room, most room first, then by member id, take what is
    # left in the global order.
    assigned = {p for partitions in out.values() for p in partitions}
    pool = [p for p in everything if p not in assigned]
    for m in most_room_first(member_ids):
        mine, pool = pool[: room[m]], pool[room[m] :]
        take(m, mine)
    return out


def _heterogeneous(
    kept: dict[str, set[Partition]], subscriptions: dict[str, frozenset[str]], sizes: dict[str, int]
) -> dict[str, set[Partition]]:
    member_ids = list(kept)  # in member id order
    topic_ids = sorted({t for subscription in subscriptions.values() for t in subscription})
    subscribers = {t: [m for m in member_ids if t in subscriptions[m]] for t in topic_ids}
    # member -> topic id -> its partitions of the topic, ascending (a giver gives its last)
    owned: dict[str, dict[str, list[int]]] = {m: {t: [] for t in subscriptions[m]} for m in member_ids}
    for m, partitions in kept.items():
        for t, p in sorted(partitions):
            owned[m][t].append(p)
    load = {m: len(kept[m]) for m in member_ids}
    assigned = {p for partitions in kept.values() for p in partitions}

    # 1. Fill, topics with the fewest subscribers first. Within a topic only its
    # subscribers' loads change, so one heap of (load, member id) per topic is exact.
    for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        heap = [(load[m], m) for m in subscribers[t]]
        heapq.heapify(heap)
        for p in range(sizes[t]):
            if (t, p) in assigned:
                continue
            count, m = heapq.heappop(heap)
            bisect.insort(owned[m][t], p)
            load[m] = count + 1
            heapq.heappush(heap, (count + 1, m))

    # 2. Balance. Within a topic a move changes only the giver's and the taker's
    # loads, so two heaps find the least loaded subscriber (ties: smallest member
    # id) and the most loaded holder (ties: largest member id) without a scan of
    # every subscriber per move (which took seconds when one member held 10,000
    # partitions that 1,000 others could take). A heap pops its smallest entry:
    # the givers' entries are negated, with a member's rank in id order standing
    # for its id. After a move both members get entries at their new loads; an
    # entry whose load is no longer the member's (or, for a giver, whose member
    # no longer holds any of the topic) is stale and skipped.
    rank = {m: i for i, m in enumerate(member_ids)}
    shared = [t for t in sorted(subscribers) if len(subscribers[t]) > 1]
    moved = True
    while moved:
        moved = False
        for t in shared:
            takers = [(load[m], m) for m in subscribers[t]]
            givers = [(-load[m], -rank[m], m) for m in subscribers[t] if owned[m][t]]
            heapq.heapify(takers)
            heapq.heapify(givers)
            while True:
                while load[takers[0][1]] != takers[0][0]:
                    heapq.heappop(takers)
                while givers and (-givers[0][0] != load[givers[0][2]] or not owned[givers[0][2]][t]):
                    heapq.heappop(givers)
                if not givers:
                    break
                giver, taker = givers[0][2], takers[0][1]
                if load[giver] - load[taker] <= 1:
                    break
                bisect.insort(owned[taker][t], owned[giver][t].pop())
                load[giver] -= 1
                load[taker] += 1
                for m in (giver, taker):
                    heapq.heappush(takers, (load[m], m))
                    heapq.heappush(givers, (-load[m], -rank[m], m))
                moved = True

    return {m: {(t, p) for t, partitions in owned[m].items() for p in partitions} for m in member_ids}
