"""The uniform assignor: balanced and sticky.

Homogeneous groups (every member subscribes to the same topics) end balanced
to within one partition, and the move from the current target is the minimum:
an already balanced assignment moves nothing, a join takes only the surplus of
the most loaded members, a leave hands only the leaver's partitions out.

Heterogeneous groups keep every still-valid partition, give unassigned ones to
the least loaded eligible member, then move partitions from the most to the
least loaded eligible member while that narrows the gap by more than one.

Weighted members (some capacity other than 1) or racks in play (a member with
a rack, a subscribed topic with partition racks) in a homogeneous group go to
uniform_quota.py: shares proportional to capacity, then rack locality, then
stickiness. Heterogeneous groups ignore capacities and racks (the algorithm
below, unchanged). Without either, the code below runs exactly as before.

Speed. This runs on the heartbeat path of groups with up to 10,000 members and
100,000 partitions, so the homogeneous case works on counts and whole
frozensets, never on (topic, partition) pairs in Python: a member that keeps
its whole current target is only counted (the input is checked for partitions
held twice or past the end of their topic by C set operations per topic), and
the very same Assignment object is returned for it, so the caller's diff is an
identity check. Only members above their quota are cut, and unassigned
partitions are looked for only in topics that have some. A fresh assignment
hands out contiguous blocks, sharing the frozensets of equal blocks between
topics of equal size.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import chain, compress, repeat, starmap
from operator import attrgetter, gt, le, lt

from ..model import EMPTY_ASSIGNMENT, Assignment
from .base import GroupAssignment, GroupSpec
from .blocks import cut_runs
from .racks import racks_in_play

_num_partitions = attrgetter("num_partitions")
_partition_racks = attrgetter("partition_racks")


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> Mapping[str, Assignment]:
        if not spec.members:
            return {}
        if spec.is_homogeneous():
            return _assign_homogeneous(spec, next(iter(spec.members.values())).subscribed_topic_ids)
        return _assign_heterogeneous(spec)


# -- homogeneous --------------------------------------------------------------


def _assign_homogeneous(spec: GroupSpec, subscribed: frozenset[str]) -> Mapping[str, Assignment]:
    # The global order of partitions: topics sorted by id, partitions ascending.
    topics = spec.topics
    # The coordinator passes topics sorted by id, which makes this sort linear,
    # and only the subscribed ones: then the topics need no filtering (C passes).
    topic_ids = (
        sorted(topics) if subscribed == topics.keys() else sorted([t for t in topics if t in subscribed])
    )
    sizes = list(map(_num_partitions, map(topics.__getitem__, topic_ids)))
    if 0 in sizes:
        # Every topic below has partitions (real topics always do).
        topic_ids = [t for t, n in zip(topic_ids, sizes, strict=True) if n]
        sizes = [n for n in sizes if n]
    member_ids = list(spec.members)
    if not topic_ids:
        return GroupAssignment(member_ids, [EMPTY_ASSIGNMENT] * len(member_ids))
    weighted = spec.is_weighted()
    # One C pass over the topics' racks first: with none anywhere (the usual
    # case), neither the subscribed topics nor the members are looked at.
    racks = any(map(_partition_racks, topics.values())) and racks_in_play(
        spec.members.values(), map(topics.__getitem__, topic_ids)
    )
    if weighted or racks:
        # Weighted members or racks: another algorithm (uniform_quota.py), imported
        # here because it reuses this module's helpers.
        from .uniform_quota import assign_by_quota

        return assign_by_quota(spec, topic_ids, sizes, weighted, racks)
    # A comprehension, not map(attrgetter): the specialised slot load is 2x faster.
    currents = [m.current for m in spec.members.values()]
    if not any(currents):
        return _fresh(sorted(member_ids), topic_ids, sizes)
    return _sticky(member_ids, currents, topic_ids, sizes, sanitized=False)


def _fresh(member_ids: list[str], topic_ids: list[str], sizes: list[int]) -> Mapping[str, Assignment]:
    """Nothing to keep: each member, in id order, takes the next contiguous
    block of the global order; the first `extra` blocks are one longer. Topics
    of equal size are one segment object (one tuple of ints per size), so that
    their blocks' frozensets are built once and shared (blocks.py)."""
    base, extra = divmod(sum(sizes), len(member_ids))
    ints = tuple(range(max(sizes)))
    wholes = {n: ints[:n] for n in set(sizes)}
    out, _ = cut_runs(
        topic_ids, list(map(wholes.__getitem__, sizes)), ((base + 1, extra), (base, len(member_ids) - extra))
    )
    return GroupAssignment(member_ids, out)


