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
pair (up to each rack's gain, see racks.py: locality comes before
stickiness), then members that hold more than their floor now (they keep it:
stickiness), then the rest; each step by member id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def shares(total: int, capacities: Sequence[int]) -> tuple[list[int], list[bool], int]:
    """Each member's floor, whether its share is fractional (it may get one
    more), and K, how many members get one more."""
    weight = sum(capacities)
    floors = [total * c // weight for c in capacities]
    candidates = [total * c % weight != 0 for c in capacities]
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
    holds now; `gains`: per rack, how many extras add a local pair."""
    chosen = [False] * len(candidates)
    left = extra
    if left and gains and member_racks is not None:
        gain_left = dict(gains)
        for sticky_pass in (True, False):
            for i in order:
                rack = member_racks[i]
                if (
                    candidates[i]
                    and not chosen[i]
                    and (counts[i] > floors[i]) == sticky_pass
                    and rack is not None
                    and gain_left.get(rack, 0) > 0
                ):
                    chosen[i] = True
                    gain_left[rack] -= 1
                    left -= 1
                    if not left:
                        return chosen
    for sticky_pass in (True, False):
        if not left:
            break
        for i in order:
            if candidates[i] and not chosen[i] and (counts[i] > floors[i]) == sticky_pass:
                chosen[i] = True
                left -= 1
                if not left:
                    break
    return chosen
