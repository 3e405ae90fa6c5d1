"""Client-side assignment: a member computes the target with its own assignor.

The design is the seed's (KIP-848 for Connect, and the client-side assignment
proposal): the coordinator keeps membership and reconciliation, chooses one
member to compute, tells it with COMPUTE_ASSIGNMENT, hands it the group with
PrepareAssignment and validates what it installs with InstallAssignment.

Choosing:
- the group's assignor is one that every member supports with overlapping
  version ranges; among several, the one ranked best over all members'
  preference lists (ties by name);
- the computing member is one whose version range covers every other
  member's (the seed's example: A[1-5], B[3-4], C[2-4] picks A); the previous
  choice is kept while it stays valid, a member that let a computation time
  out is tried last, and ties go to the smallest member id;
- where no member covers every range, the group reports the error
  (DescribeGroups' assignment_error) rather than stalling silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from .context import Context, GroupConfig, Result
from .errors import (
    InvalidAssignment,
    InvalidRequest,
    UnknownMemberId,
    UnsupportedAssignor,
)
from .membership import current_member
from .messages import (
    AssignmentMemberView,
    InstallAssignment,
    PrepareAssignment,
    PrepareAssignmentResponse,
)
from .model import EMPTY_ASSIGNMENT, Assignment, ClientAssignor, Computation, Group, Member, PreparedSnapshot
from .records import (
    AssignorStateRecord,
    ComputationRecord,
    Record,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
)
from .subscription import member_topic_ids
from .target_assignment import preferred_assignor
from .validation import validate_group_id, validate_id


def uses_client_assignors(members: Iterable[Member]) -> bool:
    return any(m.client_assignors for m in members)


def _entry(member: Member, name: str) -> ClientAssignor | None:
    for assignor in member.client_assignors:
        if assignor.name == name:
            return assignor
    return None


def choose_assignor(members: Sequence[Member]) -> str | None:
    """The client-side assignor every member supports with overlapping versions."""
    if not members or not all(m.client_assignors for m in members):
        return None
    common = set.intersection(*({a.name for a in m.client_assignors} for m in members))
    ranked: list[tuple[int, str]] = []
    for name in common:
        entries = [e for e in (_entry(m, name) for m in members) if e is not None]
        if max(e.minimum_version for e in entries) > min(e.maximum_version for e in entries):
            continue
        rank = sum([a.name for a in m.client_assignors].index(name) for m in members)
        ranked.append((rank, name))
    return min(ranked)[1] if ranked else None


def assignor_in_use(group: Group, config: GroupConfig) -> str:
    """The assignor the group's target comes from: the client-side one its members agree on
    ("" when they agree on none), else the server assignor most of them ask for."""
    members = list(group.members.values())
    if uses_client_assignors(members):
        return choose_assignor(members) or ""
    return preferred_assignor(group.server_assignor_counts(), config)


def choose_member(
    members: Sequence[Member], name: str, previous: str | None, timed_out: frozenset[str]
) -> str | None:
    """A member whose version range for `name` covers every other member's."""
    entries = {m.member_id: e for m in members if (e := _entry(m, name)) is not None}
    if not entries:
        return None
    lowest = min(e.minimum_version for e in entries.values())
    highest = max(e.maximum_version for e in entries.values())
    covering = sorted(
        mid for mid, e in entries.items() if e.minimum_version <= lowest and e.maximum_version >= highest
    )
    if not covering:
        return None
    preferred = [mid for mid in covering if mid not in timed_out] or covering
    if previous in preferred:
        return previous
    return preferred[0]


def describe_ranges(members: Sequence[Member], name: str) -> str:
    parts = []
    for m in sorted(members, key=lambda m: m.member_id):
        e = _entry(m, name)
        if e is not None:
            parts.append(f"{m.member_id}[{e.minimum_version}-{e.maximum_version}]")
    return ", ".join(parts)


def check_assignor_overlap(others: Sequence[Member], member: Member) -> None:
    """UNSUPPORTED_ASSIGNOR when `member` cannot share an assignor with the rest of the group."""
    if not others:
        return
    group_client_side = uses_client_assignors(others)
    if not member.client_assignors and not group_client_side:
        return
    if not member.client_assignors:
        raise UnsupportedAssignor(
            "The group computes its assignment with client-side assignors; the member must send "
            "ClientAssignors that overlap the group's."
        )
    if not group_client_side:
        raise UnsupportedAssignor(
            "The group uses a server-side assignor; a member with ClientAssignors cannot join it."
        )
    if choose_assignor([*others, member]) is None:
        theirs = sorted(set.intersection(*({a.name for a in m.client_assignors} for m in others)))
        mine = [f"{a.name}[{a.minimum_version}-{a.maximum_version}]" for a in member.client_assignors]
        raise UnsupportedAssignor(
            f"None of the member's client assignors ({', '.join(mine)}) is supported, with an "
            f"overlapping version range, by every member of the group (common to them: "
            f"{', '.join(theirs) or 'none'})."
        )


