"""The consumer group heartbeat (Kafka's GroupMetadataManager.consumerGroupHeartbeat).

One call does, in order:
1. get or create the group and the member, validating its epoch;
2. merge the request into the member and bump the group epoch if the
   subscription or the membership changed;
3. recompute the target assignment if the group epoch is ahead of it;
4. reconcile the member towards its target (revoke first, assign second);
5. re-arm the session timer and build the response.

It returns records and timers; it never mutates the group.
"""

from __future__ import annotations

import sys
from bisect import bisect_left, insort
from dataclasses import dataclass, field, replace

from .client_assignment import check_assignor_overlap, plan_computation
from .context import (
    CancelRebalanceTimeout,
    CancelTimeouts,
    Context,
    Result,
    ScheduleAssignment,
    ScheduleRebalanceTimeout,
    ScheduleSessionTimeout,
    TimerOp,
)
from .current_assignment import needs_reconciliation, reconcile
from .errors import (
    FencedInstanceId,
    FencedMemberEpoch,
    GroupIdNotFound,
    GroupMaxSizeReached,
    InvalidRequest,
    UnknownMemberId,
    UnreleasedInstanceId,
)
from .membership import fence_member_records, throw_if_not_group_type
from .messages import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from .model import (
    CONSUMER_GROUP_TYPE,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    Group,
    Member,
    MemberMetadata,
    MemberState,
    is_subset,
    make_assignment,
    only_topics,
)
from .placement import co_partitioning_refusal
from .records import (
    CurrentAssignmentRecord,
    GroupMetadataRecord,
    MemberMetadataRecord,
    Record,
    TargetAssignmentMemberRecord,
    member_removal_records,
)
from .replicas import collapse, expand_owned, is_copy, split
from .subscription import adjusted_counts, canonical_names, group_topics, member_topic_ids, metadata_hash
from .target_assignment import (
    PendingAssignment,
    assignment_due,
    fits_inline,
    group_spec,
    next_assignment_ms,
    preferred_assignor,
    target_after,
)
from .target_summary import TargetSummaryKeeper, counts_differently
from .topics import LEADERSHIP_TOPIC_ID, Topic, TopicsImage, resolve_topic_id
from .validation import validate_consumer_group_heartbeat


def consumer_group_heartbeat(
    group: Group | None, req: ConsumerGroupHeartbeat, ctx: Context
) -> Result[ConsumerGroupHeartbeatResponse]:
    unchanged = _unchanged(group, req, ctx)
    if unchanged is not None:
        return unchanged
    validate_consumer_group_heartbeat(req, ctx.config)
    if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
        return _leave(group, req, ctx)
    return _heartbeat(group, req, ctx)


def _unchanged(
    group: Group | None, req: ConsumerGroupHeartbeat, ctx: Context
) -> Result[ConsumerGroupHeartbeatResponse] | None:
    """The answer to the heartbeat almost every member sends almost every time,
    or None for any other heartbeat.

    That heartbeat carries only the ids and the member's current epoch, from a
    member that is stable at the group's target while the group is not ahead
    of its target. The general path gives it exactly this answer (no records,
    no assignment, the session timer re-armed); the shortcut only skips the
    steps that cannot change anything for it, which matters because it is most
    of a coordinator's traffic. Its ids need no validation: they name an
    existing group and member, which were validated when they were created.
    """
    if (
        group is None
        or req.member_epoch <= 0
        or group.group_epoch != group.assignment_epoch
        or req.group_type != group.group_type
        or not _is_plain(req)
    ):
        return None
    member = group.members.get(req.member_id)
    if (
        member is None
        or req.member_epoch != member.member_epoch
        or not member.is_reconciled_to(group.assignment_epoch)
    ):
        return None
    response = ConsumerGroupHeartbeatResponse(
        member.member_id, member.member_epoch, _interval(member, ctx), ctx.config.session_timeout_ms
    )
    return Result(response, (), (_session_timer(member.member_id, ctx),))


def _is_plain(req: ConsumerGroupHeartbeat) -> bool:
    """True when the request sends nothing but its ids and epoch."""
    return (
        req.owned_topic_partitions is None
        and req.subscribed_topic_names is None
        and req.subscribed_topic_regex is None
        and req.rebalance_timeout_ms is None
        and req.instance_id is None
        and req.rack_id is None
        and req.client_id is None
        and not req.client_host
        and req.server_assignor is None
        and req.client_assignors is None
        and req.url is None
        and req.capacity is None
        and req.replicas is None
        and req.require_co_partitioning is None
    )


