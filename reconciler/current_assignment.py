"""Reconciliation of one member towards its target (Kafka's CurrentAssignmentBuilder).

The loop revokes first and assigns second: a member that must give up
partitions goes to UNREVOKED_PARTITIONS and receives nothing new until it has
acknowledged the revocation by sending what it still owns. Partitions still
owned by another member are withheld (UNRELEASED_PARTITIONS) until released.

Follows Kafka trunk's fixed behaviour: no +1 epoch bump after a revocation
(KAFKA-19974), a member's own pending revocations are not "unreleased"
(KAFKA-19449), and unsubscribed topics are dropped from the target (KAFKA-19431).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .errors import FencedMemberEpoch
from .model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    Member,
    MemberState,
    intersects,
    is_subset,
    only_topics,
    union,
)

#: (topic id, partition) -> epoch of the owning member, or -1 when free.
PartitionEpoch = Callable[[str, int], int]


def needs_reconciliation(member: Member, target_epoch: int) -> bool:
    """False when the member is stable at the target epoch (Kafka skips the builder)."""
    return not member.is_reconciled_to(target_epoch)


def reconcile(
    member: Member,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
    subscribed: frozenset[str] | None = None,
) -> Member:
    """The member's next current assignment.

    `owned` is what the member said it owns in this request, or None when it
    did not say; None counts as "still owns everything". `subscribed` (topic
    ids) is given when the subscription changed in this request: a member
    still revoking then drops unsubscribed topics at once (KAFKA-19431).
    """
    match member.state:
        case MemberState.STABLE:
            if member.member_epoch != target_epoch or not is_subset(member.assigned, target):
                return _next_assignment(
                    member, member.member_epoch, target_epoch, target, partition_epoch, owned
                )
            return member
        case MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(member.pending_revocation, owned):
                return member if subscribed is None else _revoke_unsubscribed(member, subscribed)
            return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        case MemberState.UNRELEASED_PARTITIONS:
            return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        case _:
            if owned is None or owned:
                raise FencedMemberEpoch(
                    "The consumer group member is in an unknown state. "
                    "The member must abandon all its partitions and rejoin."
                )
            return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _revoke_unsubscribed(member: Member, subscribed: frozenset[str]) -> Member:
    """A member still revoking moves its unsubscribed topics to pending revocation, same epoch."""
    dropped = {t: p for t, p in member.assigned.items() if t not in subscribed}
    if not dropped:
        return member
    return replace(
        member,
        previous_member_epoch=member.member_epoch,
        assigned=only_topics(member.assigned, subscribed),
        pending_revocation=union(member.pending_revocation, dropped),
    )


def _owns_any(partitions: Assignment, owned: Assignment | None) -> bool:
    if not partitions:
        return False
    return owned is None or intersects(partitions, owned)


_NONE: frozenset[int] = frozenset()


def _shared(partitions: frozenset[int], *candidates: frozenset[int]) -> frozenset[int]:
    """`partitions`, or an equal set the member or its target already holds.

    A stable member's assignment equals its target: sharing the target's
    frozenset instead of an equal copy halves the memory a partition costs.
    """
    for candidate in candidates:
        if len(candidate) == len(partitions) and candidate == partitions:
            return candidate
    return partitions


def _next_assignment(
    member: Member,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
) -> Member:
    kept: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    to_assign: dict[str, frozenset[int]] = {}
    has_unreleased = False
    own_revoking = member.pending_revocation

    for topic_id in target.keys() | member.assigned.keys():
        wanted = target.get(topic_id, _NONE)
        current = member.assigned.get(topic_id, _NONE)
        keep = _shared(current & wanted, wanted, current)
        if keep:
            kept[topic_id] = keep
        if current - wanted:
            revoke[topic_id] = current - wanted
        mine = own_revoking.get(topic_id, _NONE)
        free = set()
        for partition in wanted - keep:
            # A partition this member itself is revoking is not "unreleased":
            # it may take it back (KAFKA-19449).
            if partition in mine or partition_epoch(topic_id, partition) == -1:
                free.add(partition)
            else:
                has_unreleased = True
        if free:
            to_assign[topic_id] = frozenset(free)

    if revoke and _owns_any(revoke, owned):
        # Revoke first: stay at the current epoch and hand out nothing new.
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            member_epoch=epoch,
            previous_member_epoch=member.member_epoch,
            assigned=kept or EMPTY_ASSIGNMENT,
            pending_revocation=revoke,
        )
    if to_assign:
        for topic_id, partitions in to_assign.items():
            wanted = target[topic_id]
            kept[topic_id] = _shared(kept.get(topic_id, _NONE) | partitions, wanted, wanted)
    state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
    return replace(
        member,
        state=state,
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch,
        assigned=kept or EMPTY_ASSIGNMENT,
        pending_revocation=EMPTY_ASSIGNMENT,
    )