def plan_computation(
    group: Group, members: Mapping[str, Member], ctx: Context
) -> tuple[list[Record], Computation | None]:
    """Keeps or (re)chooses the computing member of a group whose target is behind.

    Returns the records (soft computation state, and the group's error when no
    member can compute) and the computation now under way."""
    records: list[Record] = []
    current = group.computation
    expired = current is not None and ctx.now_ms >= current.deadline_ms
    timed_out = frozenset() if current is None else current.timed_out
    if current is not None and expired:
        timed_out = timed_out | {current.member_id}
    name = choose_assignor(list(members.values()))
    chosen = None
    error = ""
    if name is None:
        error = "No client-side assignor is supported by every member with overlapping versions."
    else:
        chosen = choose_member(
            list(members.values()), name, None if current is None else current.member_id, timed_out
        )
        if chosen is None:
            error = (
                f"No member supports every metadata version of assignor {name} in use "
                f"({describe_ranges(list(members.values()), name)}); a member covering all of them "
                "must join before a target can be computed."
            )
    if current is not None and not expired and chosen == current.member_id and name == current.assignor_name:
        # Still the right member, still within its time: the computation goes on.
        return records, current
    computation = None
    if chosen is not None and name is not None:
        computation = Computation(
            member_id=chosen,
            assignor_name=name,
            deadline_ms=ctx.now_ms + max(1, members[chosen].rebalance_timeout_ms),
            timed_out=timed_out & set(members),
        )
    if computation != current:
        records.append(ComputationRecord(computation))
    if error != group.assignment_error and (error or chosen is not None):
        records.append(AssignorStateRecord(group.assignor_state, error))
    return records, computation


def _check_caller(group: Group | None, group_id: str, member_id: str, member_epoch: int) -> Computation:
    """The checks of PrepareAssignment and InstallAssignment, in the seed's order."""
    validate_group_id(group_id)
    if not member_id:
        raise InvalidRequest("MemberId can't be empty.")
    validate_id("MemberId", member_id)
    if member_epoch < 0:
        raise InvalidRequest(f"MemberEpoch must be >= 0, got {member_epoch}.")
    current_member(group, group_id, member_id, member_epoch)
    assert group is not None
    computation = group.computation
    if computation is None or computation.member_id != member_id:
        raise UnknownMemberId(
            f"Member {member_id} is not the member chosen to compute the assignment of group {group_id}."
        )
    return computation


def prepare_assignment(
    group: Group | None, req: PrepareAssignment, ctx: Context
) -> Result[PrepareAssignmentResponse]:
    computation = _check_caller(group, req.group_id, req.member_id, req.member_epoch)
    assert group is not None
    views = []
    eligible: dict[str, frozenset[str]] = {}
    draining: set[str] = set()
    for member_id in sorted(group.members):
        member = group.members[member_id]
        entry = _entry(member, computation.assignor_name)
        assert entry is not None, "the chosen assignor is supported by every member"
        if member.draining:
            # A draining member is shown subscribing to nothing, so that any client
            # assignor gives it nothing, as the server-side ones do; an installation
            # that gives it something all the same is refused (`_validated`).
            topic_ids: frozenset[str] = frozenset()
            draining.add(member_id)
        else:
            topic_ids = member_topic_ids(
                ctx.image, member.subscribed_topic_names, member.subscribed_topic_regex
            )
        eligible[member_id] = topic_ids
        views.append(
            AssignmentMemberView(
                member_id=member_id,
                member_epoch=member.member_epoch,
                instance_id=member.instance_id,
                rack_id=member.rack_id,
                url=member.url,
                assignor=entry,
                subscribed_topic_ids=topic_ids,
                target=group.target_of(member_id),
                capacity=member.metadata.capacity,
                draining=member.draining,
            )
        )
    subscribed = set().union(*eligible.values()) if eligible else set()
    resources = {t: ctx.image.by_id[t].num_partitions for t in sorted(subscribed)}
    snapshot = PreparedSnapshot(
        group.group_epoch, computation.assignor_name, eligible, resources, frozenset(draining)
    )
    response = PrepareAssignmentResponse(
        group_epoch=group.group_epoch,
        assignor_name=computation.assignor_name,
        group_type=group.group_type,
        members=tuple(views),
        resources=resources,
        assignor_state=group.assignor_state,
        now_ms=ctx.now_ms,
    )
    return Result(response, (ComputationRecord(replace(computation, prepared=snapshot)),))