@dataclass(slots=True)
class _Lookup:
    """The member a heartbeat is about, as the group knows it."""

    #: The member before this request (a fresh one if it is joining).
    member: Member
    #: True when the member did not exist before.
    is_new: bool
    #: A static member at epoch -2 whose instance id the new member takes over.
    replaced: Member | None = None


@dataclass(slots=True)
class _Heartbeat:
    """A heartbeat that may change the group, as its five steps fill it in."""

    group: Group
    req: ConsumerGroupHeartbeat
    ctx: Context
    lookup: _Lookup
    #: The partitions the member says it owns (None: not sent).
    owned: Assignment | None
    #: The member as the request found it (the static member it replaces, if any).
    before: Member
    #: The member with the request merged in.
    member: Member
    records: list[Record] = field(default_factory=list)
    timers: list[TimerOp] = field(default_factory=list)
    subscription_changed: bool = False
    group_epoch: int = 0
    #: The group's subscribed topics, once computed.
    topics: list[Topic] | None = None
    target: Assignment = field(default_factory=dict)
    assignment_epoch: int = 0
    compute_assignment: bool = False


def _heartbeat(
    group: Group | None, req: ConsumerGroupHeartbeat, ctx: Context
) -> Result[ConsumerGroupHeartbeatResponse]:
    hb = _find_member(group, req, ctx)
    _merge_and_bump(hb)
    _update_target(hb)
    reconciled = _reconcile(hb)
    return _respond(hb, reconciled)


def _find_member(group: Group | None, req: ConsumerGroupHeartbeat, ctx: Context) -> _Heartbeat:
    """Step 1: gets or creates the group and the member, and validates the member epoch."""
    if group is None:
        if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
            raise GroupIdNotFound(f"Group {req.group_id} not found.")
        group = Group(req.group_id, req.group_type)
    throw_if_not_group_type(group, req.group_type)
    owned = _resolve_owned(req, ctx.image)
    lookup = (
        _static_member(group, req, ctx) if req.instance_id is not None else _dynamic_member(group, req, ctx)
    )
    if lookup.is_new and lookup.replaced is None:
        _throw_if_group_full(group, ctx)
    if owned is not None and not lookup.is_new:
        # A member of a redundant group owns plain partitions: as the copies it holds.
        owned = expand_owned(owned, lookup.member)
    if not lookup.is_new and req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
        _validate_member_epoch(lookup.member, req.member_epoch, owned)
    before = lookup.replaced if lookup.replaced is not None else lookup.member
    return _Heartbeat(group, req, ctx, lookup, owned, before, _merge(lookup.member, req))


def _merge_and_bump(hb: _Heartbeat) -> None:
    """Step 2: records the merged metadata and bumps the group epoch if the subscription changed."""
    group, lookup, member, before = hb.group, hb.lookup, hb.member, hb.before
    if lookup.replaced is not None:
        hb.records.extend(member_removal_records(lookup.replaced.member_id))
        hb.timers.append(CancelTimeouts(lookup.replaced.member_id))
    if lookup.is_new or (member is not lookup.member and not member.same_metadata(lookup.member)):
        hb.records.append(MemberMetadataRecord.of(member))
    hb.subscription_changed = (lookup.is_new and lookup.replaced is None) or (
        member is not before and not member.same_subscription(before)
    )
    hb.group_epoch = group.group_epoch
    newly_required = member.metadata.require_co_partitioning and not before.metadata.require_co_partitioning
    if hb.subscription_changed or newly_required:
        others = [
            m for mid, m in group.members.items() if mid != member.member_id and mid != before.member_id
        ]
        check_assignor_overlap(others, member)
        if member.metadata.replicas > 1 and member.client_assignors:
            raise InvalidRequest(
                "Replicas above 1 need a server-side assignor: client-side assignors compute "
                "one owner per partition."
            )
        if member.metadata.require_co_partitioning:
            _check_co_partitioning(hb, member, others)
    if hb.subscription_changed:
        previous = (before,) if before.member_id in group.members else ()
        hb.topics = _topics_after(group, hb.ctx.image, previous, member)
        hb.group_epoch += 1
        hb.records.append(GroupMetadataRecord(hb.group_epoch, metadata_hash(hb.topics), group.group_type))


