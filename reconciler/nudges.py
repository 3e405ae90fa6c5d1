"""Which members a change of their group concerns: those whose heartbeat, sent now,
would move them (member streams push them a nudge; see server/streams.py).

The rule is the reconciliation's own (`current_assignment.reconcile`), read without
running it: a member moves when its target epoch moved past it, or when it waits for
partitions (UNRELEASED_PARTITIONS) of which one is free now. A member still revoking
(UNREVOKED_PARTITIONS) does not: nothing moves it but its own acknowledgement, which
its client sends as soon as it has revoked. The member chosen to compute a client-side
target moves when it has not fetched the group yet (PrepareAssignment). A member no
longer in the group (or of a deleted group) is told too: its next heartbeat is refused,
and it rejoins at once instead of at its next interval.

A nudge carries no state and nothing depends on it: a member that misses one learns
the same at its next regular heartbeat. So the rule may err towards nudging (a
heartbeat that changes nothing costs no write), never the other way for long.
"""

from __future__ import annotations

from enum import IntEnum

from .model import Group, Member, MemberState, is_subset


class NudgeReason(IntEnum):
    """Mirror of `regroup.v1.NudgeReason`."""

    TARGET_CHANGED = 1
    PARTITIONS_RELEASED = 2
    COMPUTE_ASSIGNMENT = 3
    GROUP_DELETED = 4
    MEMBER_REMOVED = 5


def nudge_reason(group: Group | None, member_id: str) -> NudgeReason | None:
    """Why the member should heartbeat now, or None when a heartbeat would change nothing."""
    if group is None:
        return NudgeReason.GROUP_DELETED
    member = group.members.get(member_id)
    if member is None:
        return NudgeReason.MEMBER_REMOVED
    computation = group.computation
    if computation is not None and computation.member_id == member_id and computation.prepared is None:
        return NudgeReason.COMPUTE_ASSIGNMENT
    return _reconciliation_reason(group, member)


def _reconciliation_reason(group: Group, member: Member) -> NudgeReason | None:
    target_epoch = group.assignment_epoch
    match member.state:
        case MemberState.STABLE:
            if member.member_epoch != target_epoch:
                return NudgeReason.TARGET_CHANGED
            if not is_subset(member.assigned, group.target_of(member.member_id)):
                return NudgeReason.TARGET_CHANGED
            return None
        case MemberState.UNRELEASED_PARTITIONS:
            if member.member_epoch != target_epoch:
                return NudgeReason.TARGET_CHANGED
            return NudgeReason.PARTITIONS_RELEASED if _any_released(group, member) else None
        case _:
            # Revoking: only its own acknowledgement moves it.
            return None


def _any_released(group: Group, member: Member) -> bool:
    """True when a partition of the member's target that it does not hold yet is free."""
    for topic_id, wanted in group.target_of(member.member_id).items():
        held = member.assigned.get(topic_id)
        for partition in wanted if held is None else wanted - held:
            if group.partition_epoch(topic_id, partition) == -1:
                return True
    return False
