"""Redundant assignment: every partition on `replicas` distinct members.

Used for every server-side group that asks for more than one copy
(ConsumerGroupHeartbeatRequest.replicas), whichever assignor it names: the copies
of a partition are slots (copy topics, see reconciler/replicas.py), and this
assignor hands the slots out so that

- each topic gets min(replicas, subscribers of the topic) copies of each of its
  partitions, each copy to a different member (fewer copies only while the group
  has fewer members);
- no member holds two copies of one partition;
- every member's count of slots is within one of every other's when all
  subscribe to the same topics (heterogeneous groups: unassigned slots go to the
  least loaded eligible member, then slots move from the most to the least
  loaded eligible member while that narrows the gap by more than one);
- it is sticky per slot: a member keeps each slot of its current target that is
  still valid, as long as it stays within the balance, and an already valid,
  balanced assignment is returned unchanged (the same objects). When all
  subscribe to the same topics it keeps the most slots any balanced target keeps
  (fewest_moves.py), so a join moves only the surplus and a leave only the
  leaver's slots whenever a balanced target allows it.

Which copy a member holds is its own: a copy that is still valid (its topic
subscribed, its number below `replicas`) stays with its holder, whatever its
number, and a new holder takes the lowest number free. So when a topic loses
subscribers, the holders left keep the copies they have (copy 1 with no copy 0,
say) rather than being renumbered, which would take each such copy from its
holder, with its own progress, and give it another. Without any current target
the copies are 0 to n-1.

Capacity and racks are not weighed here: a redundant group is balanced by count.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import count

from ..model import EMPTY_ASSIGNMENT, Assignment
from ..replicas import copy_id, is_copy, split
from .base import GroupAssignment, GroupSpec
from .fewest_moves import fewest_moves

Part = tuple[str, int]  # (topic id, partition): a partition, whichever copy


class RedundantAssignor:
    name = "redundant"

    def assign(self, spec: GroupSpec) -> Mapping[str, Assignment]:
        return assign_redundant(spec, spec.replicas)


def assign_redundant(spec: GroupSpec, replicas: int) -> Mapping[str, Assignment]:
    member_ids = list(spec.members)
    if not member_ids:
        return {}
    eligible = _eligible(spec)
    parts = [(t, p) for t in sorted(eligible) for p in range(spec.topics[t].num_partitions)]
    copies = {t: min(replicas, len(ms)) for t, ms in eligible.items()}
    keepable = _keepable(spec, eligible, replicas)
    layout = _Layout(member_ids, parts, eligible, keepable)
    homogeneous = all(len(subscribers) == len(member_ids) for subscribers in eligible.values())
    total = sum(copies[t] for t, _ in parts)
    # 1. Keep what is still valid, in member id order, up to the ceiling.
    ceiling = -(-total // len(member_ids)) if homogeneous else total
    for member_id in sorted(member_ids):
        for part in keepable[member_id]:
            if layout.load[member_id] < ceiling and len(layout.holders[part]) < copies[part[0]]:
                layout.give(member_id, part)
    # 2. Hand out the rest, each copy to the least loaded eligible member without one.
    for part in parts:
        for _ in range(copies[part[0]] - len(layout.holders[part])):
            layout.hand_out(part)
    # 3. Balance: move copies from the most to the least loaded member while the gap is > 1.
    layout.balance()
    if homogeneous and layout.kept() < _most_kept(keepable, total, len(member_ids)):
        # The greedy passes may take more than they must (a member that can take none
        # of the copies handed out, say): the exact answer, by a min-cost flow.
        layout = _fewest_moves(member_ids, eligible, keepable, parts, copies[parts[0][0]])
    return _targets(spec, member_ids, layout, keepable)


def _eligible(spec: GroupSpec) -> dict[str, list[str]]:
    """Each real topic's subscribers, in member id order."""
    out: dict[str, list[str]] = {}
    for member_id in sorted(spec.members):
        for topic_id in spec.members[member_id].subscribed_topic_ids:
            if not is_copy(topic_id) and topic_id in spec.topics:
                out.setdefault(topic_id, []).append(member_id)
    return out


def _keepable(
    spec: GroupSpec, eligible: Mapping[str, list[str]], replicas: int
) -> dict[str, dict[Part, int]]:
    """The copies each member may keep, by partition, in topic and partition order: of
    a subscribed topic, a partition that exists, a number below `replicas`, one per
    partition for each member and one member per copy (in member id order, should a
    current target hold a copy twice)."""
    claimed: set[tuple[str, int]] = set()  # (copy topic id, partition)
    out: dict[str, dict[Part, int]] = {}
    for member_id in sorted(spec.members):
        member = spec.members[member_id]
        mine: dict[Part, int] = {}
        for topic_id in sorted(member.current, key=split):
            base, copy = split(topic_id)
            if base not in eligible or base not in member.subscribed_topic_ids or copy >= replicas:
                continue
            size = spec.topics[base].num_partitions
            for p in sorted(member.current[topic_id]):
                if p < size and (base, p) not in mine and (topic_id, p) not in claimed:
                    claimed.add((topic_id, p))
                    mine[base, p] = copy
        out[member_id] = dict(sorted(mine.items()))
    return out