def _check_co_partitioning(hb: _Heartbeat, member: Member, others: list[Member]) -> None:
    """Refuses a join or subscription change of a member that requires co-partitioning
    which the group's assignor would not give it (nothing is stored)."""
    if member.client_assignors:
        raise InvalidRequest(
            "RequireCoPartitioning needs a server-side assignor: the coordinator cannot promise "
            "what a client-side assignor does."
        )
    why = co_partitioning_refusal(member, others, hb.ctx.image, _assignor_after(hb, member))
    if why:
        raise InvalidRequest(why)


def _assignor_after(hb: _Heartbeat, member: Member) -> str:
    """The server-side assignor the group uses once this heartbeat's member replaces its
    previous self (the most common among members)."""
    previous = (hb.before,) if hb.before.member_id in hb.group.members else ()
    return preferred_assignor(
        adjusted_counts(
            hb.group.server_assignor_counts(),
            (m.server_assignor for m in previous if m.server_assignor is not None),
            () if member.server_assignor is None else (member.server_assignor,),
        ),
        hb.ctx.config,
    )


def _update_target(hb: _Heartbeat) -> None:
    """Step 3: recomputes the target assignment if the group moved ahead of it (at most
    once per assignment interval; otherwise a timer computes it later), or has a member
    chosen to compute it client-side."""
    group, lookup, member, ctx = hb.group, hb.lookup, hb.member, hb.ctx
    target_id = member.member_id if lookup.replaced is None else lookup.replaced.member_id
    hb.target = group.target_of(target_id)
    if lookup.replaced is not None and hb.target:
        hb.records.append(TargetAssignmentMemberRecord(member.member_id, hb.target))
    hb.assignment_epoch = group.assignment_epoch
    if hb.group_epoch <= hb.assignment_epoch:
        return
    if member.client_assignors:
        # Client-side assignment (check_assignor_overlap keeps a group all client-side
        # or all server-side, so this member speaks for the group): choose (or keep)
        # the member that computes the target; it learns it from this or its next heartbeat.
        members = dict(group.members)
        if lookup.replaced is not None:
            del members[lookup.replaced.member_id]
        members[member.member_id] = member
        computation_records, computation = plan_computation(group, members, ctx)
        hb.records.extend(computation_records)
        hb.compute_assignment = computation is not None and computation.member_id == member.member_id
    elif assignment_due(group, ctx) and _cheap_enough(group, hb.topics, ctx):
        assignor = _assignor_after(hb, member)
        members = dict(group.members)
        targets = group.target
        if lookup.replaced is not None:
            del members[lookup.replaced.member_id]
            targets = {k: v for k, v in targets.items() if k != lookup.replaced.member_id}
            targets[member.member_id] = hb.target
        members[member.member_id] = member
        order = _ids_in_order(group, member.member_id, lookup.replaced)
        spec = group_spec(members, targets, ctx.image, order)
        pending = PendingAssignment(hb.group_epoch, ctx.now_ms, assignor, spec)
        target_records = pending.compute_kept(ctx.config, _summary_keeper(group, member, lookup))
        hb.records.extend(target_records)
        hb.assignment_epoch = hb.group_epoch
        hb.target = target_after(target_records, member.member_id, targets.get(member.member_id, {}))
    else:
        hb.timers.append(ScheduleAssignment(next_assignment_ms(group, ctx)))


def _reconcile(hb: _Heartbeat) -> Member:
    """Step 4: moves the member towards its target (revocations first), and arms or
    cancels its rebalance timeout accordingly."""
    member, ctx = hb.member, hb.ctx
    reconciled = member
    if hb.subscription_changed or needs_reconciliation(member, hb.assignment_epoch):
        subscribed: frozenset[str] | None = None
        target = hb.target
        if hb.subscription_changed:
            subscribed = _with_group_topics(
                member_topic_ids(ctx.image, member.subscribed_topic_names, member.subscribed_topic_regex),
                (target, member.assigned, member.pending_revocation),
            )
            target = only_topics(target, subscribed)
        reconciled = reconcile(
            member, hb.assignment_epoch, target, hb.group.partition_epoch, hb.owned, subscribed
        )
    if hb.lookup.is_new or (reconciled is not member and not reconciled.same_current_assignment(member)):
        hb.records.append(CurrentAssignmentRecord.of(reconciled))
        if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
            hb.timers.append(
                ScheduleRebalanceTimeout(
                    reconciled.member_id,
                    ctx.now_ms + reconciled.rebalance_timeout_ms,
                    reconciled.member_epoch,
                )
            )
        else:
            hb.timers.append(CancelRebalanceTimeout(reconciled.member_id))
    return reconciled


