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
  balanced assignment is returned unchanged (the same objects).

Capacity and racks are not weighed here: a redundant group is balanced by count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..model import EMPTY_ASSIGNMENT, Assignment
from ..replicas import copy_id, is_copy, split
from .base import GroupAssignment, GroupSpec

Slot = tuple[str, int]  # (copy topic id, partition)


class RedundantAssignor:
    name = "redundant"

    def assign(self, spec: GroupSpec) -> Mapping[str, Assignment]:
        return assign_redundant(spec, spec.replicas)


def assign_redundant(spec: GroupSpec, replicas: int) -> Mapping[str, Assignment]:
    member_ids = list(spec.members)
    if not member_ids:
        return {}
    eligible = _eligible(spec)
    slots = _slots(spec, eligible, replicas)
    valid = set(slots)
    load = dict.fromkeys(member_ids, 0)
    ceiling = _ceiling(len(slots), eligible, member_ids)
    holder: dict[Slot, str] = {}
    # (member, topic, partition): the member holds some copy of that partition.
    holding: set[tuple[str, str, int]] = set()

    def give(member_id: str, slot: Slot) -> None:
        holder[slot] = member_id
        holding.add((member_id, split(slot[0])[0], slot[1]))
        load[member_id] += 1

    def take(member_id: str, slot: Slot) -> None:
        del holder[slot]
        holding.discard((member_id, split(slot[0])[0], slot[1]))
        load[member_id] -= 1

    # 1. Keep what is still valid, in member id order, up to the ceiling.
    for member_id in sorted(member_ids):
        member = spec.members[member_id]
        current = member.current
        for topic_id in sorted(current):
            base = split(topic_id)[0]
            if base not in member.subscribed_topic_ids:
                continue  # no longer subscribed
            for p in sorted(current[topic_id]):
                slot = (topic_id, p)
                if (
                    slot in valid
                    and slot not in holder
                    and (member_id, base, p) not in holding
                    and load[member_id] < ceiling
                ):
                    give(member_id, slot)

    # 2. Hand out the rest, each to the least loaded eligible member without a copy.
    for slot in slots:
        if slot in holder:
            continue
        base = split(slot[0])[0]
        candidates = [m for m in eligible[base] if (m, base, slot[1]) not in holding]
        if candidates:
            give(min(candidates, key=lambda m: (load[m], m)), slot)

    # 3. Balance: move slots from the most to the least loaded member while the gap is > 1.
    _balance(spec, eligible, holder, holding, load, give, take)

    mine: dict[str, dict[str, set[int]]] = {m: {} for m in member_ids}
    for (topic_id, p), member_id in holder.items():
        mine[member_id].setdefault(topic_id, set()).add(p)
    targets: list[Assignment] = []
    for member_id in member_ids:
        new = {t: frozenset(ps) for t, ps in mine[member_id].items()}
        current = spec.members[member_id].current
        targets.append(current if new == current else (new or EMPTY_ASSIGNMENT))
    return GroupAssignment(member_ids, targets)


def _eligible(spec: GroupSpec) -> dict[str, list[str]]:
    """Each real topic's subscribers, in member id order."""
    out: dict[str, list[str]] = {}
    for member_id in sorted(spec.members):
        for topic_id in spec.members[member_id].subscribed_topic_ids:
            if not is_copy(topic_id) and topic_id in spec.topics:
                out.setdefault(topic_id, []).append(member_id)
    return out


def _slots(spec: GroupSpec, eligible: Mapping[str, list[str]], replicas: int) -> list[Slot]:
    """Every slot to fill, by topic, partition, copy: min(replicas, subscribers) copies."""
    out: list[Slot] = []
    for topic_id in sorted(eligible):
        copies = min(replicas, len(eligible[topic_id]))
        for p in range(spec.topics[topic_id].num_partitions):
            out.extend((copy_id(topic_id, c), p) for c in range(copies))
    return out


def _ceiling(slot_count: int, eligible: Mapping[str, list[str]], member_ids: list[str]) -> int:
    """The most slots one member keeps in step 1: the balanced share rounded up
    when every member can take every topic, else no limit (step 3 balances)."""
    homogeneous = all(len(subscribers) == len(member_ids) for subscribers in eligible.values())
    if not homogeneous:
        return slot_count
    return -(-slot_count // len(member_ids))


def _balance(
    spec: GroupSpec,
    eligible: Mapping[str, list[str]],
    holder: dict[Slot, str],
    holding: set[tuple[str, str, int]],
    load: dict[str, int],
    give: Callable[[str, Slot], None],
    take: Callable[[str, Slot], None],
) -> None:
    eligible_sets = {t: set(ms) for t, ms in eligible.items()}
    by_member: dict[str, set[Slot]] = {m: set() for m in load}
    for slot, member_id in holder.items():
        by_member[member_id].add(slot)
    while True:
        order = sorted(load, key=lambda m: (load[m], m))
        moved = False
        # The least loaded member first, from the most loaded: a move narrows the gap.
        for low in order:
            for high in reversed(order):
                if load[high] - load[low] <= 1:
                    break
                found = _movable(by_member[high], low, eligible_sets, holding)
                if found is not None:
                    take(high, found)
                    by_member[high].discard(found)
                    give(low, found)
                    by_member[low].add(found)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def _movable(
    slots: set[Slot], to: str, eligible: Mapping[str, set[str]], holding: set[tuple[str, str, int]]
) -> Slot | None:
    """A slot `to` may take: a topic it subscribes to, a partition it holds no copy of."""
    for slot in sorted(slots):
        base = split(slot[0])[0]
        if to in eligible[base] and (to, base, slot[1]) not in holding:
            return slot
    return None
