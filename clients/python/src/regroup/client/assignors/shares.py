"""Quotas weighted by capacity, rack locality, and who gets the extra partition:
the rules the built-in `uniform` and `range` assignors share when capacities or
racks are in play (docs/assignment.md, "Racks" and "Weights"), written plainly.

Quotas. Of N partitions, member i with capacity c_i (sum C) has the exact
share N * c_i / C. Its quota is the floor of it, or the floor + 1 when the share
is fractional; exactly K = N - sum of the floors members get the + 1, so every
member is within one partition of its exact share. With every capacity 1 this
is base or base + 1, with N mod M members at base + 1.

Locality. A (member, partition) pair is local when the member's rack is the
partition's rack. Given the floors F_r of the members of rack r, its count c_r
of members with a fractional share and its n_r partitions, rack r has at least
min(n_r, F_r) local pairs in the best assignment with these floors, and each
extra partition given to one of its members adds one more while the rack has
partitions left over: g_r = min(c_r, max(0, n_r - F_r)). The most local pairs
any assignment with these quotas has is sum_r min(n_r, F_r) + min(K, sum_r g_r).

Who gets the extra partition: the members with a fractional share in member
order (member id for uniform, range order for range), those holding more than
their floor first (they keep it: stickiness), each while its rack still gains
a local pair by it; then the same walk again without looking at racks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def racks_in_play(member_racks: Sequence[str | None], partition_racks: Sequence[Sequence[str]]) -> bool:
    """Whether racks change anything: some member has a rack and some topic has partition racks."""
    return any(rack is not None for rack in member_racks) and any(racks for racks in partition_racks)


def shares(total: int, capacities: Mapping[str, int]) -> tuple[dict[str, int], set[str]]:
    """Each member's floor of its exact share of `total`, and the members whose
    share is fractional (who may get one more). A capacity below 1 counts as 1,
    as on the server (the heartbeat only accepts 1 to 1,000)."""
    weights = {m: max(1, c) for m, c in capacities.items()}
    weight = sum(weights.values())
    floors = {m: total * c // weight for m, c in weights.items()}
    fractional = {m for m, c in weights.items() if total * c % weight != 0}
    return floors, fractional


def rack_gains(
    member_racks: Mapping[str, str | None],
    floors: Mapping[str, int],
    fractional: set[str],
    sizes: Mapping[str, int],
) -> tuple[int, dict[str, int]]:
    """The local pairs the floors give at best, sum_r min(n_r, F_r), and per rack
    g_r, how many extra partitions given to its members each add a local pair.
    `sizes`: n_r, the number of partitions of each rack."""
    floor_sum: dict[str, int] = {}
    fractional_count: dict[str, int] = {}
    for member_id, rack in member_racks.items():
        if rack is None or rack not in sizes:
            continue  # no partition can be local to this member
        floor_sum[rack] = floor_sum.get(rack, 0) + floors[member_id]
        fractional_count[rack] = fractional_count.get(rack, 0) + (member_id in fractional)
    base = sum(min(sizes[rack], f) for rack, f in floor_sum.items())
    gains = {rack: min(fractional_count[rack], max(0, sizes[rack] - f)) for rack, f in floor_sum.items()}
    return base, gains


def best_local(
    member_racks: Mapping[str, str | None],
    floors: Mapping[str, int],
    fractional: set[str],
    extra: int,
    sizes: Mapping[str, int],
) -> int:
    """The most local pairs any assignment with these quotas has."""
    base, gains = rack_gains(member_racks, floors, fractional, sizes)
    return base + min(extra, sum(gains.values()))


def choose_extras(
    order: Sequence[str],
    fractional: set[str],
    extra: int,
    sticky: set[str],
    member_racks: Mapping[str, str | None],
    gains: Mapping[str, int],
) -> set[str]:
    """The `extra` members that get their floor + 1. `order`: every member in
    member order; `sticky`: the members holding more than their floor now;
    `gains`: g_r per rack (empty when racks are not in play)."""
    candidates = [m for m in order if m in fractional]
    walk = [m for m in candidates if m in sticky] + [m for m in candidates if m not in sticky]
    chosen: set[str] = set()
    gain_left = dict(gains)
    # First where it adds a local pair (locality ranks above stickiness) ...
    for m in walk:
        rack = member_racks.get(m)
        if len(chosen) < extra and rack is not None and gain_left.get(rack, 0) > 0:
            chosen.add(m)
            gain_left[rack] -= 1
    # ... then to anyone, in the same order.
    for m in walk:
        if len(chosen) < extra:
            chosen.add(m)
    return chosen