def _most_kept(keepable: Mapping[str, Mapping[Part, int]], total: int, members: int) -> int:
    """At most this many copies can be kept in a balanced homogeneous layout: each
    member keeps at most `floor + 1`, and only `extra` members get that one more."""
    floor, extra = divmod(total, members)
    counts = [len(mine) for mine in keepable.values()]
    above = sum(1 for c in counts if c > floor)
    return sum(min(c, floor) for c in counts) + min(above, extra)


class _Layout:
    """The members that hold each partition, and what each holds and has kept."""

    def __init__(
        self,
        member_ids: list[str],
        parts: list[Part],
        eligible: Mapping[str, list[str]],
        keepable: Mapping[str, Mapping[Part, int]],
    ) -> None:
        self.eligible = eligible
        self.eligible_sets = {t: set(ms) for t, ms in eligible.items()}
        self.keepable = keepable
        #: Holders of each partition, in the order they took it (the first new one gets the lowest free copy).
        self.holders: dict[Part, list[str]] = {part: [] for part in parts}
        self.owns: dict[str, set[Part]] = {m: set() for m in member_ids}
        self.load = dict.fromkeys(member_ids, 0)

    def give(self, member_id: str, part: Part) -> None:
        self.holders[part].append(member_id)
        self.owns[member_id].add(part)
        self.load[member_id] += 1

    def take(self, member_id: str, part: Part) -> None:
        self.holders[part].remove(member_id)
        self.owns[member_id].discard(part)
        self.load[member_id] -= 1

    def kept(self) -> int:
        return sum(1 for m, parts in self.owns.items() for part in parts if part in self.keepable[m])

    def hand_out(self, part: Part) -> None:
        holders = self.holders[part]
        candidates = [m for m in self.eligible[part[0]] if m not in holders]
        if candidates:
            load = self.load
            self.give(min(candidates, key=lambda m: (load[m], m)), part)

    def balance(self) -> None:
        load = self.load
        while True:
            order = sorted(load, key=lambda m: (load[m], m))
            moved = False
            # The least loaded member first, from the most loaded: a move narrows the gap.
            for low in order:
                for high in reversed(order):
                    if load[high] - load[low] <= 1:
                        break
                    found = self._movable(high, low)
                    if found is not None:
                        self.take(high, found)
                        self.give(low, found)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                return

    def _movable(self, high: str, low: str) -> Part | None:
        """A partition `high` holds that `low` may take (a topic it subscribes to, a
        partition it holds no copy of): one `high` was handed in this pass before one
        it kept, which would move a copy from its holder."""
        kept = self.keepable[high]
        for part in sorted(self.owns[high], key=lambda part: (part in kept, part)):
            if low in self.eligible_sets[part[0]] and part not in self.owns[low]:
                return part
        return None


def _fewest_moves(
    member_ids: list[str],
    eligible: Mapping[str, list[str]],
    keepable: Mapping[str, Mapping[Part, int]],
    parts: list[Part],
    copies: int,
) -> _Layout:
    ordered = sorted(member_ids)
    index = {part: i for i, part in enumerate(parts)}
    owns = fewest_moves(
        len(ordered), len(parts), copies, [[index[part] for part in keepable[m]] for m in ordered]
    )
    layout = _Layout(member_ids, parts, eligible, keepable)
    for member_id, mine in zip(ordered, owns, strict=True):
        for i in sorted(mine):
            layout.give(member_id, parts[i])
    return layout


def _targets(
    spec: GroupSpec, member_ids: list[str], layout: _Layout, keepable: Mapping[str, Mapping[Part, int]]
) -> GroupAssignment:
    """Each member's slots: a partition it keeps under its copy, a new one under the
    lowest copy free."""
    mine: dict[str, dict[str, set[int]]] = {m: {} for m in member_ids}
    for part, holders in layout.holders.items():
        kept = {m: keepable[m][part] for m in holders if part in keepable[m]}
        # Below len(holders), so below `replicas`.
        free = (c for c in count() if c not in kept.values())
        for member_id in holders:
            copy = kept[member_id] if member_id in kept else next(free)
            mine[member_id].setdefault(copy_id(part[0], copy), set()).add(part[1])
    targets: list[Assignment] = []
    for member_id in member_ids:
        new = {t: frozenset(ps) for t, ps in mine[member_id].items()}
        current = spec.members[member_id].current
        targets.append(current if new == current else (new or EMPTY_ASSIGNMENT))
    return GroupAssignment(member_ids, targets)