def _sticky(
    member_ids: list[str],
    currents: list[Assignment],
    topic_ids: list[str],
    sizes: list[int],
    sanitized: bool,
) -> Mapping[str, Assignment]:
    """Keeps what each member may keep, cuts members above their quota, and
    gives the unassigned partitions to members below it.

    `member_ids` and `currents` are aligned and in any order; every decision
    that depends on order uses member ids (or counts), so the result does not
    depend on the order of the members in the spec.
    """
    num_members = len(member_ids)
    total = sum(sizes)
    base, extra = divmod(total, num_members)

    counts, holdings, stale = _scan(currents, topic_ids, sizes)
    held = sum(counts)
    # Per topic, its partitions minus every holding, in one C call; each result
    # is dropped as soon as it is counted, which keeps memory small and hot.
    # If no partition is held twice or lies past the end of its topic, exactly
    # `held` partitions were removed; otherwise clean the input up first (never
    # the case for targets this assignor computed, so that path may be slow).
    unheld_counts = list(map(len, starmap(frozenset.difference, holdings.values())))
    if total - sum(unheld_counts) != held:
        if sanitized:  # pragma: no cover - _sanitize returns disjoint, in-range targets
            raise AssertionError("sanitized targets are still invalid")
        clean = _sanitize(member_ids, currents, dict(zip(topic_ids, sizes, strict=True)))
        return _sticky(member_ids, clean, topic_ids, sizes, sanitized=True)
    if held == 0:
        return _fresh(sorted(member_ids), topic_ids, sizes)

    kept = list(currents)
    if stale:
        valid = frozenset(topic_ids)
        for i in stale:
            kept[i] = {t: p for t, p in currents[i].items() if t in valid}
    if held == total and counts.count(base) + counts.count(base + 1) == num_members:
        # Already balanced (exactly `extra` members hold base + 1): nothing moves.
        # list.count compares small ints by identity: cheaper than max and min.
        return GroupAssignment(member_ids, kept)
    top, least = max(counts), min(counts)

    # Quotas: every member may keep `base`; the `extra` slots of base + 1 go
    # to the largest holders first (ties by member id), so that they move
    # least, and what is left of them to the other members by member id.
    everyone = range(num_members)
    losers: list[int] = []  # members above base that do not get base + 1: cut to base
    if top == base + 1 and extra - counts.count(top) < 0:
        # A join into a balanced group: the members above base all hold base + 1,
        # and the few that give one up are the last by id.
        extra_left = 0
        surplus = counts.count(top) - extra
        if _in_order(member_ids):
            # The coordinator passes members in id order: the last holders of
            # base + 1, found by C scans of the reversed counts (no string compares).
            reversed_counts = counts[::-1]
            j = -1
            for _ in range(surplus):
                j = reversed_counts.index(top, j + 1)
                losers.append(num_members - 1 - j)
        elif surplus <= 16:
            ids_over = compress(member_ids, map(gt, counts, repeat(base)))
            losers = [member_ids.index(m) for m in heapq.nlargest(surplus, ids_over)]
        else:
            over = list(compress(everyone, map(gt, counts, repeat(base))))
            losers = _least_loaded(over, counts, member_ids, surplus, True)
    else:
        over = list(compress(everyone, map(gt, counts, repeat(base))))
        extra_left = extra - len(over)
        if extra_left < 0:
            losers = _least_loaded(over, counts, member_ids, -extra_left, top == base + 1)
            extra_left = 0
    under = _below(counts, base, least)
    needs = dict(zip(under, map(base.__sub__, map(counts.__getitem__, under)), strict=True))
    if extra_left:
        at_most_base = list(compress(everyone, map(le, counts, repeat(base))))
        for i in _by_id(at_most_base, member_ids, extra_left, True):
            needs[i] = base + 1 - counts[i]

    # Members above their quota give up the end of their share (in the global
    # order) to the pool of unheld partitions.
    unheld: dict[str, set[int]] = {}
    for j in compress(range(len(topic_ids)), unheld_counts):
        unheld[topic_ids[j]] = set(frozenset.difference(*holdings[topic_ids[j]]))
    for i in losers:
        kept[i] = _cut(kept[i], counts[i] - base, unheld)
    if top > base + 1:
        cut_to_base = set(losers)
        for i in compress(everyone, map(gt, counts, repeat(base + 1))):
            if i not in cut_to_base:
                kept[i] = _cut(kept[i], counts[i] - base - 1, unheld)

    # The unassigned partitions in the global order, handed out in member id
    # order: each member below its quota takes the next ones it needs.
    pool: list[tuple[str, Sequence[int]]] = []
    for topic_id in sorted(unheld):  # topic_ids is sorted: the same order, over fewer topics
        rest = unheld[topic_id]
        if rest:
            size = sizes[bisect_left(topic_ids, topic_id)]
            pool.append((topic_id, range(size) if len(rest) == size else sorted(rest)))
    segment = pos = 0
    for i in sorted(needs, key=member_ids.__getitem__):
        need = needs[i]
        assignment = dict(kept[i])
        while need:
            topic_id, free = pool[segment]
            take = min(need, len(free) - pos)
            added = frozenset(free[pos : pos + take])
            before = assignment.get(topic_id)
            assignment[topic_id] = added if before is None else before | added
            need -= take
            pos += take
            if pos == len(free):
                segment, pos = segment + 1, 0
        kept[i] = assignment
    return GroupAssignment(member_ids, kept)