def install_assignment(group: Group | None, req: InstallAssignment, ctx: Context) -> Result[None]:
    computation = _check_caller(group, req.group_id, req.member_id, req.member_epoch)
    assert group is not None
    prepared = computation.prepared
    if prepared is None:
        raise InvalidAssignment("No assignment was prepared: call PrepareAssignment first.")
    if req.group_epoch != prepared.group_epoch or req.group_epoch <= group.assignment_epoch:
        raise InvalidAssignment(
            f"Stale group epoch {req.group_epoch}: the assignment must be computed for group epoch "
            f"{prepared.group_epoch} (the target is at epoch {group.assignment_epoch})."
        )
    records: list[Record] = []
    if req.error:
        # The assignor failed: the current target stays, for this epoch, and the group says why.
        message = f"Assignor {prepared.assignor_name} failed with error {req.error}: {req.error_message}"
        records.append(TargetAssignmentEpochRecord(req.group_epoch, ctx.now_ms))
        records.append(AssignorStateRecord(group.assignor_state, message[:1000]))
        records.append(ComputationRecord(None))
        return Result(None, tuple(records))

    given = _validated(req, prepared)
    for member_id in sorted(group.members):
        # Members that joined after the preparation get nothing yet: the group
        # epoch is ahead of this target, so another computation follows.
        new = given.get(member_id, EMPTY_ASSIGNMENT) if member_id in prepared.eligible else EMPTY_ASSIGNMENT
        if new != group.target_of(member_id):
            records.append(TargetAssignmentMemberRecord(member_id, new))
    records.append(TargetAssignmentEpochRecord(req.group_epoch, ctx.now_ms))
    if req.assignor_state != group.assignor_state or group.assignment_error:
        records.append(AssignorStateRecord(req.assignor_state, ""))
    records.append(ComputationRecord(None))
    return Result(None, tuple(records))


def _validated(req: InstallAssignment, prepared: PreparedSnapshot) -> dict[str, Assignment]:
    """The installation's per-member assignments, once every invariant holds."""
    if req.repeated:
        raise InvalidAssignment(f"{req.repeated[0]} is assigned twice.")
    owner: dict[tuple[str, int], str] = {}
    given: dict[str, Assignment] = {}

    def claim(who: str, assignment: Assignment, eligible: frozenset[str] | None) -> None:
        if who in prepared.draining and any(assignment.values()):
            raise InvalidAssignment(
                f"{_who(who)} is draining (GroupAdmin.DrainMember): it may be given nothing."
            )
        for topic_id, partitions in assignment.items():
            count = prepared.resources.get(topic_id)
            if count is None:
                raise InvalidAssignment(f"{_who(who)} is given resource {topic_id}, which is not assignable.")
            if eligible is not None and topic_id not in eligible:
                raise InvalidAssignment(f"{_who(who)} is given {topic_id}, which it does not subscribe to.")
            for partition in partitions:
                if not 0 <= partition < count:
                    raise InvalidAssignment(
                        f"{_who(who)} is given {topic_id}-{partition}, which does not exist."
                    )
                previous = owner.setdefault((topic_id, partition), who)
                if previous != who:
                    raise InvalidAssignment(
                        f"{topic_id}-{partition} is assigned twice ({_who(previous)} and {_who(who)})."
                    )

    for member_id, assignment in req.members:
        if member_id not in prepared.eligible:
            raise InvalidAssignment(
                f"Member {member_id} is not a member of the group at epoch {req.group_epoch}."
            )
        if member_id in given:
            raise InvalidAssignment(f"Member {member_id} is listed twice.")
        claim(member_id, assignment, prepared.eligible[member_id])
        given[member_id] = assignment
    claim("", req.unassigned, None)
    for topic_id, count in prepared.resources.items():
        for partition in range(count):
            if (topic_id, partition) not in owner:
                raise InvalidAssignment(
                    f"{topic_id}-{partition} is neither assigned nor held back: every resource of "
                    f"group epoch {req.group_epoch} must be."
                )
    return {m: a for m, a in given.items() if a}


def _who(member_id: str) -> str:
    return f"member {member_id}" if member_id else "the unassigned list"
