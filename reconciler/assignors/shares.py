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
from operator import eq, gt, le, not_

from .indices import indices


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
    filed: Mapping[str, Sequence[int]] | None = None,
    counted: Mapping[str | None, int] | None = None,
) -> list[bool]:
    """Which members get floor + 1 (exactly `extra` of the candidates).
    `order`: member indices in member id order; `counts`: partitions each
    holds now; `gains`: per rack, how many extras add a local pair;
    `filed`: each rack's members in order, where the caller filed them;
    `counted`: how many members each rack has, where the caller counted them.

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
    every_share_fractional = candidates.count(True) == len(candidates)  # a C count
    if (
        identity
        and every_share_fractional
        and gains
        and member_racks is not None
        and 2 * extra >= len(candidates)
    ):
        # Most members get one (a join to a group of one or two partitions
        # each): find the few that do not, from the end.
        few = _few_left_out(extra, counts, floors, member_racks, gains, counted)
        if few is not None:
            return few
    if every_share_fractional:
        eligible = order if identity else list(order)
    else:
        eligible = list(compress(order, map(candidates.__getitem__, order)))
    passes: list[Sequence[int]]
    if max(counts) <= min(floors):  # no one above its floor (nothing held, say): no C passes
        passes = [[], eligible]
    else:
        if eligible is order and identity:  # every member, in place
            sticky = list(map(gt, counts, floors))
            eligible = indices(len(candidates))  # the same members, as shared ints
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
            if filed is not None and members is order and identity:
                # Every member, in order, each eligible: a rack's first g_r
                # members are its picks, read from the caller's filing. The
                # others are found by the last walk's C pass over `chosen`.
                for rack_id, gain in gain_left.items():
                    if gain > 0:
                        found = list(filed.get(rack_id, ())[:gain])
                        picks += found
                        gain_left[rack_id] -= len(found)
            elif 2 * sum(gain for gain in gain_left.values() if gain > 0) >= len(members):
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


#: Members left without the extra one beyond which `_few_left_out` gives up.
_FEW = 64


def _few_left_out(
    extra: int,
    counts: Sequence[int],
    floors: Sequence[int],
    member_racks: Sequence[str | None],
    gains: Mapping[str, int],
    counted: Mapping[str | None, int] | None = None,
) -> list[bool] | None:
    """`choose_extras` for members in id order, every share fractional, when
    only a few of them go without: those are the last of the walk's order.

    That order is: the gain picks (each rack's first members up to its gain,
    sticky ones first), then the sticky members not picked, then the others
    not picked, each by member id. So the members left out are the last of
    the non-sticky ones not picked, then the last of the sticky ones not
    picked. Whether a member is picked follows from where it stands in its
    rack's part of its pass (counted from the end: C counts per rack), so only
    the members walked from the end are looked at. None (the general walk
    decides) when the gain picks alone would exceed `extra` (they are then cut
    by member id), when more than a few go without, or when finding them
    would mean walking far."""
    n = len(counts)
    left_out = n - extra
    if left_out > _FEW:
        return None
    non_sticky = list(compress(indices(n), map(le, counts, floors)))
    if len(non_sticky) > _FEW or len(non_sticky) == n:
        return None  # (no one sticky: one pass of everyone, the general walk is as cheap)
    racks = [r for r, gain in gains.items() if gain > 0]
    non_sticky_in: Counter[str | None] = Counter(member_racks[i] for i in non_sticky)
    # Per rack with gain: picks among the sticky members, then among the
    # others (members of other racks, or none, are never picked).
    in_rack = member_racks.count if counted is None else counted.__getitem__
    sticky_in: dict[str | None, int] = {r: in_rack(r) - non_sticky_in[r] for r in racks}
    picks_sticky: dict[str | None, int] = {r: min(gains[r], sticky_in[r]) for r in racks}
    picks_other: dict[str | None, int] = {r: min(gains[r] - picks_sticky[r], non_sticky_in[r]) for r in racks}
    if sum(picks_sticky.values()) + sum(picks_other.values()) > extra:
        return None
    out: list[int] = []
    # The non-sticky ones not picked, from the last.
    seen: Counter[str | None] = Counter()
    for i in reversed(non_sticky):
        if len(out) == left_out:
            break
        if _unpicked(member_racks[i], non_sticky_in, picks_other, seen):
            out.append(i)
    # Then the sticky ones not picked, from the last; within a bounded walk.
    seen.clear()
    i = n
    budget = 4 * _FEW
    while len(out) < left_out:
        i -= 1
        budget -= 1
        if i < 0 or budget < 0:
            return None
        if counts[i] > floors[i] and _unpicked(member_racks[i], sticky_in, picks_sticky, seen):
            out.append(i)
    chosen = [True] * n
    for i in out:
        chosen[i] = False
    return chosen


def _unpicked(
    rack: str | None,
    members_in: Mapping[str | None, int],
    picks: Mapping[str | None, int],
    seen: Counter[str | None],
) -> bool:
    """Whether a member of `rack`, walked from the end of its pass, is not among
    the first `picks[rack]` of the rack's `members_in[rack]` members in it
    (`seen`: members of each rack walked so far)."""
    picked = picks.get(rack)
    if picked is None:
        return True  # a rack without gain: no one in it is picked
    position = members_in[rack] - 1 - seen[rack]
    seen[rack] += 1
    return position >= picked


def _rank(order: Sequence[int], count: int) -> Sequence[int]:
    """Each member's position in `order` (the identity when it is range(count))."""
    if isinstance(order, range) or list(order) == list(range(count)):
        return range(count)
    rank = [0] * count
    for position, i in enumerate(order):
        rank[i] = position
    return rank