def _below(counts: list[int], base: int, least: int) -> list[int]:
    """The indices of the counts below `base`; `least` is the smallest count.
    Usually a few joiners at 0: then C scans for each count below base beat
    one comparison per member."""
    if least >= base:
        return []
    if base - least <= 4:
        found: list[int] = []
        for count in range(least, base):
            i = -1
            for _ in range(counts.count(count)):
                i = counts.index(count, i + 1)
                found.append(i)
        if len(found) <= 64:
            return sorted(found)
    return list(compress(range(len(counts)), map(lt, counts, repeat(base))))


def _in_order(member_ids: list[str]) -> bool:
    """Whether the ids are sorted: linear for the coordinator's specs, which are."""
    return sorted(member_ids) == member_ids


def _scan(
    currents: list[Assignment], topic_ids: list[str], sizes: list[int]
) -> tuple[list[int], dict[str, list[frozenset[int]]], list[int]]:
    """Each member's count of still valid partitions; per topic, the frozenset
    of all its partitions followed by every member's holding of it (ready for
    frozenset.difference); and the members that hold stale topics (deleted or
    no longer subscribed), which the counts leave out.

    One plain loop over the members: it measured faster than chains of
    map/accumulate doing the same in several C passes.
    """
    ints = tuple(range(max(sizes)))
    # One frozenset per distinct size: topics of a group usually share a size.
    everything = {n: frozenset(ints[:n]) for n in set(sizes)}
    # Each topic's list starts with all its partitions (built in C: zip of one
    # iterable gives 1-tuples, which list() copies).
    holdings: dict[str, list[frozenset[int]]] = dict(
        zip(topic_ids, map(list, zip(map(everything.__getitem__, sizes))), strict=True)
    )
    counts: list[int] = []
    add_count = counts.append
    any_stale = False
    for current in currents:
        count = 0
        # Keys and subscripts (specialised for dicts), not items(): no tuple per
        # topic; and a free try, not a call of get: 15-20% off this loop.
        for topic_id in current:
            partitions = current[topic_id]
            try:
                holdings[topic_id].append(partitions)
            except KeyError:
                any_stale = True
                continue
            count += len(partitions)
        add_count(count)
    if not any_stale:
        return counts, holdings, []
    # Rare (a topic deleted or unsubscribed): a second pass names the members,
    # which keeps an index out of the loop above.
    return (
        counts,
        holdings,
        [i for i, current in enumerate(currents) if not holdings.keys() >= current.keys()],
    )


