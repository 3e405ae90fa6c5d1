"""The uniform assignor for homogeneous groups with weighted members or racks
in play (uniform.py dispatches here; without either it runs its own tuned
code).

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
(topics by id, partitions ascending), never by the order of the spec. Where
members with room take partitions (B and D), the one with the most room goes
first, then by member id: blocks of one size then follow each other, so that
runs of them share their frozensets (blocks.py; a weighted fresh assignment
at a partition or two per member spent half its time building them).

The steps, once quotas are fixed:
  A. each member keeps its current partitions of its own rack, up to its quota;
  B. per rack, the members with room (most first, then by id) take the rack's
     partitions no one kept:
     unheld ones and ones their holder gave up in A first (they move anyway),
     then ones held by members of other racks (each such move adds a local
     pair, which 2 ranks above 3);
  C. each member with room keeps its other current partitions not taken in B;
  D. members with room, most first, then by id, take what is left in the
     global order.

Speed. Work is per member only where something happens to it: a member that
keeps its whole current target costs a count (and, with racks, one subset
test per topic it holds) and is returned as the very same object; the pools
of B and D are built only over topics where something is free, and a run of
empty members with equal room takes its blocks in one comprehension.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import accumulate, chain, compress, groupby, islice, pairwise, repeat, starmap
from operator import add, and_, eq, gt, is_not, ne, not_, sub
from typing import Any, cast

from ..model import EMPTY_ASSIGNMENT, Assignment
from .base import GroupAssignment, GroupSpec, TargetSummary
from .blocks import cut_runs
from .indices import indices
from .racks import ordered_by_rack, partitions_by_rack, rack_gains
from .shares import choose_extras, equal_shares, shares
from .uniform import _in_order as in_order
from .uniform import _sanitize as sanitize
from .uniform import _scan as scan

#: Per rack, per topic, the rack's partitions of the topic.
LocalIndex = Mapping[str, Mapping[str, frozenset[int]]]
#: The same, as ascending tuples.
OrderedIndex = Mapping[str, Mapping[str, tuple[int, ...]]]
#: Segments of partitions to hand out, in order: (topic id, partitions
#: ascending, and the same as a set when one exists, to record whole segments
#: as taken without copying them).
Pool = list[tuple[str, Sequence[int], AbstractSet[int] | None]]


def assign_by_quota(
    spec: GroupSpec, topic_ids: list[str], sizes: list[int], weighted: bool, racks: bool
) -> GroupAssignment:
    """The target of a homogeneous group over `topic_ids` (sorted, with their
    non-zero `sizes`); `weighted`: use capacities; `racks`: racks are in play."""
    member_ids = list(spec.members)
    members = list(spec.members.values())
    total = sum(sizes)
    currents = [m.current for m in members]
    unheld: dict[str, AbstractSet[int]] | None = None  # None: nothing is held
    counts = [0] * len(members)
    member_racks: list[str | None] | None = None
    local_of: dict[str, dict[str, frozenset[int]]] = {}
    ordered_of: dict[str, dict[str, tuple[int, ...]]] = {}
    layouts: list[tuple[frozenset[str], list[str]]] = []
    summary = _trusted_summary(spec, total, racks)
    held = summary is not None or any(currents)
    counted: Mapping[str | None, int] = {}  # members per rack
    if racks:
        member_racks = [m.rack_id for m in members]
        if held and not weighted:
            # Equal shares with something held: racks counted once, for the
            # gains and the choice of extras, and their set read from the count.
            counted = Counter(member_racks)
        local_of, ordered_of, layouts = _local_index(
            spec, topic_ids, member_racks, frozenset(counted) if counted else None
        )
    local_counts: list[int] = []
    if summary is not None:
        # The targets are one computation's over these topics, and hold every
        # partition: nothing is unheld, and nothing needs reading.
        counts, unheld = list(summary.sizes), {}
        local_counts = list(summary.local_counts) if racks and summary.local_counts is not None else []
    elif held:
        currents, counts, unheld, local_counts = _valid_currents(
            member_ids, currents, topic_ids, sizes, member_racks, local_of
        )
    if weighted:
        floors, candidates, extra = shares(total, [m.capacity for m in members])
    else:
        floors, candidates, extra = equal_shares(total, len(members))
    balanced = unheld is not None and not unheld and _within(counts, floors, candidates)

    gains: dict[str, int] = {}
    groups: dict[str, list[int]] = {}
    if member_racks is not None:
        rack_counts = {r: sum(map(len, by_topic.values())) for r, by_topic in local_of.items()}
        if unheld is None or weighted:
            # Members filed by rack once: B's takers when nothing is held, and
            # the weighted gains' sums (a Counter of (rack, floor, candidate)
            # triples cost 1.6 ms at 10,000 members). Equal shares with
            # something held count racks with a Counter (one pass, no lists).
            groups = _by_rack(member_racks, local_of)
            counted = {rack: len(found) for rack, found in groups.items()}
        base_local, gains = rack_gains(member_racks, floors, candidates, rack_counts, groups or None, counted)
        if balanced and sum(local_counts) == base_local + min(extra, sum(gains.values())):
            return GroupAssignment(member_ids, currents, TargetSummary(counts, local_counts))
    elif balanced:
        return GroupAssignment(member_ids, currents, TargetSummary(counts))

    # A range when members come in id order (the coordinator's): read in place.
    in_id_order = spec.members_in_id_order or in_order(member_ids)
    order: Sequence[int] = range(len(members)) if in_id_order else _id_order(member_ids)
    if unheld is None and member_racks is None and isinstance(order, range):
        # Nothing held, no racks, members in id order: the first K candidates
        # get the extra one (choose_extras with nothing to prefer), and each
        # member takes the next block of the global order, its quota long,
        # straight into the output (D without takers, rooms or stores).
        quotas = _first_extras(floors, candidates, extra)
        return GroupAssignment(member_ids, _fresh_blocks(topic_ids, sizes, quotas), TargetSummary(quotas))
    if extra:
        chosen = choose_extras(
            extra, order, candidates, counts, floors, member_racks, gains, groups or None, counted or None
        )
        quotas = list(map(add, floors, chosen))
    else:
        quotas = floors  # every share whole: nobody gets one more
    build = _Build(currents, counts, quotas, order, topic_ids, sizes, unheld)
    locals_after: list[int] | None = None
    if member_racks is not None:
        build.keep_local(member_racks, local_of, local_counts)
        build.fill_local(member_racks, local_of, ordered_of, layouts, groups, rack_counts)
        # What each member holds of its rack is final here: A kept local
        # partitions and B handed them out (each member's quota less its room);
        # C keeps only partitions of other racks, and D finds none of a rack
        # whose members still have room (B took them all: unheld, released, and
        # those held by members of other racks). The tests recount it.
        locals_after = list(map(sub, quotas, build.room))
    build.keep_rest()
    build.fill_rest()
    # Balance: every partition is handed out and no one exceeds its quota, so
    # everyone ends at it.
    return GroupAssignment(member_ids, build.out, TargetSummary(quotas, locals_after))


def _trusted_summary(spec: GroupSpec, total: int, racks: bool) -> TargetSummary | None:
    """The spec's summary of the current targets, when it can stand for reading
    them: it covers every member (with their local counts when racks are in
    play) and the targets hold every partition. Targets of a member that left
    leave partitions unheld, and which ones only the targets tell."""
    summary = spec.current_summary
    if (
        summary is None
        or len(summary.sizes) != len(spec.members)
        or (racks and summary.local_counts is None)
        or sum(summary.sizes) != total
    ):
        return None
    return summary


def _first_extras(floors: list[int], candidates: list[bool], extra: int) -> list[int]:
    """Quotas when the first `extra` candidates in member order get floor + 1."""
    if candidates.count(True) == len(candidates):  # every share fractional: C passes
        return list(map(add, floors, chain(repeat(1, extra), repeat(0, len(floors) - extra))))
    quotas = list(floors)
    for i in islice(compress(indices(len(floors)), candidates), extra):
        quotas[i] += 1
    return quotas


def most_room_first(takers: list[int], room: Sequence[int]) -> list[int]:
    """`takers` (in member order) ordered by room, most first, member order kept
    among equal room: the order in which B and D hand out, so that blocks of
    one size follow each other and runs of them share their frozensets
    (blocks.py). Rooms take few values (floor or floor + 1 of a few
    capacities), so it is one C pass per value rather than a sort with a key
    (1 - 2 ms at 10,000 takers)."""
    if len(takers) < 2:
        return takers
    rooms = list(map(room.__getitem__, takers))
    if rooms.count(rooms[0]) == len(rooms):  # equal room: member order
        return takers
    values = set(rooms)
    if len(values) > 8:
        return sorted(takers, key=room.__getitem__, reverse=True)  # stable: member order kept
    out: list[int] = []
    for value in sorted(values, reverse=True):
        out += compress(takers, map(value.__eq__, rooms))
    return out


def _with_room(members: list[int], room: Sequence[int]) -> list[int]:
    """`most_room_first` of those of `members` (in member order) with room:
    one C pass per value of room (they are few), the members without room
    left out."""
    rooms = list(map(room.__getitem__, members))
    values = {value for value in set(rooms) if value > 0}
    if len(values) > 8:
        with_room = compress(members, map(gt, rooms, repeat(0)))
        return sorted(with_room, key=room.__getitem__, reverse=True)  # stable: member order kept
    if len(values) == 1 and rooms.count(rooms[0]) == len(rooms):
        return members  # every one has the same room
    out: list[int] = []
    for value in sorted(values, reverse=True):
        out += compress(members, map(value.__eq__, rooms))
    return out


def _fresh_blocks(topic_ids: list[str], sizes: list[int], quotas: list[int]) -> list[Assignment]:
    """Nothing held, no racks: members by quota, most first, then in member
    order, take consecutive blocks of the global order (D's order). Blocks are
    cut run by run, one run per quota (blocks.py), and put back in member
    order by one C pass that takes, for each member, the next block of its
    quota's run."""
    ints = tuple(range(max(sizes)))
    wholes = {n: ints[:n] for n in set(sizes)}
    # Quotas take few values (floor or floor + 1 of each capacity's share): a
    # C count per value (by identity, small ints) is half of a Counter's pass.
    runs = sorted(((q, quotas.count(q)) for q in set(quotas)), reverse=True)
    blocks, _ = cut_runs(topic_ids, list(map(wholes.__getitem__, sizes)), runs)
    iterators: dict[int, Iterator[Assignment]] = {}
    start = 0
    for quota, count in runs:
        iterators[quota] = iter(blocks[start : start + count])
        start += count
    return list(map(next, map(iterators.__getitem__, quotas)))


def _valid_currents(
    member_ids: list[str],
    currents: list[Assignment],
    topic_ids: list[str],
    sizes: list[int],
    member_racks: list[str | None] | None,
    local_of: LocalIndex,
) -> tuple[list[Assignment], list[int], dict[str, AbstractSet[int]], list[int]]:
    """Current targets without stale topics, partitions past the end or held
    twice (the rack-blind code's checks), each one's size, per topic its
    unheld partitions (topics with none left out), and, with racks, each
    one's partitions of its member's rack (counted in the same pass)."""

    def counted(
        currents: list[Assignment],
    ) -> tuple[list[int], dict[str, list[frozenset[int]]], list[int], list[int]]:
        if member_racks is None:
            return (*scan(currents, topic_ids, sizes), [])
        return _scan_local(currents, topic_ids, sizes, member_racks, local_of)

    counts, holdings, stale, local_counts = counted(currents)
    rest = list(starmap(frozenset.difference, holdings.values()))
    if sum(sizes) - sum(map(len, rest)) != sum(counts):
        currents = sanitize(member_ids, currents, dict(zip(topic_ids, sizes, strict=True)))
        counts, holdings, stale, local_counts = counted(currents)
        rest = list(starmap(frozenset.difference, holdings.values()))
    if stale:
        valid = frozenset(topic_ids)
        currents = list(currents)
        for i in stale:
            currents[i] = {t: p for t, p in currents[i].items() if t in valid}
    return currents, counts, {t: r for t, r in zip(topic_ids, rest, strict=True) if r}, local_counts


_NO_LOCAL: Mapping[str, frozenset[int]] = {}
_RackIndexGet = Callable[[str | None, Mapping[str, frozenset[int]]], Mapping[str, frozenset[int]]]


def _scan_local(
    currents: list[Assignment],
    topic_ids: list[str],
    sizes: list[int],
    member_racks: list[str | None],
    local_of: LocalIndex,
) -> tuple[list[int], dict[str, list[frozenset[int]]], list[int], list[int]]:
    """uniform.py's `_scan` that also counts each member's partitions of its own
    rack in the same loop: a second pass per member and topic cost 2.2 ms at
    10,000 members, this one 1.3 ms more than the scan alone. Stale topics
    count towards neither. A twin of `_scan`'s loop on purpose: a branch for
    racks inside that loop would cost the rack-blind code on every entry."""
    ints = tuple(range(max(sizes)))
    everything = {n: frozenset(ints[:n]) for n in set(sizes)}
    holdings: dict[str, list[frozenset[int]]] = dict(
        zip(topic_ids, map(list, zip(map(everything.__getitem__, sizes))), strict=True)
    )
    counts: list[int] = []
    local_counts: list[int] = []
    add_count = counts.append
    add_local = local_counts.append
    any_stale = False
    # A member without a rack (None) finds nothing local: `get` with a default.
    rack_index = cast(_RackIndexGet, local_of.get)
    for current, mine in zip(currents, map(rack_index, member_racks, repeat(_NO_LOCAL)), strict=True):
        count = local = 0
        for topic_id in current:
            partitions = current[topic_id]
            try:
                holdings[topic_id].append(partitions)
            except KeyError:
                any_stale = True
                continue
            size = len(partitions)
            count += size
            found = mine.get(topic_id)
            if found is not None:
                local += size if partitions <= found else len(partitions & found)
        add_count(count)
        add_local(local)
    stale = (
        [i for i, current in enumerate(currents) if not holdings.keys() >= current.keys()]
        if any_stale
        else []
    )
    return counts, holdings, stale, local_counts


def _within(counts: list[int], floors: list[int], candidates: list[bool]) -> bool:
    """Whether every count is its floor, or floor + 1 for a candidate (with all
    partitions held, exactly K members are then at floor + 1)."""
    if floors.count(floors[0]) == len(floors) and candidates.count(candidates[0]) == len(candidates):
        # Equal shares: counts of small ints compare by identity in C, as uniform.py does.
        base = floors[0]
        return counts.count(base) + (counts.count(base + 1) if candidates[0] else 0) == len(counts)
    # Each count's distance from its floor, in one pass; then C counts of small
    # ints (by identity) instead of comparing every count twice (1 ms -> 0.4 at
    # 10,000 members).
    above = list(map(sub, counts, floors))
    if above.count(0) + above.count(1) != len(above):
        return False
    # One above its floor is allowed only to a candidate (all of them, usually).
    return candidates.count(True) == len(candidates) or not any(
        compress(map((1).__eq__, above), map(not_, candidates))
    )


def _local_index(
    spec: GroupSpec,
    topic_ids: list[str],
    member_racks: list[str | None],
    wanted: frozenset[str | None] | None = None,
) -> tuple[
    dict[str, dict[str, frozenset[int]]],
    dict[str, dict[str, tuple[int, ...]]],
    list[tuple[frozenset[str], list[str]]],
]:
    """Per member rack, per topic, that rack's partitions of the topic, as sets
    and as ascending tuples (both memoised per layout); and the topics by
    layout, with the layout's racks. Topics are grouped by layout first (topics
    created together share one), so that the per-rack entries of a layout's
    topics are written by C calls. `wanted`: the set of `member_racks`, where
    the caller has it."""
    topics = spec.topics
    all_layouts = [topics[t].partition_racks for t in topic_ids]
    if wanted is None:
        wanted = frozenset(member_racks)
    # The same topics, layouts and member racks as a recent computation (a
    # group recomputing on a join or leave): its index, found by list
    # comparisons that are identity checks per element (C), where building it
    # again cost 0.3 - 0.4 ms over 1,000 topics. Equal inputs give an equal
    # index, and nobody changes one (the assignor only reads it).
    for cached_topics, cached_layouts, cached_racks, index in _index_cache:
        if cached_racks == wanted and cached_layouts == all_layouts and cached_topics == topic_ids:
            return index
    own_topic_ids = list(topic_ids)  # kept with the index: a copy no caller holds
    index = _build_local_index(own_topic_ids, all_layouts, wanted)
    _remember_index((own_topic_ids, all_layouts, wanted, index))
    return index


#: A computed rack index: the topics, their layouts, the member racks, and the index.
_IndexEntry = tuple[
    list[str],
    list[tuple[str, ...]],
    frozenset[str | None],
    tuple[
        dict[str, dict[str, frozenset[int]]],
        dict[str, dict[str, tuple[int, ...]]],
        list[tuple[frozenset[str], list[str]]],
    ],
]
#: The last few indexes, newest first: a tuple replaced whole (never changed in
#: place), so a reader in another thread always iterates a consistent one.
_index_cache: tuple[_IndexEntry, ...] = ()
_INDEX_CACHE_SIZE = 8


def _remember_index(entry: _IndexEntry) -> None:
    global _index_cache
    _index_cache = (entry, *_index_cache[: _INDEX_CACHE_SIZE - 1])


def _build_local_index(
    topic_ids: list[str], all_layouts: list[tuple[str, ...]], wanted: frozenset[str | None]
) -> tuple[
    dict[str, dict[str, frozenset[int]]],
    dict[str, dict[str, tuple[int, ...]]],
    list[tuple[frozenset[str], list[str]]],
]:
    """`_local_index`, built."""
    by_layout: dict[tuple[str, ...], list[str]] = {}
    if all_layouts[0] and all_layouts.count(all_layouts[0]) == len(all_layouts):
        by_layout[all_layouts[0]] = topic_ids  # one layout (a C count, by identity first)
    else:
        for topic_id, layout in zip(topic_ids, all_layouts, strict=True):
            if layout:
                found = by_layout.get(layout)
                if found is None:
                    by_layout[layout] = [topic_id]
                else:
                    found.append(topic_id)
    local_of: dict[str, dict[str, frozenset[int]]] = {}
    ordered_of: dict[str, dict[str, tuple[int, ...]]] = {}
    layouts: list[tuple[frozenset[str], list[str]]] = []
    for layout, same in by_layout.items():
        ordered = ordered_by_rack(layout)
        grouped = partitions_by_rack(layout)
        layouts.append((frozenset(grouped), same))
        for rack, partitions in grouped.items():
            if rack in wanted:
                local_of.setdefault(rack, {}).update(dict.fromkeys(same, partitions))
                ordered_of.setdefault(rack, {}).update(dict.fromkeys(same, ordered[rack]))
    return local_of, ordered_of, layouts


_NONE: frozenset[int] = frozenset()
#: A memo's "not computed yet" (None is a value there).
_UNSEEN: Any = object()


def _by_rack(
    member_racks: Sequence[str | None], local_of: LocalIndex, among: Sequence[int] | None = None
) -> dict[str, list[int]]:
    """The indices of each rack's members (racks with partitions), in the
    order given: one C pass filing each member under its rack (members of
    other racks, or none, to a list thrown away). `among`: the members to
    file, `member_racks` being their racks (all members in spec order when
    None). Shared by the rack gains (F_r and candidates summed per rack) and
    B's takers."""
    groups: dict[str | None, list[int]] = {rack: [] for rack in local_of}
    elsewhere: list[int] = []
    filed = indices(len(member_racks)) if among is None else among
    deque(map(list.append, map(groups.get, member_racks, repeat(elsewhere)), filed), maxlen=0)
    return {rack: found for rack, found in groups.items() if rack is not None}


def _id_order(member_ids: list[str]) -> list[int]:
    return sorted(range(len(member_ids)), key=member_ids.__getitem__)


def first_in_order(partitions: Mapping[str, AbstractSet[int]], k: int) -> dict[str, frozenset[int]]:
    """The first `k` of `partitions` in the global order: the topics whose
    running count stays within `k` whole (found by C passes and a bisection;
    a member cut by one partition keeps all but one topic as it was), then
    the first partitions of the next one."""
    if k <= 0:
        return {}
    if len(partitions) <= 8:  # few topics: one Python pass is cheaper than the set-up
        out: dict[str, frozenset[int]] = {}
        for topic_id in sorted(partitions):
            held_now = partitions[topic_id]
            if held_now:
                out[topic_id] = frozenset(held_now) if len(held_now) <= k else frozenset(sorted(held_now)[:k])
                k -= len(out[topic_id])
                if k <= 0:
                    break
        return out
    topic_ids = sorted(partitions)
    held = list(map(partitions.__getitem__, topic_ids))
    lengths = list(map(len, held))
    if 0 in lengths:  # empty entries are left out: drop them first
        topic_ids = list(compress(topic_ids, lengths))
        held = list(compress(held, lengths))
        lengths = list(compress(lengths, lengths))
    ends = list(accumulate(lengths))
    cut = bisect_left(ends, k)  # topics before it are kept whole
    out = dict(zip(topic_ids[:cut], map(frozenset, held[:cut]), strict=True))
    if cut < len(topic_ids):
        take = k - (ends[cut - 1] if cut else 0)
        last = held[cut]
        out[topic_ids[cut]] = frozenset(last) if len(last) <= take else frozenset(sorted(last)[:take])
    return out


def _all_but_last(
    partitions: Assignment, drop: int
) -> tuple[dict[str, frozenset[int]], list[tuple[str, Iterable[int]]]] | None:
    """`first_in_order` when it leaves out only the last `drop` partitions in
    the global order and they are in the last topic or two (a member cut by a
    partition or two, the usual cut after a join), and what it leaves out, per
    topic: found by C passes for the largest topic ids, where sorting every
    topic took most of the time at hundreds of topics per member. None when
    more topics would go."""
    out = dict(partitions)  # frozensets already (a copy made each by map(frozenset) cost 40%)
    left_out: list[tuple[str, Iterable[int]]] = []
    for _ in range(2):
        if drop <= 0:
            return out, left_out
        last = max(out)
        held = out[last]
        if len(held) <= drop:
            del out[last]
            left_out.append((last, held))
            drop -= len(held)
        else:
            ordered = sorted(held)
            out[last] = frozenset(ordered[: len(held) - drop])
            left_out.append((last, ordered[len(held) - drop :]))
            drop = 0
    return (out, left_out) if drop <= 0 else None


#: Topics from which counting a rack's partitions held elsewhere by a pass
#: over the members is cheaper than walking the topics to find them.
_MANY_TOPICS = 64


class _OthersByTopic:
    """What members hold of racks other than their own (A's pending parts),
    per topic: the topics in order, and each one's partitions (their union,
    made when first asked for and kept for the next rack)."""

    def __init__(self, pending: Iterable[Assignment]) -> None:
        self._pieces: dict[str, list[AbstractSet[int]]] = {}
        for other in pending:
            for topic_id, held_now in other.items():
                self._pieces.setdefault(topic_id, []).append(held_now)
        self.topic_ids = sorted(self._pieces)
        self._unions: dict[str, frozenset[int]] = {}

    def of_each(self) -> Iterator[frozenset[int]]:
        """Each topic's partitions, in `topic_ids` order, lazily."""
        for topic_id in self.topic_ids:
            found = self._unions.get(topic_id)
            if found is None:
                found = self._unions[topic_id] = frozenset().union(*self._pieces[topic_id])
            yield found


def _segments_up_to(topic_ids: list[str], found: Iterable[AbstractSet[int]], need: int) -> Pool:
    """The non-empty sets of `found` (aligned with `topic_ids`) as pool
    segments, in order, until they hold `need` partitions or more."""
    pool: Pool = []
    for topic_id, partitions in zip(topic_ids, found, strict=True):
        if partitions:
            pool.append((topic_id, sorted(partitions), None))
            need -= len(partitions)
            if need <= 0:
                break
    return pool


def _count(assignment: Mapping[str, AbstractSet[int]]) -> int:
    return sum(map(len, assignment.values()))


class _Build:
    """The target under construction. `out[i]` is member i's target so far
    (its current one until something changes) and `room[i]` what it may still
    take; partitions given up go to `released`, partitions B hands out to
    `taken` (per topic)."""

    def __init__(
        self,
        currents: list[Assignment],
        counts: list[int],
        quotas: list[int],
        order: Sequence[int],
        topic_ids: list[str],
        sizes: list[int],
        unheld: Mapping[str, AbstractSet[int]] | None,
    ) -> None:
        self.currents = currents
        self.quotas = quotas
        #: Each member's current partitions (with stale ones left out).
        self.counts = counts
        self.order = order
        self.topic_ids = topic_ids
        self.sizes = dict(zip(topic_ids, sizes, strict=True))
        #: None: nothing was held, every partition is free.
        self.unheld = unheld
        self.out: list[Assignment] = list(currents)
        #: Room left if each member kept its whole current target (with
        #: nothing held, its quota: a copy, not a pass subtracting zeros).
        self.room = list(quotas) if unheld is None else list(map(sub, quotas, counts))
        self.released: dict[str, set[int]] = {}
        #: What B handed out, one mapping (topic -> partitions) per handout
        #: (subtracted in C and D, in C); written in C per handout.
        self.taken: list[dict[str, AbstractSet[int]]] = []
        #: The same by topic, gathered when first asked for (after B).
        self.taken_by_topic: dict[str, list[AbstractSet[int]]] = {}
        #: frozenset({p}) for each partition number p, made once when needed.
        self.singles: list[frozenset[int]] | None = None
        #: Members whose other (non-local) partitions wait for C, with them.
        self.pending: dict[int, Assignment] = {}
        #: What A left a pending member when it kept all its local partitions
        #: (its current target is that and its pending part, whole).
        self.split: dict[int, Assignment] = {}
        #: With nothing held and racks: the only topics where D may find partitions.
        self.leftovers: set[str] | None = None
        #: Each member's current partitions of its own rack (A's input, with racks).
        self.local_counts: Sequence[int] = ()

    def _keep_first(self, current: Assignment, k: int) -> dict[str, frozenset[int]]:
        """`first_in_order(current, k)`, the rest given up. A cut by a partition
        or two gives up what it cut, where `_release` compares every topic."""
        if k > 0 and all(current.values()):
            cut = _all_but_last(current, sum(map(len, current.values())) - k)
            if cut is not None:
                kept, left_out = cut
                for topic_id, partitions in left_out:
                    self.released.setdefault(topic_id, set()).update(partitions)
                return kept
        kept = first_in_order(current, k)
        self._release(current, kept)
        return kept

    def _release(self, current: Mapping[str, AbstractSet[int]], kept: Mapping[str, AbstractSet[int]]) -> None:
        # Topics kept whole (the same object) are skipped by C passes: a member
        # cut by a partition or two changes one topic of dozens.
        for topic_id in compress(current, map(is_not, map(kept.get, current), current.values())):
            partitions = current[topic_id]
            mine = kept.get(topic_id)
            rest = partitions - mine if mine is not None else partitions
            if rest:
                self.released.setdefault(topic_id, set()).update(rest)

    def keep_local(
        self, member_racks: Sequence[str | None], local_of: LocalIndex, local_counts: list[int]
    ) -> None:
        """A: each member keeps its current partitions of its rack, up to its quota;
        the others wait for C."""
        if not local_counts:
            return  # nothing is held
        self.local_counts = local_counts
        # Only members with a partition of another rack (or none) or above their
        # quota have anything to do here, found by C passes: the others keep
        # their target as it is (a Python pass over 10,000 members cost 1.4 ms).
        counts = self.counts
        every = indices(len(counts))
        work = set(compress(every, map(ne, local_counts, counts)))
        work.update(compress(every, map(gt, counts, self.quotas)))
        for i in sorted(work):
            current = self.currents[i]
            if not current:
                continue
            rack = member_racks[i]
            quota = self.quotas[i]
            if rack is None or not local_counts[i]:
                self.pending[i] = current
                self.out[i] = self.split[i] = EMPTY_ASSIGNMENT
                self.room[i] = quota
                continue
            count = quota - self.room[i]
            if local_counts[i] == count:  # all local
                if count <= quota:
                    continue
                kept = self._keep_first(current, quota)
                self.out[i] = kept
                self.room[i] = 0
                continue
            mine = local_of[rack]
            # Per topic, its local and other partitions, by C passes over the topics.
            values = list(current.values())
            boths = list(map(and_, values, map(mine.get, current, repeat(_NONE))))
            rests = list(map(sub, values, boths))
            local: dict[str, frozenset[int]] = dict(compress(zip(current, boths, strict=True), boths))
            other: dict[str, frozenset[int]] = dict(compress(zip(current, rests, strict=True), rests))
            if local_counts[i] > quota:
                kept = self._keep_first(local, quota)
                local = kept
            else:
                self.split[i] = local  # current is local and other, whole
            self.out[i] = local
            self.room[i] = quota - _count(local)
            self.pending[i] = other

    def fill_local(
        self,
        member_racks: Sequence[str | None],
        local_of: LocalIndex,
        ordered_of: OrderedIndex,
        layouts: list[tuple[frozenset[str], list[str]]],
        groups: Mapping[str, list[int]],
        rack_counts: Mapping[str, int],
    ) -> None:
        """B: per rack, its members with room (most first, then by id) take its
        partitions no one kept: unheld or given up ones first (they move
        anyway), then those held by members of other racks. `groups`: the
        members of each rack, where assign_by_quota filed them; `rack_counts`:
        each rack's partitions."""
        takers = self._takers_by_rack(member_racks, local_of, groups)
        if not takers:
            return
        if self.unheld is None:  # nothing held: each rack's partitions, whole
            # What D must look at: topics with partitions of racks that took
            # nothing (or of no member's rack, or no racks), and the topics
            # where a rack's handout stopped.
            leftovers = set(self.topic_ids).difference(*(local_of[rack] for rack in takers))
            for layout_racks, topic_ids in layouts:
                if not layout_racks <= takers.keys():
                    leftovers.update(topic_ids)
            # Every topic of one layout (created together): each rack's part of
            # every topic is the same tuple and set, repeated by C list products.
            one_layout = len(layouts) == 1 and len(layouts[0][1]) == len(self.topic_ids)
            for rack in sorted(takers):
                mine, ordered = local_of[rack], ordered_of[rack]
                # The rack's segments straight from the index, by C passes (no
                # tuple per topic to take apart again).
                present = self.topic_ids
                if one_layout:
                    first = present[0]
                    parts: list[Sequence[int]] = [ordered[first]] * len(present)
                    wholes: list[AbstractSet[int] | None] = [mine[first]] * len(present)
                else:
                    if len(mine) != len(present):
                        present = [t for t in present if t in mine]
                    parts = list(map(ordered.__getitem__, present))
                    wholes = list(map(mine.__getitem__, present))
                segments = _Segments(present, parts, wholes, len(takers[rack]), unique=True)
                most = self.room[takers[rack][0]]  # takers come most room first
                shortest = len(parts[0]) if one_layout else min(map(len, parts))
                if 1 < most < 8 * shortest:
                    # Blocks shorter than the rack's part of a topic: by runs
                    # (blocks.py), pieces shared between topics of one layout.
                    whole = self._hand_out_runs(takers[rack], segments)
                else:  # one partition each, or blocks spanning topics: by shape
                    whole = self._hand_out(takers[rack], segments, self.taken, fresh=True)
                leftovers.update(present[whole:])
            self.leftovers = leftovers
            return
        # Where a rack's unkept partitions can be: unheld, released in A, or held
        # by a member of another rack (pending).
        free: dict[str, set[int]] = {t: set(p) for t, p in self.unheld.items()}
        for topic_id, given_up in self.released.items():
            free.setdefault(topic_id, set()).update(given_up)
        # Each rack takes its own partitions, free ones first, then those held
        # by members of other racks, both in topic order, and only as far as
        # its takers have room: a join's takers need a few, where intersecting
        # every topic for every rack cost 1 ms over 1,000 topics. Who holds
        # what of other racks is gathered only when free ones do not do.
        free_topics = sorted(free)
        others: _OthersByTopic | None = None
        room = self.room
        for rack in sorted(takers):
            mine = local_of[rack]
            need = sum(map(room.__getitem__, takers[rack]))
            ours = map(mine.get, free_topics, repeat(_NONE))
            pool = _segments_up_to(free_topics, map(and_, ours, map(free.__getitem__, free_topics)), need)
            need -= sum(len(segment) for _, segment, _ in pool)
            if need > 0:
                # Only as many as members of other racks hold: often none (then
                # no topic is looked at), else the walk stops at the last.
                need = min(need, self._held_elsewhere(rack, rack_counts[rack], member_racks, groups, mine))
            if need > 0:
                if others is None:
                    others = _OthersByTopic(self.pending.values())
                ours = map(mine.get, others.topic_ids, repeat(_NONE))
                pool += _segments_up_to(others.topic_ids, map(and_, ours, others.of_each()), need)
            # The takers take `need` at most: the pool's first segments up to
            # that hand out what all of them would.
            self._hand_out(takers[rack], _Segments.of(pool, len(takers[rack])), self.taken)

    def _held_elsewhere(
        self,
        rack: str,
        partitions: int,
        member_racks: Sequence[str | None],
        groups: Mapping[str, list[int]],
        mine: Mapping[str, frozenset[int]],
    ) -> int:
        """How many of the rack's `partitions` members of other racks (or none)
        hold: less those its members hold as their own (their local counts
        before A) and the unheld ones, each partition being held once (the
        currents are sanitised, or a trusted summary says they hold every
        partition exactly once). At most `partitions` when counting would
        cost more than B's walk over the few topics."""
        members = groups.get(rack)
        if members is not None:
            own = sum(map(self.local_counts.__getitem__, members))
        elif len(mine) >= _MANY_TOPICS:
            # Members not filed by rack: one C pass over them for this rack.
            own = sum(compress(self.local_counts, map(eq, member_racks, repeat(rack))))
        else:
            return partitions
        unheld = self.unheld or {}
        free = sum(len(held_now & mine[t]) for t, held_now in unheld.items() if t in mine)
        return partitions - own - free

    def _singles(self) -> list[frozenset[int]]:
        if self.singles is None:
            self.singles = [frozenset((p,)) for p in range(max(self.sizes.values()))]
        return self.singles

    def _takers_by_rack(
        self, member_racks: Sequence[str | None], local_of: LocalIndex, by_rack: Mapping[str, list[int]]
    ) -> dict[str, list[int]]:
        """Per rack with partitions, its members with room, most first, then by
        id: `by_rack` itself when every member has room, else the members with
        room filed by `_by_rack` (one C pass; R passes of comparisons cost 3x
        that)."""
        room = self.room
        order = self.order
        equal = room.count(room[0]) == len(room)  # (small ints: by identity, in C) member order
        lowest = min(room)
        everyone_has_room = lowest > 0
        if by_rack and isinstance(order, range) and len(order) == len(room):
            if not everyone_has_room or not equal:
                # Members in id order, filed by rack for the gains: each rack's
                # takers are its members with room, by a few C passes over
                # the rack's own (filing all members again cost 1 ms more).
                takers = {rack: _with_room(members, room) for rack, members in by_rack.items()}
                return {rack: found for rack, found in takers.items() if found}
            # Every member has room, the same: the racks' members are the takers.
            grouped = by_rack
        else:
            if not everyone_has_room:
                if isinstance(order, range) and len(order) == len(room):
                    # In id order (a range over every member): room read in place,
                    # and with none negative, room itself selects (a truth test
                    # each in C, not a comparison call: 0.2 ms at 10,000).
                    positive = room if lowest >= 0 else map(gt, room, repeat(0))
                    order = list(compress(indices(len(room)), positive))
                else:
                    order = list(compress(order, map(gt, map(room.__getitem__, order), repeat(0))))
            racks_in_order = (
                member_racks
                if isinstance(order, range) and len(order) == len(member_racks)  # in id order
                else list(map(member_racks.__getitem__, order))
            )
            grouped = _by_rack(racks_in_order, local_of, order)
        return {
            rack: found if equal else most_room_first(found, room) for rack, found in grouped.items() if found
        }

    def keep_rest(self) -> None:
        """C: members keep their other current partitions (those B did not give
        away) up to their room; without racks, members above their quota cut
        down to it (the first partitions in the global order stay)."""
        if self.unheld is None:
            return  # nothing was held: no one is above its quota, no one keeps anything
        if not self.pending:
            for i in compress(indices(len(self.room)), map(gt, repeat(0), self.room)):
                current = self.currents[i]
                kept = self._keep_first(current, self.quotas[i])
                self.out[i] = kept
                self.room[i] = 0
            return
        taken_topics = set().union(*self.taken)
        for i, other in self.pending.items():
            if self.out[i] is self.split.get(i) and taken_topics.isdisjoint(other):
                # B neither gave it anything nor took any of its other partitions,
                # and A cut nothing: with room for them all, it keeps its target.
                # (A kept its local partitions whole: the rest is its count less those.)
                size = self.counts[i] - self.local_counts[i]
                if size <= self.room[i]:
                    self.out[i] = self.currents[i]
                    self.room[i] -= size
                    continue
            kept = self._keep_first(self._not_taken(other, taken_topics), self.room[i])
            if kept:
                # What A kept, then the rest kept here (by C merges; only topics
                # in both are united one by one).
                mine = self.out[i]
                got = {**mine, **kept}
                for topic_id in mine.keys() & kept.keys():
                    got[topic_id] = mine[topic_id] | kept[topic_id]
                self.room[i] -= _count(kept)
                current = self.currents[i]
                # Back to the very object when nothing changed.
                self.out[i] = current if got == current else got

    def _not_taken(self, other: Assignment, taken_topics: set[str]) -> dict[str, frozenset[int]]:
        """`other` without what B handed out (entries left empty dropped, in
        `other`'s order): only the topics B handed out from are looked at."""
        left = dict(other)
        for topic_id in taken_topics.intersection(other):
            rest = other[topic_id].difference(*self._taken_of(topic_id))
            if rest:
                left[topic_id] = rest
            else:
                del left[topic_id]
        return left

    def fill_rest(self) -> None:
        """D: members with room, most first, then by id, take the unassigned
        partitions in the global order."""
        room = self.room
        # Room is never negative here (A and C cut members to their quota), so
        # room itself selects the takers: a C truth test each, where a
        # comparison call each cost 0.35 ms at 10,000 members. Checked once.
        positive: Sequence[object] = room if min(room) >= 0 else list(map(gt, room, repeat(0)))
        if not any(positive):
            return
        order = self.order
        if isinstance(order, range) and len(order) == len(room):  # in id order: room read in place
            takers = list(compress(indices(len(room)), positive))
        else:
            takers = list(compress(order, map(positive.__getitem__, order)))
        takers = most_room_first(takers, room)
        pool: Pool = []
        if self.unheld is None and not self.taken:
            # One tuple and one frozenset per distinct size, shared by its topics
            # (blocks cut from equal segments then share their pieces too). Tuples
            # of ints made once, as uniform.py's _fresh: a block's frozenset is then
            # built from a slice of existing ints (a range slice makes new ones).
            ints = tuple(range(max(self.sizes.values())))
            wholes = {n: (ints[:n], frozenset(ints[:n])) for n in set(self.sizes.values())}
            pool = [(t, *wholes[n]) for t, n in self.sizes.items()]
        elif self.unheld is None:
            # Nothing held (so A and C released nothing): what B left.
            pool = self._left_by_b(self.topic_ids if self.leftovers is None else sorted(self.leftovers))
        else:
            unheld = self.unheld
            for topic_id in sorted(unheld.keys() | self.released.keys()):
                rest = set(unheld.get(topic_id, ()))
                released = self.released.get(topic_id)
                if released:
                    rest.update(released)
                rest.difference_update(*self._taken_of(topic_id))
                if rest:
                    pool.append((topic_id, sorted(rest), None))
        segments = _Segments.of(pool, len(takers))
        if (
            segments.topics
            and room[takers[0]] < 8 * min(map(len, segments.segments))
            and not any(map(self.out.__getitem__, takers))
        ):
            # Every taker has nothing yet (members B left without) and blocks are
            # not much longer than a segment: by runs, as B does with nothing
            # held (blocks.py cuts repeated segments once).
            self._hand_out_runs(takers, segments, record=False)
        else:
            self._hand_out(takers, segments, None)

    def _left_by_b(self, topic_ids: Sequence[str]) -> Pool:
        """Nothing held: per topic (in order), what B did not hand out. Keyed
        by the topic's size and the very pieces B took of it (topics of one
        rack layout share their per-rack pieces, read for every topic by a C
        pass per handout), each left is made once and shared, so that D's
        blocks are cut once for them too."""
        pool: Pool = []
        full: dict[int, frozenset[int]] = {}  # per topic size, all its partitions
        lefts: dict[tuple[int, ...], tuple[tuple[int, ...], frozenset[int]] | None] = {}
        sizes = self.sizes
        took = [list(map(given.get, topic_ids)) for given in self.taken]
        for topic_id, pieces in zip(topic_ids, zip(*took, strict=True) if took else repeat(()), strict=False):
            size = sizes[topic_id]
            key = (size, *map(id, pieces))
            found = lefts.get(key, _UNSEEN)
            if found is _UNSEEN:
                whole = full.get(size)
                if whole is None:
                    whole = full[size] = frozenset(range(size))
                left = whole.difference(*(p for p in pieces if p is not None))
                found = lefts[key] = (tuple(sorted(left)), left) if left else None
            if found is not None:
                pool.append((topic_id, found[0], found[1]))
        return pool

    def _hand_out(
        self,
        takers: list[int],
        segments: _Segments,
        taken: list[dict[str, AbstractSet[int]]] | None,
        fresh: bool = False,
    ) -> int:
        """Each taker in turn takes the next partitions of `pool` up to its room
        (and, with `taken`, records them there). Returns how many segments were
        handed out whole. `takers` come most room first (`most_room_first`, B's
        and D's order), so a run's first and last say whether its room is
        equal all along.

        Positions in the pool are counted over its segments (`_Segments`), never
        partition by partition, so that a run of takers with nothing yet and
        equal room takes its blocks in one comprehension, however short the
        segments (a topic's share of one rack may be a partition or two), and a
        block's frozensets are shared where the segments are (topics of one
        layout share their per-rack tuples)."""
        if not segments.topics:
            return 0
        out, room = self.out, self.room
        starts = segments.starts
        n = starts[-1]
        # Runs of takers with nothing yet, found by C passes: each takes its
        # block (ends by accumulate) in one comprehension; the others one by one.
        # `fresh`: every taker has nothing yet (one run, no pass to find it).
        empties = [True] if fresh else list(map(not_, map(out.__getitem__, takers)))
        pos = k = 0
        for empty, same in groupby(empties):
            count = len(takers) if fresh else len(list(same))
            if empty:
                ends: Sequence[int]
                most, least = room[takers[k]], room[takers[k + count - 1]]
                if fresh and most == least:
                    # Takers come most room first: equal room all along, and the
                    # block ends are a range (a list of them made and freed
                    # 3,333 ints per rack at 10,000 members).
                    ends = range(pos, pos + most * count + 1, most)
                else:
                    ends = list(accumulate(map(room.__getitem__, takers[k : k + count]), initial=pos))
                fits = bisect_right(ends, n) - 1
                if fits:
                    blocks: list[Assignment]
                    if ends[fits] - pos == fits:  # one partition each
                        blocks = segments.singles(pos, ends[fits], self._singles())
                    elif segments.period:  # blocks are a few shapes, each made once
                        block = segments.block
                        blocks = [block(a, b) for a, b in pairwise(ends[: fits + 1])]
                    else:
                        blocks = segments.blocks(ends[: fits + 1])
                    run = takers[k : k + fits]
                    # A plain loop: subscript stores cost a quarter of
                    # deque(map(list.__setitem__, ...)) (a slot wrapper call each).
                    for i, got in zip(run, blocks, strict=True):
                        out[i] = got
                        room[i] = 0
                    pos, k, count = ends[fits], k + fits, count - fits
            while count and pos < n:
                i = takers[k]
                take = min(room[i], n - pos)
                got = dict(out[i])
                for topic_id, added in segments.block(pos, pos + take).items():
                    before = got.get(topic_id)
                    got[topic_id] = added if before is None else before | added
                out[i] = got
                room[i] -= take
                pos += take
                k += 1
                count -= 1
            if pos == n:
                break
        whole_segments = bisect_right(starts, pos) - 1
        if taken is not None and pos:
            taken.append(segments.prefix(pos, whole_segments))
        return whole_segments

    def _hand_out_runs(self, takers: list[int], segments: _Segments, record: bool = True) -> int:
        """`_hand_out` when every taker has nothing yet (B with nothing held,
        D when B left them all without): takers, most room first, take
        consecutive blocks run by run (one run per room size), cut by blocks.py
        so that runs of blocks that split the segments alike share their
        frozensets (`takers` most room first, as for `_hand_out`). With
        `record`, records what was handed out in `taken` (B); returns how many
        segments were handed out whole."""
        out, room = self.out, self.room
        sizes = list(map(room.__getitem__, takers))
        if sizes and sizes[0] == sizes[-1]:  # most room first: one size all along
            runs = [(sizes[0], len(sizes))]
        else:
            runs = [(size, len(list(same))) for size, same in groupby(sizes)]
        blocks, handed = cut_runs(segments.topics, segments.segments, runs)
        for i, got in zip(takers, blocks, strict=False):  # the rack may run out first
            out[i] = got
            room[i] = 0
        if blocks:
            # The last block is short when the rack ran out inside it.
            room[takers[len(blocks) - 1]] = sum(sizes[: len(blocks)]) - handed
        whole_segments = bisect_right(segments.starts, handed) - 1
        if handed and record:
            self.taken.append(segments.prefix(handed, whole_segments))
        return whole_segments

    def _taken_of(self, topic_id: str) -> list[AbstractSet[int]]:
        """The pieces of `topic_id` that B handed out (gathered once per topic:
        C asks for each topic once per member that holds it)."""
        found = self.taken_by_topic.get(topic_id)
        if found is None:
            found = self.taken_by_topic[topic_id] = [
                given[topic_id] for given in self.taken if topic_id in given
            ]
        return found


class _Segments:
    """A pool's segments with their positions: segment s holds positions
    starts[s] .. starts[s + 1] - 1 of the pool, in order."""

    __slots__ = ("_shapes", "_wholes", "period", "segments", "starts", "topics", "unique")

    def __init__(
        self,
        topics: list[str],
        segments: list[Sequence[int]],
        wholes: list[AbstractSet[int] | None],
        takers: int,
        unique: bool | None = None,
    ) -> None:
        """Segment s: partitions `segments[s]` of `topics[s]`, the same as a set
        `wholes[s]` where there is one. `takers`: how many members will take
        blocks (shapes are worth it only when they outnumber the segment's
        positions well); `unique`: whether the topics are distinct, if known."""
        self.topics = topics
        self.segments = segments
        #: Where each segment starts (a range when they are one object: no ints made).
        self.starts: Sequence[int]
        if segments and segments.count(segments[0]) == len(segments):
            size = len(segments[0])
            self.starts = range(0, size * len(segments) + 1, size) if size else [0] * (len(segments) + 1)
        else:
            self.starts = list(accumulate(map(len, segments), initial=0))
        #: Whether each topic has one segment (then a block's pieces need no merging).
        self.unique = len(set(topics)) == len(topics) if unique is None else unique
        #: Each segment as a frozenset: the pool's own set, else made when needed.
        self._wholes = wholes
        #: With one segment repeated for every (distinct) topic, as topics of one
        #: layout give each rack: its length. A block is then one of a few shapes
        #: (by where it starts in a segment, and its size), made once each, and
        #: only its topics differ.
        self.period = 0
        period = len(segments[0]) if segments else 0
        if (
            0 < 4 * period <= takers
            and self.unique
            and self.segments.count(self.segments[0]) == len(self.segments)
        ):
            self.period = period
        self._shapes: dict[tuple[int, int], list[frozenset[int]]] = {}

    @classmethod
    def of(cls, pool: Pool, takers: int) -> _Segments:
        """The segments of `pool`."""
        return cls(
            [topic_id for topic_id, _, _ in pool],
            [segment for _, segment, _ in pool],
            [whole for _, _, whole in pool],
            takers,
        )

    def whole(self, s: int) -> frozenset[int]:
        found = self._wholes[s]
        if found is None:
            found = self._wholes[s] = frozenset(self.segments[s])
        return frozenset(found)  # a frozenset's copy is itself

    def piece(self, s: int, lo: int, hi: int) -> frozenset[int]:
        """segments[s][lo:hi] as a frozenset (the segment's own when whole)."""
        segment = self.segments[s]
        if lo == 0 and hi == len(segment):
            return self.whole(s)
        return frozenset(segment[lo:hi])

    def block(self, a: int, b: int) -> dict[str, frozenset[int]]:
        """Positions a .. b - 1 by topic: a piece at each end, and the segments
        in between whole."""
        if self.period:
            first, offset = divmod(a, self.period)
            key = (offset, b - a)
            shape = self._shapes.get(key)
            if shape is None:
                shape = self._shapes[key] = list(self._block(a, b).values())
            if len(shape) == 1:
                return {self.topics[first]: shape[0]}
            return dict(zip(self.topics[first : first + len(shape)], shape, strict=True))
        return self._block(a, b)

    def blocks(self, ends: Sequence[int]) -> list[Assignment]:
        """The blocks ends[k] .. ends[k + 1] - 1, for each k (`ends` ascending,
        within the pool). One plain loop that follows the segments as the
        blocks advance (no bisection, no call per block): a block inside one
        segment is one piece, shared by every block cutting the same piece of
        the same segment object (topics of one layout or one size share
        theirs), and only blocks that run past their segment's end are cut by
        `_block`. Measured on 10,000 blocks of 0 - 4 partitions over ten
        topics: half the time of a `block` call each (2.2 against 4.5 ms)."""
        starts, segments, topics = self.starts, self.segments, self.topics
        memos: dict[int, dict[int, frozenset[int]]] = {}
        out: list[Assignment] = []
        append = out.append
        s = bisect_right(starts, ends[0]) - 1
        begin, stop = starts[s], starts[s + 1]
        segment, topic_id = segments[s], topics[s]
        memo = memos.setdefault(id(segment), {})
        a = ends[0]
        for b in ends[1:]:
            if a == b:
                append(EMPTY_ASSIGNMENT)
                continue
            while a >= stop and s + 2 < len(starts):
                s += 1
                begin, stop = stop, starts[s + 1]
                segment, topic_id = segments[s], topics[s]
                memo = memos.setdefault(id(segment), {})
            if b <= stop:
                key = (a - begin) << 32 | (b - begin)
                piece = memo.get(key)
                if piece is None:
                    piece = memo[key] = frozenset(segment[a - begin : b - begin])
                append({topic_id: piece})
            else:
                append(self._block(a, b))
            a = b
        return out

    def _block(self, a: int, b: int) -> dict[str, frozenset[int]]:
        """`block`, cut from the segments (the whole ones in between written in
        one C call when topics are unique: with many small topics a block spans
        dozens of them)."""
        starts, topics = self.starts, self.topics
        first = bisect_right(starts, a) - 1
        if b <= starts[first + 1]:
            begin = starts[first]
            if a == begin and b == starts[first + 1]:
                return {topics[first]: self.whole(first)}
            return {topics[first]: frozenset(self.segments[first][a - begin : b - begin])}
        last = bisect_right(starts, b - 1, first + 1) - 1
        out = {topics[first]: self.piece(first, a - starts[first], starts[first + 1] - starts[first])}
        if self.unique:
            if last > first + 1:
                middle = range(first + 1, last)
                wholes = self._wholes[first + 1 : last]
                if None in wholes:
                    wholes = list(map(self.whole, middle))
                out.update(zip(topics[first + 1 : last], wholes, strict=True))  # type: ignore[arg-type]
            out[topics[last]] = self.piece(last, 0, b - starts[last])
            return out
        for s in range(first + 1, last + 1):
            topic_id = topics[s]
            added = self.whole(s) if s < last else self.piece(s, 0, b - starts[s])
            before = out.get(topic_id)
            out[topic_id] = added if before is None else before | added
        return out

    def prefix(self, stop: int, whole_segments: int) -> dict[str, AbstractSet[int]]:
        """Positions 0 .. stop - 1 by topic (`whole_segments`: the segments
        they cover whole), the whole ones written in one C call."""
        if self.unique:
            wholes = self._wholes[:whole_segments]
            if None in wholes:
                wholes = list(map(self.whole, range(whole_segments)))
            out: dict[str, AbstractSet[int]] = dict(zip(self.topics[:whole_segments], wholes, strict=True))  # type: ignore[arg-type]
            if stop > self.starts[whole_segments]:
                out[self.topics[whole_segments]] = self.piece(
                    whole_segments, 0, stop - self.starts[whole_segments]
                )
            return out
        out = {}
        for s, topic_id in enumerate(self.topics):
            begin = self.starts[s]
            if begin >= stop:
                break
            added = self.whole(s) if stop >= self.starts[s + 1] else self.piece(s, 0, stop - begin)
            before = out.get(topic_id)
            out[topic_id] = added if before is None else before | added
        return out

    def singles(self, a: int, b: int, singles: list[frozenset[int]]) -> list[Assignment]:
        """One block per position a .. b - 1, each the one partition there
        (`singles[p]`: the shared frozenset({p}))."""
        starts, topics, segments = self.starts, self.topics, self.segments
        first = bisect_right(starts, a) - 1
        last = bisect_right(starts, b - 1, first) - 1
        if first == last:
            topic_id = topics[first]
            offset = starts[first]
            return [{topic_id: x} for x in map(singles.__getitem__, segments[first][a - offset : b - offset])]
        # Each segment's singles as a list, made once per segment object (topics
        # of one layout share it), then one nested comprehension, as uniform.py's
        # _fresh builds its blocks.
        made: dict[int, list[frozenset[int]]] = {}
        mapped = [list(map(singles.__getitem__, segments[first][a - starts[first] :]))]
        for segment in segments[first + 1 : last]:
            found = made.get(id(segment))
            if found is None:
                found = made[id(segment)] = list(map(singles.__getitem__, segment))
            mapped.append(found)
        mapped.append(list(map(singles.__getitem__, segments[last][: b - starts[last]])))
        return [{t: x} for t, xs in zip(topics[first : last + 1], mapped, strict=True) for x in xs]
