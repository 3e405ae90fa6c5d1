"""The uniform assignor for homogeneous groups with weighted members or racks
in play (uniform.py dispatches here; without either it runs its own tuned
code, untouched).

Priorities, strictly in this order:

1. Balance. Every partition of the subscribed topics is assigned exactly once
   and each member gets its quota (shares.py): floor or ceil of its exact
   share N * capacity / total capacity, so within one partition of it; with
   every capacity 1, base or base + 1, the guarantee of the rack-blind code.
2. Locality. Among those assignments, the number of local (member,
   partition) pairs (member rack == partition rack) is the most any of them
   has (racks.py gives that optimum and why it is reachable). Partitions of a
   rack with no members, or of no known rack, are never local: they go
   wherever quotas have room.
3. Stickiness. Among those, members keep their current partitions as far as
   1 and 2 allow: an assignment that already satisfies 1 and 2 is returned
   unchanged (the same objects), and otherwise the extra partitions go to
   members that hold them now, each member keeps its current local partitions
   up to its quota, then its current other partitions up to its quota,
   and only what no one may keep is handed out. This is a greedy rule, not a
   proven minimum of moves under 1 and 2.

Ties (which member, which partition) go by member id and by the global order
(topics by id, partitions ascending), never by the order of the spec.

The steps, once quotas are fixed:
  A. each member keeps its current partitions of its own rack, up to its quota;
  B. per rack, the members with room take the rack's partitions no one kept,
     unheld ones first (they move nothing), then held ones (each move adds a
     local pair, which 2 ranks above 3);
  C. each member with room keeps its other current partitions not taken in B;
  D. members with room, by id, take what is left in the global order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import starmap
from operator import ge, le

from ..model import EMPTY_ASSIGNMENT, Assignment
from .base import GroupAssignment, GroupSpec
from .racks import partitions_by_rack, rack_gains, rack_sizes
from .shares import choose_extras, equal_shares, shares
from .uniform import _in_order as in_order
from .uniform import _sanitize as sanitize
from .uniform import _scan as scan

#: Per topic, the partitions of each rack.
RackIndex = Mapping[str, Mapping[str, frozenset[int]]]


def assign_by_quota(
    spec: GroupSpec, topic_ids: list[str], sizes: list[int], weighted: bool, racks: bool
) -> GroupAssignment:
    """The target of a homogeneous group over `topic_ids` (sorted, with their
    non-zero `sizes`); `weighted`: use capacities; `racks`: racks are in play."""
    member_ids = list(spec.members)
    members = list(spec.members.values())
    total = sum(sizes)
    currents, counts = _valid_currents(member_ids, [m.current for m in members], topic_ids, sizes)
    if weighted:
        floors, candidates, extra = shares(total, [m.capacity for m in members])
    else:
        floors, candidates, extra = equal_shares(total, len(members))
    member_racks: list[str | None] | None = None
    index: dict[str, Mapping[str, frozenset[int]]] = {}
    gains: dict[str, int] = {}
    if racks:
        member_racks = [m.rack_id for m in members]
        for topic_id in topic_ids:
            topic = spec.topics[topic_id]
            if topic.partition_racks:
                index[topic_id] = partitions_by_rack(topic.partition_racks)
        known = {rack for rack in member_racks if rack is not None}
        rack_counts = rack_sizes((spec.topics[t] for t in index), known)
        base_local, gains = rack_gains(member_racks, floors, candidates, rack_counts)
        if sum(counts) == total and _within(counts, floors, candidates):
            best = base_local + min(extra, sum(gains.values()))
            if _local_pairs(currents, member_racks, index) == best:
                return GroupAssignment(member_ids, currents)
    elif sum(counts) == total and _within(counts, floors, candidates):
        return GroupAssignment(member_ids, currents)

    order = list(range(len(members))) if in_order(member_ids) else _id_order(member_ids)
    chosen = choose_extras(extra, order, candidates, counts, floors, member_racks, gains)
    quotas = [f + c for f, c in zip(floors, chosen, strict=True)]
    plan = _Plan(currents, quotas, topic_ids, sizes)
    if member_racks is not None:
        plan.keep_local(member_racks, index)
        plan.fill_local(order, member_racks, index)
    plan.keep_rest()
    plan.fill_rest(order)
    return GroupAssignment(member_ids, plan.result())


def _valid_currents(
    member_ids: list[str], currents: list[Assignment], topic_ids: list[str], sizes: list[int]
) -> tuple[list[Assignment], list[int]]:
    """Current targets without stale topics, partitions past the end or held
    twice (the rack-blind code's checks), and each one's size."""
    counts, holdings, stale = scan(currents, topic_ids, sizes)
    unheld = sum(map(len, starmap(frozenset.difference, holdings.values())))
    if sum(sizes) - unheld != sum(counts):
        currents = sanitize(member_ids, currents, dict(zip(topic_ids, sizes, strict=True)))
        counts, _, stale = scan(currents, topic_ids, sizes)
    if stale:
        valid = frozenset(topic_ids)
        currents = list(currents)
        for i in stale:
            currents[i] = {t: p for t, p in currents[i].items() if t in valid}
    return currents, counts


def _within(counts: list[int], floors: list[int], candidates: list[bool]) -> bool:
    """Whether every count is its floor, or floor + 1 for a candidate (with all
    partitions held, exactly K members are then at floor + 1)."""
    ceilings = list(map(int.__add__, floors, map(int, candidates)))
    return all(map(ge, counts, floors)) and all(map(le, counts, ceilings))


def _local_pairs(currents: Sequence[Assignment], member_racks: Sequence[str | None], index: RackIndex) -> int:
    local = 0
    for current, rack in zip(currents, member_racks, strict=True):
        if rack is None:
            continue
        for topic_id, partitions in current.items():
            mine = index.get(topic_id, {}).get(rack)
            if mine is not None:
                local += len(partitions & mine)
    return local


def _id_order(member_ids: list[str]) -> list[int]:
    return sorted(range(len(member_ids)), key=member_ids.__getitem__)


def first_in_order(partitions: Mapping[str, AbstractSet[int]], k: int) -> dict[str, frozenset[int]]:
    """The first `k` of `partitions` in the global order."""
    out: dict[str, frozenset[int]] = {}
    for topic_id in sorted(partitions):
        if k <= 0:
            break
        held = partitions[topic_id]
        if not held:
            continue
        if len(held) <= k:
            out[topic_id] = frozenset(held)
        else:
            out[topic_id] = frozenset(sorted(held)[:k])
        k -= len(out[topic_id])
    return out


class _Plan:
    """The target under construction: what each member has so far and its room
    left. A member that ends with exactly its current target gets that very
    object back (the caller's diff is then an identity check)."""

    def __init__(self, currents: list[Assignment], quotas: list[int], topic_ids: list[str], sizes: list[int]):
        self.currents = currents
        self.quotas = quotas
        self.topic_ids = topic_ids
        self.sizes = dict(zip(topic_ids, sizes, strict=True))
        #: What each member has so far: None while nothing is decided for it.
        self.got: list[dict[str, AbstractSet[int]] | None] = [None] * len(currents)
        self.room = list(quotas)
        #: Per topic, the pieces assigned so far (subtracted at the end, in C).
        self.pieces: dict[str, list[AbstractSet[int]]] = {t: [] for t in topic_ids}
        #: Per topic, partitions that B gave to a member other than their holder.
        self.taken: dict[str, set[int]] = {}

    def _give(self, i: int, topic_id: str, partitions: AbstractSet[int]) -> None:
        got = self.got[i]
        if got is None:
            got = self.got[i] = {}
        before = got.get(topic_id)
        got[topic_id] = partitions if before is None else frozenset(before) | partitions
        self.room[i] -= len(partitions)
        self.pieces[topic_id].append(partitions)

    def keep_local(self, member_racks: Sequence[str | None], index: RackIndex) -> None:
        """A: each member keeps its current partitions of its rack, up to its quota."""
        for i, rack in enumerate(member_racks):
            if rack is None or not self.currents[i]:
                continue
            local: dict[str, frozenset[int]] = {}
            for topic_id, partitions in self.currents[i].items():
                mine = index.get(topic_id, {}).get(rack)
                if mine is not None:
                    both = partitions & mine
                    if both:
                        local[topic_id] = both
            if sum(map(len, local.values())) > self.quotas[i]:
                local = first_in_order(local, self.quotas[i])
            for topic_id, partitions in local.items():
                self._give(i, topic_id, partitions)
            if self.got[i] is None:
                self.got[i] = {}

    def fill_local(self, order: Sequence[int], member_racks: Sequence[str | None], index: RackIndex) -> None:
        """B: per rack, its members with room (by id) take its unkept partitions,
        unheld ones first."""
        takers: dict[str, list[int]] = {}
        for i in order:
            rack = member_racks[i]
            if rack is not None and self.room[i] > 0:
                takers.setdefault(rack, []).append(i)
        if not takers:
            return
        # Per topic, its current holdings, to tell unheld partitions from held ones.
        holdings: dict[str, list[frozenset[int]]] = {}
        for current in self.currents:
            for topic_id, partitions in current.items():
                holdings.setdefault(topic_id, []).append(partitions)
        for rack in sorted(takers):
            unheld: list[tuple[str, list[int]]] = []
            others: list[tuple[str, list[int]]] = []
            for topic_id in self.topic_ids:
                mine = index.get(topic_id, {}).get(rack)
                if mine is None:
                    continue
                rest = mine.difference(*self.pieces[topic_id])
                if rest:
                    free = rest.difference(*holdings.get(topic_id, ()))
                    unheld.append((topic_id, sorted(free)))
                    others.append((topic_id, sorted(rest - free)))
            self._hand_out(takers[rack], unheld + others, mark_taken=True)

    def keep_rest(self) -> None:
        """C: each member with room keeps its other current partitions (those
        B did not give away), up to its quota."""
        for i, current in enumerate(self.currents):
            room = self.room[i]
            if not current or room <= 0:
                continue
            got = self.got[i]
            if got is None and not self.taken:
                # Nothing decided yet: the whole target stays if it fits.
                size = sum(map(len, current.values()))
                if size <= room:
                    self.got[i] = dict(current)
                    self.room[i] -= size
                    for topic_id, partitions in current.items():
                        self.pieces[topic_id].append(partitions)
                    continue
            left: dict[str, AbstractSet[int]] = {}
            for topic_id, partitions in current.items():
                rest = partitions
                if got is not None and topic_id in got:
                    rest = rest - got[topic_id]
                taken = self.taken.get(topic_id)
                if taken:
                    rest = rest - taken
                if rest:
                    left[topic_id] = rest
            for topic_id, partitions in first_in_order(left, room).items():
                self._give(i, topic_id, partitions)

    def fill_rest(self, order: Sequence[int]) -> None:
        """D: members with room, by id, take the unassigned partitions in the global order."""
        takers = [i for i in order if self.room[i] > 0]
        if not takers:
            return
        pool: list[tuple[str, Sequence[int]]] = []
        for topic_id in self.topic_ids:
            size = self.sizes[topic_id]
            pieces = self.pieces[topic_id]
            if not pieces:
                pool.append((topic_id, range(size)))
            elif sum(map(len, pieces)) < size:
                pool.append((topic_id, sorted(frozenset(range(size)).difference(*pieces))))
        self._hand_out(takers, pool, mark_taken=False)

    def _hand_out(
        self, takers: list[int], pool: Sequence[tuple[str, Sequence[int]]], mark_taken: bool
    ) -> None:
        """Each taker in turn takes the next partitions of `pool` up to its room."""
        segment = pos = 0
        for i in takers:
            need = self.room[i]
            while need and segment < len(pool):
                topic_id, free = pool[segment]
                take = min(need, len(free) - pos)
                added = frozenset(free[pos : pos + take])
                if added:
                    self._give(i, topic_id, added)
                    if mark_taken:
                        self.taken.setdefault(topic_id, set()).update(added)
                need -= take
                pos += take
                if pos == len(free):
                    segment, pos = segment + 1, 0
            if segment == len(pool):
                return

    def result(self) -> list[Assignment]:
        out: list[Assignment] = []
        for current, got in zip(self.currents, self.got, strict=True):
            if got is None:
                out.append(EMPTY_ASSIGNMENT)
            elif got.keys() == current.keys() and all(
                got[t] is current[t] or got[t] == current[t] for t in got
            ):
                out.append(current)
            else:
                out.append({t: p if isinstance(p, frozenset) else frozenset(p) for t, p in got.items() if p})
        return out