def _with_group_topics(subscribed: frozenset[str], held: tuple[Assignment, ...]) -> frozenset[str]:
    """The member's subscribed topic ids and the topics the group assigns beyond the
    registry that go with them, as found in `held` (its target and what it owns): the
    copy topics of a subscribed topic (redundant groups) and leadership (leader groups,
    in no subscription). A subscription change must not revoke those as unsubscribed."""
    extra = {
        t for a in held for t in a if t == LEADERSHIP_TOPIC_ID or (is_copy(t) and split(t)[0] in subscribed)
    }
    return subscribed | extra if extra else subscribed


def _respond(hb: _Heartbeat, reconciled: Member) -> Result[ConsumerGroupHeartbeatResponse]:
    """Step 5: re-arms the session timer and answers."""
    hb.timers.append(_session_timer(reconciled.member_id, hb.ctx))
    send_assignment = _is_full_request(hb.req) or reconciled.assigned != hb.before.assigned
    response = ConsumerGroupHeartbeatResponse(
        member_id=reconciled.member_id,
        member_epoch=reconciled.member_epoch,
        heartbeat_interval_ms=_interval(reconciled, hb.ctx),
        session_timeout_ms=hb.ctx.config.session_timeout_ms,
        assignment=collapse(reconciled.assigned) if send_assignment else None,
        compute_assignment=hb.compute_assignment,
    )
    return Result(response, tuple(hb.records), tuple(hb.timers))


def _session_timer(member_id: str, ctx: Context) -> ScheduleSessionTimeout:
    """Every heartbeat the member sends re-arms its session timeout."""
    return ScheduleSessionTimeout(member_id, ctx.now_ms + ctx.config.session_timeout_ms)


#: A member waiting for partitions heartbeats this many times more often.
WAITING_SPEEDUP = 4


