"""Quotas: how many partitions each member gets, weighted by capacity, and
which members get the one extra partition when the shares are not whole.

Member i with capacity c_i (sum of capacities C) has the exact share
s_i = N * c_i / C of the N partitions. Its quota is floor(s_i) or, only when
s_i is not a whole number, ceil(s_i) = floor(s_i) + 1, and exactly
K = N - sum floor(s_i) members get the ceiling (K is at most the number of
members with a fractional share, since their fractional parts add up to K and
each is below 1). So every member is within one partition of its exact share,
|q_i - s_i| < 1, and a member with a whole share gets exactly that. With every
capacity 1 this is the uniform assignor's rule: base or base + 1, with exactly
N mod M members at base + 1.

Who gets the extra one, in this order: members in racks where it adds a local
pair (up to each rack's gain, see racks.py: locality comes before stickiness),
members that hold more than their floor now first within each rack (they keep
it: stickiness breaks ties among equally local choices); then, without the
racks, members that hold more than their floor, then the rest. Each walk goes
by member id (`choose_extras`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from itertools import compress, islice, repeat
from operator import eq, gt, not_


def shares(total: int, capacities: Sequence[int]) -> tuple[list[int], list[bool], int]:
    """Each member's floor, whether its share is fractional (it may get one
    more), and K, how many members get one more. A capacity below 1 counts as
    1 (the heartbeat validates 1 - 1,000; this keeps the division defined)."""
    # Capacities take few distinct values: each one's floor and whether it is
    # fractional are computed once, then looked up per member in C (a division
    # per member in a comprehension cost 1.5 ms at 10,000 members).
    distinct = set(capacities)
    if min(distinct) < 1:
        capacities = [max(1, c) for c in capacities]
        distinct = set(capacities)
    weight = sum(capacities)
    floor_of = {c: total * c // weight for c in distinct}
    fractional_of = {c: total * c % weight != 0 for c in distinct}
    floors = list(map(floor_of.__getitem__, capacities))
    fractional = set(fractional_of.values())
    if len(fractional) == 1:  # all or none fractional (the usual case): no pass
        candidates = [fractional.pop()] * len(capacities)
    else:
        candidates = list(map(fractional_of.__getitem__, capacities))
    return floors, candidates, total - sum(floors)


def equal_shares(total: int, count: int) -> tuple[list[int], list[bool], int]:
    """`shares` with every capacity 1, without a pass per member."""
    base, extra = divmod(total, count)
    return [base] * count, [extra > 0] * count, extra


def choose_extras(
    extra: int,
    order: Sequence[int],
    candidates: Sequence[bool],
    counts: Sequence[int],
    floors: Sequence[int],
    member_racks: Sequence[str | None] | None,
    gains: Mapping[str, int],
) -> list[bool]:
    """Which members get floor + 1 (exactly `extra` of the candidates).
    `order`: member indices in member id order; `counts`: partitions each
    holds now; `gains`: per rack, how many extras add a local pair.

    The same as walking the candidates in order, sticky ones (count above the
    floor) first, giving each one the extra while its rack has gain left, then
    walking them again without the racks; done with C passes (per rack), since
    a rack's gain is used up only by its own members: the first g_r eligible
    members of each rack, then the first `left` of those in order."""
    chosen = [False] * len(candidates)
    if not extra:
        return chosen
    # `order` as range(n) (members already in id order): member i is at position i.
    identity = isinstance(order, range) and order == range(len(candidates))
    if candidates.count(True) == len(candidates):  # a C count: every share fractional
        eligible = order if identity else list(order)
    else:
        eligible = list(compress(order, map(candidates.__getitem__, order)))
    passes: list[Sequence[int]]
    if max(counts) <= min(floors):  # no one above its floor (nothing held, say): no C passes
        passes = [[], eligible]
    else:
        if eligible is order and identity:  # every member, in place
            sticky = list(map(gt, counts, floors))
        else:
            sticky = list(map(gt, map(counts.__getitem__, eligible), map(floors.__getitem__, eligible)))
        passes = [list(compress(eligible, sticky)), list(compress(eligible, map(not_, sticky)))]
    left = extra
    #: Per pass, its members not chosen in the gain walk, where that walk
    #: knows them (it filed every member under its rack): the last walk then
    #: looks at those only, not at every member of the pass again.
    unpicked: dict[int, list[int]] = {}
    if gains and member_racks is not None:
        gain_left = dict(gains)
        for number, members in enumerate(passes):
            if not left:
                break
            if not members:
                continue
            # Every member, in order: its racks are `member_racks` itself.
            racks = (
                member_racks
                if identity and len(members) == len(member_racks)
                else list(map(member_racks.__getitem__, members))
            )
            picks: list[int] = []
            if 2 * sum(gain for gain in gain_left.values() if gain > 0) >= len(members):
                # Gains cover most members: one C pass puts each member in its
                # rack's list (a list thrown away for racks without gain).
                groups: dict[str | None, list[int]] = {
                    rack: [] for rack, gain in gain_left.items() if gain > 0
                }
                elsewhere: list[int] = []
                deque(map(list.append, map(groups.get, racks, repeat(elsewhere)), members), maxlen=0)
                skipped = elsewhere
                for rack, found in groups.items():
                    if rack is not None:
                        skipped += found[gain_left[rack] :]
                        found = found[: gain_left[rack]]
                        picks += found
                        gain_left[rack] -= len(found)
                unpicked[number] = skipped
            else:
                for rack, gain in gain_left.items():
                    if gain > 0:
                        # Lazy C passes, stopped at the rack's gain.
                        found = list(islice(compress(members, map(eq, racks, repeat(rack))), gain))
                        picks += found
                        gain_left[rack] -= len(found)
            if len(picks) > left:
                # Only the first `left` in order get it; give the others' gain back.
                picks.sort(key=_rank(order, len(candidates)).__getitem__)
                for returned, count in Counter(map(member_racks.__getitem__, picks[left:])).items():
                    if returned is not None:
                        gain_left[returned] += count
                if number in unpicked:
                    unpicked[number] += picks[left:]
                picks = picks[:left]
            for i in picks:  # a subscript store is 2-4x cheaper than map(list.__setitem__)
                chosen[i] = True
            left -= len(picks)
    for number, members in enumerate(passes):
        if not left:
            break
        if number in unpicked:
            # In order: ints ascending when members are in id order, else by rank.
            rest = sorted(
                unpicked[number], key=None if identity else _rank(order, len(candidates)).__getitem__
            )
            del rest[left:]
        else:
            rest = list(islice(compress(members, map(not_, map(chosen.__getitem__, members))), left))
        for i in rest:
            chosen[i] = True
        left -= len(rest)
    return chosen


def _rank(order: Sequence[int], count: int) -> Sequence[int]:
    """Each member's position in `order` (the identity when it is range(count))."""
    if isinstance(order, range) or list(order) == list(range(count)):
        return range(count)
    rank = [0] * count
    for position, i in enumerate(order):
        rank[i] = position
    return rank
