"""Replay: applies stored records to a group, the only way a group changes.

The shell replays an operation's records after they are committed, and replays
the stored rows when it loads, so memory and store always agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    CommittedOffset,
    Group,
    IllegalStateError,
    Member,
    MemberState,
)
from .records import (
    AssignorStateRecord,
    ComputationRecord,
    ConnectorsRecord,
    CurrentAssignmentRecord,
    CurrentAssignmentTombstone,
    GroupMetadataRecord,
    GroupTombstone,
    MemberMetadataRecord,
    MemberMetadataTombstone,
    OffsetCommitRecord,
    OffsetTombstone,
    Record,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
    TargetAssignmentMemberTombstone,
)
from .target_summary import counts_differently


def replay_all(group: Group | None, group_id: str, records: Iterable[Record]) -> Group | None:
    """Applies records in order; returns the group, or None once it is deleted."""
    current = group
    for record in records:
        if isinstance(record, GroupTombstone):
            current = None
            continue
        if current is None:
            current = Group(group_id)
        replay(current, record)
    return current


def replay(group: Group, record: Record) -> None:
    """Applies one record to `group` (a `GroupTombstone` is handled by `replay_all`)."""
    match record:
        case GroupMetadataRecord():
            group.group_epoch = record.group_epoch
            group.metadata_hash = record.metadata_hash
            group.group_type = record.group_type
        case MemberMetadataRecord():
            _replay_member_metadata(group, record)
        case MemberMetadataTombstone():
            _remove_member(group, record.member_id)
            group.target_summary.removed(record.member_id)
        case TargetAssignmentMemberRecord():
            if record.partitions:
                group.target[record.member_id] = record.partitions
            else:
                group.target.pop(record.member_id, None)
            group.target_summary.changed(record.member_id, record.partitions)
        case TargetAssignmentMemberTombstone():
            group.target.pop(record.member_id, None)
            group.target_summary.removed(record.member_id)
        case TargetAssignmentEpochRecord():
            group.assignment_epoch = record.assignment_epoch
            if record.computed_at_ms is not None:
                group.last_assignment_ms = record.computed_at_ms
            # A computation's own member records came just before, and it
            # vouches for them; any other target (a client's, the worker's) has none.
            group.target_summary.computed(record.summary)
        case CurrentAssignmentRecord():
            _replay_current_assignment(group, record)
        case CurrentAssignmentTombstone():
            member = group.members.get(record.member_id)
            if member is not None:
                group._release_partitions(member)
                reset = replace(
                    member,
                    state=MemberState.STABLE,
                    member_epoch=0,
                    previous_member_epoch=0,
                    assigned={},
                    pending_revocation={},
                )
                group._index_state(member, -1)
                group._index_state(reset, +1)
                group.members[record.member_id] = reset
        case AssignorStateRecord():
            group.assignor_state = record.state
            group.assignment_error = record.error
        case ComputationRecord():
            group.computation = record.computation
        case ConnectorsRecord():
            # A new dict each time: the shell caches the resource image per dict.
            group.connectors = dict(record.connectors)
        case OffsetCommitRecord():
            group.offsets[(record.topic_id, record.partition)] = CommittedOffset(
                record.offset, record.metadata, record.member_epoch, record.commit_ms
            )
        case OffsetTombstone():
            group.offsets.pop((record.topic_id, record.partition), None)
        case GroupTombstone():
            raise IllegalStateError("A group tombstone is applied by replay_all.")


def _replay_member_metadata(group: Group, record: MemberMetadataRecord) -> None:
    old = group.members.get(record.member_id)
    if old is not None:
        new = replace(old, metadata=record.metadata)
    else:
        new = Member(record.member_id, record.metadata)
    if old is not None:
        group._index_metadata(old, -1)
        if counts_differently(old.metadata, record.metadata):
            group.target_summary.changed(
                record.member_id, group.target.get(record.member_id, EMPTY_ASSIGNMENT)
            )
    else:
        group._index_member_id(record.member_id, +1)
        group.target_summary.joined(record.member_id)
        group._index_state(new, +1)
    group._index_metadata(new, +1)
    group.members[record.member_id] = new


def _replay_current_assignment(group: Group, record: CurrentAssignmentRecord) -> None:
    old = group.members.get(record.member_id)
    if old is None:
        raise IllegalStateError(
            f"Current assignment for unknown member {record.member_id} in group {group.group_id}."
        )
    new = replace(
        old,
        state=record.state,
        member_epoch=record.member_epoch,
        previous_member_epoch=record.previous_member_epoch,
        assigned=_share_with_target(record.assigned, group.target.get(record.member_id)),
        pending_revocation=record.pending_revocation or EMPTY_ASSIGNMENT,
    )
    if new.assigned == old.assigned and new.pending_revocation == old.pending_revocation:
        # The most frequent step: the member moves to a new epoch keeping its partitions
        # (each new target of a big group moves every member so). Nothing changes hands,
        # so only the partitions' epochs move: one pass instead of release, check, claim.
        group._restamp_partitions(new)
    else:
        group._release_partitions(old)
        try:
            group._claim_partitions(new)
        except IllegalStateError:
            group._claim_partitions(old)
            raise
    group._index_state(old, -1)
    group._index_state(new, +1)
    group.members[record.member_id] = new


def _share_with_target(assigned: Assignment, target: Assignment | None) -> Assignment:
    """The assignment, reusing the target's equal partition sets (a loaded or replayed
    stable member then holds one copy of its partitions, not two)."""
    if not assigned:
        return EMPTY_ASSIGNMENT
    if target is None or all(target.get(t) is p for t, p in assigned.items()):
        return assigned
    shared = {}
    for topic_id, partitions in assigned.items():
        wanted = target.get(topic_id)
        shared[topic_id] = wanted if wanted is not None and wanted == partitions else partitions
    return shared


def _remove_member(group: Group, member_id: str) -> None:
    member = group.members.pop(member_id, None)
    if member is None:
        return
    group._release_partitions(member)
    group._index_metadata(member, -1)
    group._index_state(member, -1)
    group._index_member_id(member_id, -1)
    group.target.pop(member_id, None)
    if group.computation is not None and group.computation.member_id == member_id:
        # The chosen member left: the next heartbeat chooses another.
        group.computation = None
