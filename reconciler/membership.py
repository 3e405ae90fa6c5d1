"""Operations that remove members or react to topic changes, outside a heartbeat."""

from __future__ import annotations

from .context import CancelTimeouts, Context, Result, ScheduleAssignment
from .errors import GroupIdNotFound, NonEmptyGroup, StaleMemberEpoch, UnknownMemberId
from .model import Group, Member, MemberState
from .records import GroupMetadataRecord, GroupTombstone, Record, member_removal_records
from .subscription import adjusted_counts, group_topics, metadata_hash
from .target_assignment import next_assignment_ms
from .topics import TopicsImage


def current_member(group: Group | None, group_id: str, member_id: str, member_epoch: int) -> Member:
    """The member an epoch-checked call is about: the group exists (GROUP_ID_NOT_FOUND), the
    member exists (UNKNOWN_MEMBER_ID), and its epoch is exactly the current one (STALE_MEMBER_EPOCH)."""
    if group is None:
        raise GroupIdNotFound(f"Group {group_id} not found.")
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberId(f"Member {member_id} is not a member of group {group_id}.")
    if member_epoch != member.member_epoch:
        raise StaleMemberEpoch(
            f"The member epoch ({member_epoch}) is not the current one ({member.member_epoch}): "
            "use the epoch of the latest heartbeat response."
        )
    return member


def throw_if_not_group_type(group: Group, group_type: str) -> None:
    if group.group_type != group_type:
        raise GroupIdNotFound(f"Group {group.group_id} is not a {group_type} group.")


def fence_member_records(group: Group, member_id: str, image: TopicsImage) -> list[Record]:
    """Removes a member and bumps the group epoch (leave, session or rebalance timeout)."""
    member = group.members[member_id]
    names = adjusted_counts(group.subscribed_topic_names(), member.subscribed_topic_names, ())
    regexes = adjusted_counts(
        group.subscribed_regexes(),
        () if member.subscribed_topic_regex is None else (member.subscribed_topic_regex,),
        (),
    )
    records = member_removal_records(member_id)
    records.append(
        GroupMetadataRecord(
            group.group_epoch + 1, metadata_hash(group_topics(image, names, regexes)), group.group_type
        )
    )
    return records


def on_session_timeout(group: Group, member_id: str, ctx: Context) -> Result[bool]:
    """The member's session expired: fence it. The response says whether it was."""
    if member_id not in group.members:
        return Result(False)
    return Result(
        True,
        tuple(fence_member_records(group, member_id, ctx.image)),
        (CancelTimeouts(member_id), ScheduleAssignment(next_assignment_ms(group, ctx))),
    )


def on_rebalance_timeout(group: Group, member_id: str, member_epoch: int, ctx: Context) -> Result[bool]:
    """The member did not revoke in time: fence it if it is still where the timer found it."""
    member = group.members.get(member_id)
    if (
        member is None
        or member.member_epoch != member_epoch
        or member.state is not MemberState.UNREVOKED_PARTITIONS
    ):
        return Result(False)
    return Result(
        True,
        tuple(fence_member_records(group, member_id, ctx.image)),
        (CancelTimeouts(member_id), ScheduleAssignment(next_assignment_ms(group, ctx))),
    )


def refresh_metadata(group: Group, ctx: Context) -> Result[bool]:
    """Bumps the group epoch when the subscribed topics' metadata changed.

    Run after a topic is created, grown or deleted (and once on load). The new
    target is computed by the assignment timer (or by a heartbeat that comes
    first), so it is ready even for a group whose members are all idle.

    Run again on a group whose metadata is current, it bumps nothing: a refresh is
    retried until it is known stored. It still arms the assignment timer of a
    group ahead of its target, as one whose bump was stored but not answered is.
    """
    new_hash = metadata_hash(
        group_topics(ctx.image, group.subscribed_topic_names(), group.subscribed_regexes())
    )
    if new_hash == group.metadata_hash:
        if group.members and group.group_epoch > group.assignment_epoch:
            return Result(False, (), (ScheduleAssignment(next_assignment_ms(group, ctx)),))
        return Result(False)
    return Result(
        True,
        (GroupMetadataRecord(group.group_epoch + 1, new_hash, group.group_type),),
        (ScheduleAssignment(next_assignment_ms(group, ctx)),),
    )


def delete_group(group: Group) -> Result[None]:
    """Deletes an empty group (NON_EMPTY_GROUP otherwise)."""
    if group.members:
        raise NonEmptyGroup(f"Group {group.group_id} is not empty: it has {len(group.members)} members.")
    return Result(None, (GroupTombstone(),))