def _cut(current: Assignment, surplus: int, unheld: dict[str, set[int]]) -> Assignment:
    """`current` without its last `surplus` partitions in the global order,
    which go to the unheld partitions of their topic. The kept part of a topic
    is the held frozenset minus what goes (a copy in C), not a new set built
    element by element."""
    kept = dict(current)
    for topic_id in sorted(current, reverse=True):
        partitions = current[topic_id]
        if len(partitions) <= surplus:
            del kept[topic_id]
            unheld.setdefault(topic_id, set()).update(partitions)
            surplus -= len(partitions)
            if not surplus:
                break
            continue
        dropped = (max(partitions),) if surplus == 1 else sorted(partitions)[-surplus:]
        kept[topic_id] = partitions.difference(dropped)
        unheld.setdefault(topic_id, set()).update(dropped)
        break
    return kept


def _least_loaded(
    candidates: list[int], counts: list[int], member_ids: list[str], k: int, equal: bool
) -> list[int]:
    """The `k` candidates with the fewest partitions, ties broken by the
    largest member id (`equal`: they all have the same count)."""
    if equal:  # the usual case: a join into a balanced group
        return _by_id(candidates, member_ids, k, False)
    by_count: dict[int, list[int]] = {}
    for i in candidates:
        by_count.setdefault(counts[i], []).append(i)
    chosen: list[int] = []
    for count in sorted(by_count):
        chosen += _by_id(by_count[count], member_ids, k - len(chosen), False)
        if len(chosen) == k:
            break
    return chosen


def _by_id(candidates: list[int], member_ids: list[str], k: int, smallest: bool) -> list[int]:
    """The `k` candidates with the smallest (or largest) member ids, in no
    particular order, without sorting them all when `k` is small."""
    if k <= 0:
        return []
    if k >= len(candidates):
        return candidates
    ids = list(map(member_ids.__getitem__, candidates))
    if 16 * k <= len(candidates):
        chosen = heapq.nsmallest(k, ids) if smallest else heapq.nlargest(k, ids)
        if k <= 16:
            return [candidates[ids.index(member_id)] for member_id in chosen]
    else:
        ordered = sorted(ids)
        chosen = ordered[:k] if smallest else ordered[len(ordered) - k :]
    keep = set(chosen)
    return list(compress(candidates, map(keep.__contains__, ids)))


def _sanitize(
    member_ids: list[str], currents: list[Assignment], sizes: Mapping[str, int]
) -> list[Assignment]:
    """Drops partitions past the end of their topic, and partitions held twice
    from all but their holder with the smallest member id."""
    taken: dict[str, set[int]] = {t: set() for t in sizes}
    clean = list(currents)
    for i in sorted(range(len(member_ids)), key=member_ids.__getitem__):
        kept: dict[str, frozenset[int]] = {}
        for topic_id, partitions in currents[i].items():
            n = sizes.get(topic_id)
            if n is None:
                kept[topic_id] = partitions  # a stale topic: dropped by the caller
                continue
            mine = frozenset(p for p in partitions if 0 <= p < n) - taken[topic_id]
            if mine:
                kept[topic_id] = mine
                taken[topic_id].update(mine)
        clean[i] = kept
    return clean


# -- heterogeneous ------------------------------------------------------------


