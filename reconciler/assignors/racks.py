"""Rack locality: which partitions are local to which members, and how many
local (member, partition) pairs the balance rule allows at best.

A pair is local when the member's `rack_id` equals the partition's rack
(`Topic.partition_racks`). Racks are *in play* for a group when some member has
a rack and some subscribed topic has partition racks; otherwise every assignor
runs its rack-blind code unchanged.

The optimum under balance (`best_local`). Every balanced (or proportional)
assignment gives member i a quota q_i = f_i + e_i: a floor f_i it always gets,
plus e_i in {0, 1}, where e_i = 1 is allowed only for the members whose exact
share is fractional (the candidates) and exactly K members get it. Given the
quotas, rack r (n_r partitions, members' quotas summing to Q_r) has at most
min(n_r, Q_r) local pairs, and exactly that many are reachable: the quotas do
not depend on which partitions fill them, so the partitions of r fill r's
members first and any partition fills what is left. With F_r the sum of the
floors of r's members and k_r the candidates of r given the extra one,
min(n_r, F_r + k_r) <= min(n_r, F_r) + min(k_r, max(0, n_r - F_r)): each extra
one given in rack r adds at most one local pair, and only while the rack has
more partitions than floor places, so rack r gains at most
g_r = min(candidates in r, max(0, n_r - F_r)) from the extras, and all racks
together at most min(K, sum g_r). Giving the extras greedily to racks with
gain left reaches that bound, so

    best = sum_r min(n_r, F_r) + min(K, sum_r g_r)

exactly (a counting argument; it is the max flow of the bipartite
rack-to-rack network, which is why no flow needs to run).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from operator import attrgetter

from ..topics import Topic
from .base import MemberSpec

_partition_racks = attrgetter("partition_racks")


@lru_cache(maxsize=1024)
def partitions_by_rack(racks: tuple[str, ...]) -> Mapping[str, frozenset[int]]:
    """A topic's partitions grouped by rack. Memoised on the racks tuple: a
    topic's layout changes rarely (only CreatePartitions), while targets are
    recomputed often, and this is the one per-partition Python loop of the
    rack-aware assignors. A dict lookup tries identity before equality, so the
    same Topic's tuple is found without comparing its elements; topics created
    with one layout share an entry. Bounded in entries, not bytes (an entry
    holds its topic's partitions once, about 40 bytes each): beyond 1,024
    distinct layouts the least recently used are rebuilt when needed."""
    grouped: dict[str, list[int]] = {}
    for partition, rack in enumerate(racks):
        found = grouped.get(rack)
        if found is None:
            grouped[rack] = [partition]
        else:
            found.append(partition)
    return {rack: frozenset(partitions) for rack, partitions in grouped.items()}


@lru_cache(maxsize=1024)
def ordered_by_rack(racks: tuple[str, ...]) -> Mapping[str, tuple[int, ...]]:
    """`partitions_by_rack`, each rack's partitions as an ascending tuple."""
    return {rack: tuple(sorted(partitions)) for rack, partitions in partitions_by_rack(racks).items()}


def racks_in_play(members: Iterable[MemberSpec], topics: Iterable[Topic]) -> bool:
    """Whether some topic has partition racks and some member a rack. Topics
    first, in C: they are few, and without racks the members are never read."""
    if not any(map(_partition_racks, topics)):
        return False
    return any(member.rack_id is not None for member in members)


def rack_sizes(topics: Iterable[Topic], racks: Iterable[str]) -> dict[str, int]:
    """The number of partitions of each of `racks` in `topics` (racks without
    partitions included, at 0)."""
    sizes = dict.fromkeys(racks, 0)
    for topic in topics:
        if topic.partition_racks:
            for rack, partitions in partitions_by_rack(topic.partition_racks).items():
                if rack in sizes:
                    sizes[rack] += len(partitions)
    return sizes


def rack_gains(
    member_racks: Sequence[str | None],
    floors: Sequence[int],
    candidates: Sequence[bool],
    sizes: Mapping[str, int],
    groups: Mapping[str, Sequence[int]] | None = None,
    counted: Mapping[str | None, int] | None = None,
) -> tuple[int, dict[str, int]]:
    """sum_r min(n_r, F_r) and, per rack, g_r: how many extra partitions given
    to its members would each add a local pair (see the module docs).
    `groups`: the indices of each rack's members, where the caller has them
    (every rack of `sizes` with members): then F_r and the candidates are
    summed over each rack's members in C. `counted`: the members of each
    rack, where the caller counted them (used with equal shares)."""
    floor_sum: dict[str, int] = {}
    candidate_count: dict[str, int] = {}
    equal = (
        bool(floors)
        and floors.count(floors[0]) == len(floors)
        and candidates.count(candidates[0]) == len(candidates)
    )
    if groups is not None:
        for rack_id, indices in groups.items():
            if rack_id in sizes and indices:
                if equal:  # equal shares: the rack's member count is enough
                    floor_sum[rack_id] = floors[0] * len(indices)
                    candidate_count[rack_id] = len(indices) if candidates[0] else 0
                else:
                    floor_sum[rack_id] = sum(map(floors.__getitem__, indices))
                    candidate_count[rack_id] = sum(map(candidates.__getitem__, indices))
    elif equal:
        # Equal shares (every capacity 1): counting members per rack, in C, is enough.
        for rack, members in (Counter(member_racks) if counted is None else counted).items():
            if rack is not None and rack in sizes:
                floor_sum[rack] = floors[0] * members
                candidate_count[rack] = members if candidates[0] else 0
    else:
        # Counted per distinct (rack, floor, candidate) in C: with capacities of
        # a few values these are few, and a Python pass per member is not needed.
        for (rack, floor, candidate), members in Counter(
            zip(member_racks, floors, candidates, strict=True)
        ).items():
            if rack is None or rack not in sizes:
                continue
            floor_sum[rack] = floor_sum.get(rack, 0) + floor * members
            candidate_count[rack] = candidate_count.get(rack, 0) + candidate * members
    base_local = 0
    gains: dict[str, int] = {}
    for rack, floor_total in floor_sum.items():
        n = sizes[rack]
        base_local += min(n, floor_total)
        gain = min(candidate_count[rack], max(0, n - floor_total))
        if gain:
            gains[rack] = gain
    return base_local, gains


def best_local(
    member_racks: Sequence[str | None],
    floors: Sequence[int],
    candidates: Sequence[bool],
    extra: int,
    sizes: Mapping[str, int],
) -> int:
    """The most local pairs any assignment with these quotas can have:
    sum_r min(n_r, F_r) + min(K, sum_r g_r), K = `extra`."""
    base_local, gains = rack_gains(member_racks, floors, candidates, sizes)
    return base_local + min(extra, sum(gains.values()))
