"""Event logging: one structured event per state change an operation stored.

The engine never logs; the write path calls `log_records` with the records it
stored, named after the change (member_joined, group_epoch_bumped, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from regroup.reconciler import Group, Record
from regroup.reconciler.history import BUMP_CAUSES
from regroup.reconciler.records import (
    ConnectorsRecord,
    CurrentAssignmentRecord,
    GroupMetadataRecord,
    MemberMetadataRecord,
    MemberMetadataTombstone,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
)


def log_records(
    log: Any, group: Group | None, group_id: str, records: Sequence[Record], cause: str
) -> str | None:
    """One event per state change, named after it (the engine itself never logs).
    Returns why the group's epoch was bumped, if these records bump it (for metrics)."""
    log = log.bind(group_id=group_id)
    # Members that joined in these records; the group's own are looked up in it, not
    # copied: a big group's every reconciliation step passes through here.
    joined: set[str] = set()
    members = {} if group is None else group.members
    epoch = 0 if group is None else group.group_epoch
    targets_changed = 0
    bump: str | None = None
    changed_member = ""  # why, as the member records of these records tell it
    for record in records:
        match record:
            case MemberMetadataRecord():
                if record.member_id in members or record.member_id in joined:
                    changed_member = changed_member or "member_metadata_changed"
                    continue
                joined.add(record.member_id)
                changed_member = "member_joined"
                log.info(
                    "member_joined",
                    member_id=record.member_id,
                    instance_id=record.metadata.instance_id,
                    topics=list(record.metadata.subscribed_topic_names),
                    regex=record.metadata.subscribed_topic_regex,
                )
            case MemberMetadataTombstone():
                event = "member_left" if cause == "leave" else "member_fenced"
                log.info(event, member_id=record.member_id, reason=cause)
                changed_member = BUMP_CAUSES.get(cause, event)
            case GroupMetadataRecord() if record.group_epoch != epoch:
                log.info("group_epoch_bumped", epoch=record.group_epoch, previous=epoch, reason=cause)
                epoch = record.group_epoch
                bump = ""
            case TargetAssignmentMemberRecord():
                targets_changed += 1
            case ConnectorsRecord():
                log.info("connectors_changed", connectors=len(record.connectors))
            case TargetAssignmentEpochRecord():
                log.info(
                    "target_assignment_computed",
                    assignment_epoch=record.assignment_epoch,
                    members_changed=targets_changed,
                )
            case CurrentAssignmentRecord():
                log.debug(
                    "member_reconciled",
                    member_id=record.member_id,
                    state=record.state.name,
                    member_epoch=record.member_epoch,
                )
            case _:
                pass
    if bump is None:
        return None
    return BUMP_CAUSES.get(cause) or changed_member or cause