def _assign_heterogeneous(spec: GroupSpec) -> Mapping[str, Assignment]:
    """Members are numbered by member id (their rank) and grouped by
    subscription. Each group keeps a heap of (load, rank), so the least loaded
    subscriber of a topic is the least of its groups' heap tops: a topic's
    work is proportional to its partitions, its holders and the number of
    distinct subscriptions, never to all its subscribers."""
    member_ids = sorted(spec.members)
    sizes = {t: topic.num_partitions for t, topic in spec.topics.items()}

    # Subscribers per topic, as groups of members with the same subscription.
    by_subscription: dict[frozenset[str], list[int]] = {}
    for rank, member_id in enumerate(member_ids):
        by_subscription.setdefault(spec.members[member_id].subscribed_topic_ids, []).append(rank)
    groups = list(by_subscription.values())
    group_of = [0] * len(member_ids)
    for g, ranks in enumerate(groups):
        for rank in ranks:
            group_of[rank] = g
    groups_of_topic: dict[str, list[int]] = {}
    for g, subscription in enumerate(by_subscription):
        for topic_id in subscription:
            if topic_id in sizes:
                groups_of_topic.setdefault(topic_id, []).append(g)
    topic_ids = sorted(groups_of_topic)
    subscribers = {t: sum(len(groups[g]) for g in groups_of_topic[t]) for t in topic_ids}

    # Keep phase: members in id order keep their valid current partitions that
    # no one before them kept. owned[topic][rank] = partitions: the member's
    # current frozenset itself until something is added or removed (see
    # _mutable). As in the homogeneous case, a topic whose holdings are
    # disjoint and in range (one C call tells) is taken as it is.
    held: dict[str, list[tuple[int, frozenset[int]]]] = {t: [] for t in topic_ids}
    for rank, member_id in enumerate(member_ids):
        member = spec.members[member_id]
        for topic_id, partitions in member.current.items():
            holdings = held.get(topic_id)
            if holdings is not None and topic_id in member.subscribed_topic_ids:
                holdings.append((rank, partitions))
    owned: dict[str, dict[int, AbstractSet[int]]] = {}
    free: dict[str, AbstractSet[int]] = {}
    load = [0] * len(member_ids)
    for topic_id, holdings in held.items():
        n = sizes[topic_id]
        everything = frozenset(range(n))
        rest = everything.difference(*(p for _, p in holdings))
        if n - len(rest) != sum(len(p) for _, p in holdings):
            # Held twice or past the end: the first holder (by id) keeps it.
            claimed: set[int] = set()
            clean = []
            for rank, partitions in holdings:
                mine = (partitions & everything) - claimed
                if mine:
                    claimed.update(mine)
                    clean.append((rank, mine))
            holdings = clean
        owned[topic_id] = {rank: partitions for rank, partitions in holdings if partitions}
        free[topic_id] = rest
        for rank, partitions in holdings:
            load[rank] += len(partitions)

    # Fill phase: topics with fewer subscribers first (they have the fewest
    # choices); each unassigned partition, in order, to the least loaded
    # subscriber (ties by id). Loads change only through the heaps here, so
    # their entries stay exact.
    heaps = [[(load[r], r) for r in ranks] for ranks in groups]
    for heap in heaps:
        heapq.heapify(heap)
    for topic_id in sorted(topic_ids, key=lambda t: (subscribers[t], t)):
        if free[topic_id]:
            _fill(sorted(free[topic_id]), heaps, groups_of_topic[topic_id], group_of, load, owned[topic_id])

    _balance([t for t in topic_ids if subscribers[t] > 1], groups, groups_of_topic, group_of, owned, load)

    result: dict[str, dict[str, frozenset[int]]] = {m: {} for m in member_ids}
    for topic_id in topic_ids:
        for rank, owns in owned[topic_id].items():
            result[member_ids[rank]][topic_id] = owns if isinstance(owns, frozenset) else frozenset(owns)
    return dict(result)


def _fill(
    free: list[int],
    group_heaps: list[list[tuple[int, int]]],
    topic_groups: list[int],
    group_of: list[int],
    load: list[int],
    holders: dict[int, AbstractSet[int]],
) -> None:
    """Gives `free` (ascending) one at a time to the subscriber with the least
    (load, rank): the least of the (load, rank) heaps of the topic's groups.

    Done by levels rather than one heap operation per partition: every member
    at the lowest load takes one, in rank order, then every member at the next
    load, and so on. Only members that can still receive are popped: at most
    `left` more at each level, since later ones in rank order cannot be among
    the `left` that get one. When there are at least as many partitions as
    subscribers, every subscriber receives, so the heaps are emptied into one
    sorted list (a C sort) and rebuilt at the end instead."""
    heaps = [group_heaps[g] for g in topic_groups]
    drained: list[tuple[int, int]] = []
    if len(free) >= sum(map(len, heaps)):
        drained = sorted(chain.from_iterable(heaps))
        for heap in heaps:
            heap.clear()
        heaps = []
    nxt = 0  # the next entry of `drained`
    given = 0
    active: list[int] = []  # the ranks raised to `level` so far, ascending
    level = drained[0][0] if drained else min(heap[0] for heap in heaps)[0]
    while True:
        left = len(free) - given
        joining: list[int] = []
        while nxt < len(drained) and drained[nxt][0] == level and len(joining) < left:
            joining.append(drained[nxt][1])
            nxt += 1
        heaps = [heap for heap in heaps if heap]
        while heaps and len(joining) < left:
            heap = heaps[0] if len(heaps) == 1 else min(heaps, key=_top)
            if heap[0][0] != level:
                break
            joining.append(heapq.heappop(heap)[1])
            if not heap:
                heaps = [h for h in heaps if h]
        taking = list(heapq.merge(active, joining)) if joining else active
        receivers = taking[:left]
        for rank, partition in zip(receivers, free[given : given + len(receivers)], strict=True):
            if rank in holders:
                _mutable(holders, rank).add(partition)
            else:
                holders[rank] = {partition}
            load[rank] = level + 1
        given += len(receivers)
        if given == len(free):
            break
        active = taking
        level += 1
    # Back into the heaps, at their new loads (non-receivers stay at `level`).
    if drained:
        for rank in taking:
            group_heaps[group_of[rank]].append((load[rank], rank))
        for entry in drained[nxt:]:
            group_heaps[group_of[entry[1]]].append(entry)
        for g in topic_groups:
            heapq.heapify(group_heaps[g])
    else:
        for rank in taking:
            heapq.heappush(group_heaps[group_of[rank]], (load[rank], rank))