def _interval(member: Member, ctx: Context) -> int:
    """The heartbeat interval to give the member: shorter while it waits.

    A member waiting for partitions that others still hold learns of their
    release only when it heartbeats: polling four times faster while it waits
    takes up to three quarters of an interval off a rebalance, and costs
    nothing once the group is stable. (Members behind a target that is not
    computed yet keep the normal interval: under constant churn they would
    otherwise poll fast all the time.)
    """
    interval = ctx.config.heartbeat_interval_ms
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return max(1, interval // WAITING_SPEEDUP)
    return interval


def _dynamic_member(group: Group, req: ConsumerGroupHeartbeat, ctx: Context) -> _Lookup:
    member_id = req.member_id or ctx.new_member_id
    member = group.members.get(member_id)
    if member is not None:
        return _Lookup(member, is_new=False)
    if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
        raise UnknownMemberId(f"Member {member_id} is not a member of group {group.group_id}.")
    return _Lookup(Member(member_id=member_id), is_new=True)


def _static_member(group: Group, req: ConsumerGroupHeartbeat, ctx: Context) -> _Lookup:
    instance_id = req.instance_id
    assert instance_id is not None
    member_id = req.member_id or ctx.new_member_id
    existing = group.member_by_instance_id(instance_id)
    if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
        if existing is None:
            raise UnknownMemberId(f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise FencedInstanceId(
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}."
            )
        return _Lookup(existing, is_new=False)

    if existing is None or existing.member_id == member_id:
        return _dynamic_member(group, req, ctx)
    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise UnreleasedInstanceId(
            f"Static member {existing.member_id} with instance id {instance_id} is not released "
            f"and cannot be replaced by member {member_id}."
        )
    if member_id in group.members:
        raise InvalidRequest(
            f"MemberId {member_id} already belongs to another member of group {group.group_id}; "
            f"it cannot take over instance id {instance_id}."
        )
    # The new member takes the old one's place: same assignment, same target,
    # no group epoch bump unless the subscription changed.
    copy = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
    return _Lookup(copy, is_new=True, replaced=existing)


def _throw_if_group_full(group: Group, ctx: Context) -> None:
    limit = ctx.config.max_group_size
    if limit is not None and len(group.members) >= limit:
        raise GroupMaxSizeReached(f"The consumer group has reached its maximum capacity of {limit} members.")


def _validate_member_epoch(member: Member, received: int, owned: Assignment | None) -> None:
    if received > member.member_epoch:
        raise FencedMemberEpoch(
            f"The consumer group member has a greater member epoch ({received}) than the one known by "
            f"the group coordinator ({member.member_epoch}). The member must abandon all its partitions "
            "and rejoin."
        )
    if received < member.member_epoch:
        # A lost response: the member may retry with its previous epoch as
        # long as it owns no more than it is now assigned.
        if (
            received == member.previous_member_epoch
            and owned is not None
            and is_subset(owned, member.assigned)
        ):
            return
        raise FencedMemberEpoch(
            f"The consumer group member has a smaller member epoch ({received}) than the one known by "
            f"the group coordinator ({member.member_epoch}). The member must abandon all its partitions "
            "and rejoin."
        )


def _merge(member: Member, req: ConsumerGroupHeartbeat) -> Member:
    """The member with the request's sent fields applied; `member` itself if none differ."""
    if _sends_nothing_new(member, req):
        return member
    names = member.subscribed_topic_names
    if req.subscribed_topic_names is not None:
        names = canonical_names(tuple(sorted(set(req.subscribed_topic_names))))
    regex = member.subscribed_topic_regex
    if req.subscribed_topic_regex is not None:
        regex = req.subscribed_topic_regex or None
    timeout = member.rebalance_timeout_ms
    if req.rebalance_timeout_ms is not None and req.rebalance_timeout_ms != -1:
        timeout = req.rebalance_timeout_ms
    # Server-side and client-side assignors exclude each other: sending one clears the other.
    server_assignor, client_assignors = member.server_assignor, member.client_assignors
    if req.client_assignors is not None:
        client_assignors = req.client_assignors
        if client_assignors:
            server_assignor = None
    if req.server_assignor is not None:
        server_assignor, client_assignors = req.server_assignor, ()
    metadata = member.metadata
    merged = MemberMetadata(
        instance_id=req.instance_id if req.instance_id is not None else metadata.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else metadata.rack_id,
        client_id=sys.intern(req.client_id) if req.client_id is not None else metadata.client_id,
        client_host=sys.intern(req.client_host) if req.client_host else metadata.client_host,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        server_assignor=server_assignor,
        rebalance_timeout_ms=timeout,
        client_assignors=client_assignors,
        url=req.url if req.url is not None else metadata.url,
        # Not a heartbeat field: only DrainMember sets it, and no heartbeat clears it.
        draining=metadata.draining,
        capacity=req.capacity if req.capacity is not None else metadata.capacity,
        replicas=req.replicas if req.replicas is not None else metadata.replicas,
        require_co_partitioning=(
            req.require_co_partitioning
            if req.require_co_partitioning is not None
            else metadata.require_co_partitioning
        ),
    )
    return member if merged == metadata else replace(member, metadata=merged)


def _sends_nothing_new(member: Member, req: ConsumerGroupHeartbeat) -> bool:
    """A cheap check for the common heartbeat, which sends no metadata at all."""
    m = member.metadata
    return (
        req.subscribed_topic_names is None
        and req.subscribed_topic_regex is None
        and (req.rebalance_timeout_ms is None or req.rebalance_timeout_ms in (-1, m.rebalance_timeout_ms))
        and (req.instance_id is None or req.instance_id == m.instance_id)
        and (req.rack_id is None or req.rack_id == m.rack_id)
        and (req.client_id is None or req.client_id == m.client_id)
        and (not req.client_host or req.client_host == m.client_host)
        and (req.server_assignor is None or req.server_assignor == m.server_assignor)
        and (req.client_assignors is None or req.client_assignors == m.client_assignors)
        and (req.url is None or req.url == m.url)
        and (req.capacity is None or req.capacity == m.capacity)
        and (req.replicas is None or req.replicas == m.replicas)
        and (req.require_co_partitioning is None or req.require_co_partitioning == m.require_co_partitioning)
    )


def _resolve_owned(req: ConsumerGroupHeartbeat, image: TopicsImage) -> Assignment | None:
    """The owned partitions by topic id. Unknown topics keep a key no target uses,
    so that they can never pass as a subset of an assignment."""
    if req.owned_topic_partitions is None:
        return None
    return make_assignment(
        (resolve_topic_id(image, entry.topic_id, entry.topic_name), entry.partitions)
        for entry in req.owned_topic_partitions
    )


def _topics_after(
    group: Group, image: TopicsImage, removed: tuple[Member, ...], added: Member
) -> list[Topic]:
    """The group's subscribed topics once `removed` are replaced by `added`."""
    names = adjusted_counts(
        group.subscribed_topic_names(),
        (n for m in removed for n in m.subscribed_topic_names),
        added.subscribed_topic_names,
    )
    regexes = adjusted_counts(
        group.subscribed_regexes(),
        (m.subscribed_topic_regex for m in removed if m.subscribed_topic_regex is not None),
        () if added.subscribed_topic_regex is None else (added.subscribed_topic_regex,),
    )
    return group_topics(image, names, regexes)


def _ids_in_order(group: Group, member_id: str, replaced: Member | None) -> list[str]:
    """The group's member ids, sorted, once `member_id` joins (and a static member's
    previous incarnation, `replaced`, goes): a copy and one insertion, not a sort."""
    order = list(group.member_ids_in_order())
    if replaced is not None and replaced.member_id != member_id:
        del order[bisect_left(order, replaced.member_id)]
    if member_id not in group.members:
        insort(order, member_id)
    return order


def _summary_keeper(group: Group, member: Member, lookup: _Lookup) -> TargetSummaryKeeper | None:
    """The group's keeper of its targets' summary, when what it vouches for
    holds for this heartbeat's computation too: this heartbeat's own records
    are not replayed yet, and a replaced static member's target moves to its
    successor, or the member's new rack or subscription counts its target anew."""
    if lookup.replaced is not None:
        return None
    before = group.members.get(member.member_id)
    if before is not None and counts_differently(before.metadata, member.metadata):
        return None
    return group.target_summary


def _cheap_enough(group: Group, topics: list[Topic] | None, ctx: Context) -> bool:
    """Whether the target may be computed inside this heartbeat (else the
    assignment timer computes it, in the shell's worker process)."""
    if ctx.config.inline_assignment_max_partitions is None:
        return True
    if topics is None:
        topics = group_topics(ctx.image, group.subscribed_topic_names(), group.subscribed_regexes())
    return fits_inline(topics, ctx.config)


def _is_full_request(req: ConsumerGroupHeartbeat) -> bool:
    if req.group_type != CONSUMER_GROUP_TYPE:
        # Connect workers have no subscription to resend.
        return req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
            req.rebalance_timeout_ms is not None
            and req.rebalance_timeout_ms != -1
            and req.owned_topic_partitions is not None
        )
    return req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
        req.rebalance_timeout_ms is not None
        and req.rebalance_timeout_ms != -1
        and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        and req.owned_topic_partitions is not None
    )


def _leave(
    group: Group | None, req: ConsumerGroupHeartbeat, ctx: Context
) -> Result[ConsumerGroupHeartbeatResponse]:
    if group is None:
        raise GroupIdNotFound(f"Group {req.group_id} not found.")
    throw_if_not_group_type(group, req.group_type)
    if req.instance_id is not None:
        member = _static_member(group, req, ctx).member
    else:
        member = _dynamic_member(group, req, ctx).member
    response = ConsumerGroupHeartbeatResponse(
        member_id=member.member_id,
        member_epoch=req.member_epoch,
        heartbeat_interval_ms=0,
        session_timeout_ms=ctx.config.session_timeout_ms,
    )
    if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        # A temporary leave keeps the assignment for the instance's return;
        # no epoch bump, and the session timer keeps running.
        left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
        return Result(
            response,
            (CurrentAssignmentRecord.of(left),),
            (CancelRebalanceTimeout(member.member_id),),
        )
    return Result(
        response,
        tuple(fence_member_records(group, member.member_id, ctx.image)),
        (CancelTimeouts(member.member_id), ScheduleAssignment(next_assignment_ms(group, ctx))),
    )


__all__ = ["CONSUMER_GROUP_TYPE", "consumer_group_heartbeat"]
