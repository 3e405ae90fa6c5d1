"""Draining: taking a member out of service without losing work (GroupAdmin.DrainMember).

A draining member stays in the group and keeps heartbeating, but no assignor
gives it anything: `target_assignment.group_spec` leaves it out of the
assignor's input and gives it an empty target, and a client-side computation
sees it subscribing to nothing (`client_assignment.prepare_assignment`). Its
partitions then move with the usual protocol: revoked first, assigned to the
others only once it released them. Nothing here moves a partition.

The flag is part of the member's metadata (`MemberMetadata.draining`), stored
by its MemberMetadataRecord: heartbeats keep it, a static member that rejoins
under the same instance id keeps it, and a reload finds it. Draining (or
undraining) bumps the group epoch, so that the target is computed again.

The drain state is derived, never stored: DRAINING while a draining member
still owns something (assigned, or pending revocation), DRAINED once it owns
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .context import Context, Result, ScheduleAssignment
from .errors import GroupIdNotFound, InvalidRequest, UnknownMemberId
from .model import Group, Member
from .records import GroupMetadataRecord, MemberMetadataRecord, Record
from .target_assignment import next_assignment_ms
from .validation import validate_group_id, validate_id

#: The drain states, as DescribedMember.drain_state and DrainMemberResponse carry them.
IN_SERVICE = ""
DRAINING = "DRAINING"
DRAINED = "DRAINED"


def drain_state(member: Member) -> str:
    """ "" when in service; DRAINING while draining and owning something; DRAINED once not."""
    if not member.draining:
        return IN_SERVICE
    if member.assigned or member.pending_revocation:
        return DRAINING
    return DRAINED


@dataclass(frozen=True, slots=True)
class DrainOutcome:
    member_id: str
    #: The member's drain state once the records apply.
    drain_state: str
    #: The group epoch once the records apply.
    group_epoch: int


def drain_member(
    group: Group | None,
    group_id: str,
    member_id: str,
    instance_id: str,
    undrain: bool,
    ctx: Context,
) -> Result[DrainOutcome]:
    """Drains the member named by `member_id` or `instance_id` ("" when not given;
    exactly one must be), or puts it back in service with `undrain`.

    A member already in the requested state gets no record (the call is
    idempotent) and is answered its state; otherwise its metadata with the new
    flag and a group epoch bump, with the assignment timer armed for a group
    whose members are all idle."""
    validate_group_id(group_id)
    if bool(member_id) == bool(instance_id):
        raise InvalidRequest(
            "Exactly one of MemberId and InstanceId must be set, "
            + ("got both." if member_id else "got neither.")
        )
    validate_id("MemberId", member_id)
    validate_id("InstanceId", instance_id)
    if group is None:
        raise GroupIdNotFound(f"Group {group_id} not found.")
    member = _find(group, member_id, instance_id)
    wanted = not undrain
    if member.draining == wanted:
        return Result(DrainOutcome(member.member_id, drain_state(member), group.group_epoch))
    drained = replace(member, metadata=replace(member.metadata, draining=wanted))
    epoch = group.group_epoch + 1
    records: tuple[Record, ...] = (
        MemberMetadataRecord.of(drained),
        GroupMetadataRecord(epoch, group.metadata_hash, group.group_type),
    )
    return Result(
        DrainOutcome(drained.member_id, drain_state(drained), epoch),
        records,
        (ScheduleAssignment(next_assignment_ms(group, ctx)),),
    )


def _find(group: Group, member_id: str, instance_id: str) -> Member:
    if member_id:
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"Member {member_id} is not a member of group {group.group_id}.")
        return member
    by_instance = group.member_by_instance_id(instance_id)
    if by_instance is None:
        raise UnknownMemberId(f"No member of group {group.group_id} has instance id {instance_id}.")
    return by_instance