def _mutable(holders: dict[int, AbstractSet[int]], rank: int) -> set[int]:
    """The member's partitions as a set that may be changed (a copy, the first
    time, of the frozenset it held)."""
    partitions = holders[rank]
    if isinstance(partitions, set):
        return partitions
    mutable = holders[rank] = set(partitions)
    return mutable


def _top(heap: list[tuple[int, int]]) -> tuple[int, int]:
    return heap[0]


def _balance(
    topic_ids: list[str],
    groups: list[list[int]],
    groups_of_topic: Mapping[str, list[int]],
    group_of: list[int],
    owned: dict[str, dict[int, AbstractSet[int]]],
    load: list[int],
) -> None:
    """Moves partitions from the most loaded holder of a topic to its least
    loaded subscriber (ties: highest rank gives, lowest rank takes; the highest
    partition moves) while their loads differ by more than one, topic after
    topic in id order (`topic_ids`: those with two subscribers or more), until
    a whole pass moves nothing.

    Heaps with lazy deletion: an entry is current while its load (and, for
    holders, its holding) is still what it says; a changed member gets a new
    entry. The subscribers' side is one heap per subscription group, for the
    whole pass; the holders' side is built per topic, from its holders only."""
    get = load.__getitem__
    moved = True
    while moved and max(load) - min(load) > 1:
        moved = False
        lows = [[(load[r], r) for r in ranks] for ranks in groups]
        for heap in lows:
            heapq.heapify(heap)
        for topic_id in topic_ids:
            holders = owned[topic_id]
            topic_lows = [lows[g] for g in groups_of_topic[topic_id]]
            if not holders:
                continue
            for heap in topic_lows:
                while load[heap[0][1]] != heap[0][0]:
                    heapq.heappop(heap)
            if max(map(get, holders)) - min(heap[0][0] for heap in topic_lows) <= 1:
                continue
            highs = [(-load[r], -r) for r in holders]
            heapq.heapify(highs)
            while True:
                for heap in topic_lows:
                    while load[heap[0][1]] != heap[0][0]:
                        heapq.heappop(heap)
                while highs and (-highs[0][0] != load[-highs[0][1]] or -highs[0][1] not in holders):
                    heapq.heappop(highs)
                if not highs:
                    break
                low = min(heap[0] for heap in topic_lows)[1]
                high = -highs[0][1]
                if load[high] - load[low] <= 1:
                    break
                partition = max(holders[high])
                giving = _mutable(holders, high)
                giving.remove(partition)
                if not giving:
                    del holders[high]
                if low in holders:
                    _mutable(holders, low).add(partition)
                else:
                    holders[low] = {partition}
                load[high] -= 1
                load[low] += 1
                heapq.heappush(lows[group_of[high]], (load[high], high))
                heapq.heappush(lows[group_of[low]], (load[low], low))
                heapq.heappush(highs, (-load[low], -low))
                if high in holders:
                    heapq.heappush(highs, (-load[high], -high))
                moved = True
