"""The target assignment: which member should own which partition.

Recomputed when the group epoch moves ahead of the assignment epoch. Only the
members whose target changed get a record, then the new assignment epoch is
recorded (Kafka's TargetAssignmentBuilder).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress, repeat
from operator import attrgetter, is_, is_not
from typing import cast

from .assignors import GroupAssignment, GroupSpec, MemberSpec, SubscriptionType, TargetSummary
from .assignors.leader import LeaderAssignor, with_leadership
from .assignors.redundant import assign_redundant
from .context import Context, GroupConfig, Result, ScheduleAssignment, TimerOp
from .errors import UnknownServerError
from .model import EMPTY_ASSIGNMENT, Assignment, Group, Member
from .records import Record, TargetAssignmentEpochRecord, TargetAssignmentMemberRecord
from .replicas import group_replicas, subscribed_with_copies, with_copies
from .subscription import group_topics, member_topic_ids
from .target_summary import ComputedSummary, TargetSummaryKeeper
from .topics import Topic, TopicsImage


def preferred_assignor(assignor_counts: Mapping[str, int], config: GroupConfig) -> str:
    """The most common server assignor among members, else the default.

    Ties go to the assignor listed first in the configuration.
    """
    best: str | None = None
    for name in config.assignors:
        count = assignor_counts.get(name, 0)
        if count and (best is None or count > assignor_counts[best]):
            best = name
    return best if best is not None else config.default_assignor


def next_assignment_ms(group: Group, ctx: Context) -> int:
    """When a pending target may be computed (batching, KIP-1263): at once after
    a quiet interval, else one interval after the last computation."""
    interval = ctx.config.assignment_interval_ms
    last = group.last_assignment_ms
    if interval <= 0 or last is None:
        return ctx.now_ms
    return max(ctx.now_ms, last + interval)


def assignment_due(group: Group, ctx: Context) -> bool:
    return next_assignment_ms(group, ctx) <= ctx.now_ms


def fits_inline(topics: Iterable[Topic], config: GroupConfig) -> bool:
    """Whether a target over `topics` is small enough to compute on the event loop
    (inside a heartbeat, or by the timer itself); bigger ones go to the shell's
    worker process, so that a big group's assignor never stalls other groups."""
    limit = config.inline_assignment_max_partitions
    return limit is None or sum(t.num_partitions for t in topics) <= limit


def assignor_counts_of(members: Iterable[Member]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for member in members:
        if member.server_assignor is not None:
            counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
    return counts


def group_spec(
    members: Mapping[str, Member],
    current_targets: Mapping[str, Assignment],
    image: TopicsImage,
    order: Iterable[str] | None = None,
) -> GroupSpec:
    """The assignor's input: members with their subscribed topic ids and current
    targets, in member id order (`order`, the group's sorted ids, when given):
    assignors hand partitions out by member id, and sorting ids that are already
    in order is linear where sorting them afresh took 1.3 ms for 10,000 members."""
    # Members with one subscription share one names tuple (canonical_names), so
    # the tuple's identity keys this cache: hashing 1,000 names per member is
    # what resolving subscriptions used to cost for big groups. (The tuples
    # outlive this loop: their members hold them.)
    resolved: dict[object, frozenset[str]] = {}
    specs: dict[str, MemberSpec] = {}
    withheld: dict[str, Assignment] = {}
    topic_ids: set[str] = set()
    target_of = current_targets.get
    for member_id in sorted(members) if order is None else order:
        # The metadata's slots, not Member's properties: a property is a call per member.
        metadata = members[member_id].metadata
        if metadata.draining:
            # Left out of the assignor's input altogether (rather than shown with no
            # subscription, which would make a homogeneous group heterogeneous and
            # change how every assignor balances the others): see GroupSpec.withheld.
            withheld[member_id] = target_of(member_id, EMPTY_ASSIGNMENT)
            continue
        names, regex = metadata.subscribed_topic_names, metadata.subscribed_topic_regex
        key = id(names) if regex is None else (id(names), regex)
        ids = resolved.get(key)
        if ids is None:
            ids = resolved[key] = member_topic_ids(image, names, regex)
            topic_ids.update(ids)
        specs[member_id] = MemberSpec(
            member_id,
            metadata.instance_id,
            metadata.rack_id,
            ids,
            target_of(member_id, EMPTY_ASSIGNMENT),
            metadata.capacity,
        )
    # Each distinct subscription was resolved once: comparing those few sets tells
    # the assignors whether the group is homogeneous without a pass over members.
    distinct = set(resolved.values())
    kind = SubscriptionType.HOMOGENEOUS if len(distinct) <= 1 else SubscriptionType.HETEROGENEOUS
    topics = {t: image.by_id[t] for t in sorted(topic_ids)}
    replicas = group_replicas(members[m] for m in specs)
    if replicas > 1:
        topics = with_copies(topics, replicas)
        specs = {
            m: replace(s, subscribed_topic_ids=subscribed_with_copies(s.subscribed_topic_ids, replicas))
            for m, s in specs.items()
        }
    return GroupSpec(
        members=specs,
        topics=topics,
        subscription_type=kind,
        withheld=withheld,
        replicas=replicas,
        # Known here, where every member's spec is built: the assignors need no pass to find out.
        weighted=any(s.capacity != 1 for s in specs.values()),
        # Built from the group's sorted ids (or sorted here), and the copies keep that order.
        members_in_id_order=True,
    )


def assign_target(
    spec: GroupSpec, assignor_name: str, config: GroupConfig, group_epoch: int, now_ms: int | None = None
) -> tuple[list[Record], Mapping[str, Assignment]]:
    """Runs the assignor on `spec`; returns the records of what changed and the new targets.

    Depends on nothing but its arguments, so the shell may run it in another
    process (inputs and records are plain data).
    """
    records, targets, _ = assign_summarised(spec, assignor_name, config, group_epoch, now_ms)
    return records, targets


def assign_summarised(
    spec: GroupSpec, assignor_name: str, config: GroupConfig, group_epoch: int, now_ms: int | None = None
) -> tuple[list[Record], Mapping[str, Assignment], TargetSummary | None]:
    """`assign_target`, and the assignor's summary of the new targets of the
    spec's members (aligned with `spec.members`), when it gave one."""
    targets: Mapping[str, Assignment]
    summary: TargetSummary | None = None
    try:
        assignor = config.assignors[assignor_name]
        if isinstance(assignor, LeaderAssignor):
            # A leader group's one resource, leadership, is in no topic registry: it is
            # added here, where every path to a server-side target passes (docs/leader-election.md).
            # One leader, whatever `replicas` says: copies of leadership would be leaders too.
            targets = assignor.assign(with_leadership(spec))
        elif spec.replicas > 1:
            targets = assign_redundant(spec, spec.replicas)
        else:
            targets = assignor.assign(spec)
    except Exception as e:
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch} with assignor "
            f"{assignor_name}: {e}"
        ) from e

    # In C passes over the members, which took this from 3-5 ms to under 1 for
    # 10,000 members.
    members = spec.members
    olds = [m.current for m in members.values()]
    ids = list(members)
    if isinstance(targets, GroupAssignment) and targets.member_ids == ids:
        # The assignor answered in the spec's order (the built-in ones do): no
        # dict and no lookups. list == list compares by identity first.
        news = list(targets.targets)
        summary = targets.summary
    else:
        targets = dict(targets)
        found = list(map(targets.get, ids, repeat(None)))
        absent = list(map(is_, found, repeat(None)))
        if any(absent):  # an assignor left members out: they get nothing
            for i in compress(range(len(ids)), absent):
                found[i] = targets[ids[i]] = EMPTY_ASSIGNMENT
        news = cast(list[Assignment], found)  # no None left
    # Assignors return the very object for an unchanged target: skip the deep compare.
    records: list[Record] = [
        TargetAssignmentMemberRecord(member_id, new)
        for member_id, new, old in compress(zip(ids, news, olds, strict=True), map(is_not, news, olds))
        if new != old
    ]
    if spec.withheld:
        # Draining members get nothing: each that still has a target gets an empty one.
        records.extend(
            TargetAssignmentMemberRecord(member_id, EMPTY_ASSIGNMENT)
            for member_id, current in spec.withheld.items()
            if current
        )
        targets = {**targets, **dict.fromkeys(spec.withheld, EMPTY_ASSIGNMENT)}
    # In member id order (target_after relies on it): linear when the spec is in
    # id order, as the coordinator's are, and usually only a few records anyway.
    records.sort(key=_member_id)
    records.append(TargetAssignmentEpochRecord(group_epoch, now_ms))
    return records, targets, summary


def target_after(records: list[Record], member_id: str, before: Assignment) -> Assignment:
    """A member's target once the records of assign_target apply (member records
    in member id order, then the epoch record): its record's, else `before`, the
    target the assignor was given. A binary search, where reading the new
    targets by member id may build a dict of every member."""
    member_records = cast(list[TargetAssignmentMemberRecord], records[:-1])
    i = bisect_left(member_records, member_id, key=_member_id)
    if i < len(member_records) and member_records[i].member_id == member_id:
        return member_records[i].partitions
    return before


_member_id = attrgetter("member_id")


def compute_target_assignment(
    members: Mapping[str, Member],
    current_targets: Mapping[str, Assignment],
    image: TopicsImage,
    assignor_name: str,
    config: GroupConfig,
    group_epoch: int,
    now_ms: int | None = None,
    order: Iterable[str] | None = None,
) -> tuple[list[Record], Mapping[str, Assignment]]:
    """Runs the assignor; returns the records of what changed and the new targets.
    `order`: the ids of `members`, sorted (else they are sorted here)."""
    spec = group_spec(members, current_targets, image, order)
    return assign_target(spec, assignor_name, config, group_epoch, now_ms)


@dataclass(frozen=True, slots=True)
class PendingAssignment:
    """Everything computing a group's pending target needs, as plain data."""

    group_epoch: int
    now_ms: int
    assignor: str
    spec: GroupSpec

    def fits_inline(self, config: GroupConfig) -> bool:
        return fits_inline(self.spec.topics.values(), config)

    def compute(self, config: GroupConfig) -> list[Record]:
        """The records of the new target (pure; may run in another process)."""
        records, _ = assign_target(self.spec, self.assignor, config, self.group_epoch, self.now_ms)
        return records

    def compute_told(
        self, config: GroupConfig, keeper: TargetSummaryKeeper | None, topics_key: Hashable
    ) -> tuple[list[Record], ComputedSummary | None]:
        """`compute`, told the summary of the current targets that `keeper`
        (whoever keeps them: target_summary.py) vouches for over the topics
        `topics_key` names, if any; and what the assignor says of the new
        targets, for the keeper (None when it says nothing)."""
        member_ids = list(self.spec.members)
        spec = self.spec
        told = None if keeper is None else keeper.summary(member_ids, topics_key)
        if told is not None:
            spec = replace(spec, current_summary=told)
        records, _, summary = assign_summarised(spec, self.assignor, config, self.group_epoch, self.now_ms)
        return records, None if summary is None else ComputedSummary(member_ids, summary, topics_key)

    def compute_kept(self, config: GroupConfig, keeper: TargetSummaryKeeper | None) -> list[Record]:
        """`compute_told` for a computation made where its records are replayed
        at once (inline), whose group keeps the summary: the new one goes to the
        group's keeper with the epoch record. The topics are named by their
        very (immutable) objects."""
        records, computed = self.compute_told(config, keeper, tuple(self.spec.topics.values()))
        if computed is not None:
            epoch_record = cast(TargetAssignmentEpochRecord, records[-1])
            records[-1] = replace(epoch_record, summary=computed)
        return records


@dataclass(frozen=True, slots=True)
class PendingTarget:
    """A pending target computation before its members are read: what the
    group's indexes tell without a pass over the members. The shell sends a big
    group's computation to its worker process from this and only the members
    that changed since the last one (10,000 members took 8 - 19 ms to read on
    the event loop, once per assignment interval, stalling every other group)."""

    group_epoch: int
    now_ms: int
    assignor: str
    #: The existing topics any member subscribes to, by id (sorted): all that
    #: resolving any member's subscription can need.
    topics: Mapping[str, Topic]

    def fits_inline(self, config: GroupConfig) -> bool:
        return fits_inline(self.topics.values(), config)

    def with_members(
        self, members: Mapping[str, Member], current_targets: Mapping[str, Assignment], order: Iterable[str]
    ) -> PendingAssignment:
        """The computation over `members` (their subscriptions resolved against
        `topics`, the same as against the whole image) and their current targets;
        `order`: their ids, sorted."""
        spec = group_spec(members, current_targets, TopicsImage(self.topics.values()), order)
        return PendingAssignment(self.group_epoch, self.now_ms, self.assignor, spec)


def pending_target(group: Group, ctx: Context) -> PendingTarget | None:
    """The target computation a group whose epoch moved ahead of it needs, or None;
    without a pass over its members."""
    if group.group_epoch <= group.assignment_epoch:
        return None
    if group.has_client_assignors():
        return None  # a member computes this group's target (client_assignment.py)
    assignor = preferred_assignor(group.server_assignor_counts(), ctx.config)
    topics = group_topics(ctx.image, group.subscribed_topic_names(), group.subscribed_regexes())
    return PendingTarget(group.group_epoch, ctx.now_ms, assignor, {t.topic_id: t for t in topics})


def pending_assignment(group: Group, ctx: Context) -> PendingAssignment | None:
    """The target computation a group whose epoch moved ahead of it needs, or None."""
    pending = pending_target(group, ctx)
    if pending is None:
        return None
    return pending.with_members(group.members, group.target, group.member_ids_in_order())


def compute_pending_assignment(group: Group, ctx: Context) -> list[Record]:
    """The target for a group whose epoch moved ahead of it (the batching timer's job)."""
    pending = pending_assignment(group, ctx)
    return [] if pending is None else pending.compute(ctx.config)


def on_assignment_timer(
    group: Group | None, ctx: Context, *, computing: bool = False
) -> Result[bool | PendingTarget]:
    """The assignment timer: when a group's pending target is computed, and where.

    The one statement of these rules; the runtime and the tests' engine harness both
    run it. Nothing for a group whose target is current or computed by its members.
    One computation of a group at a time (`computing`: one is under way elsewhere;
    installing it schedules the next if the group moved on meanwhile). At most one per
    assignment interval (KIP-1263's batching): a timer that fires early is re-armed. A
    target that fits inline is computed now, and the response says whether it changed
    anything; a bigger one is returned as the `PendingTarget` for the shell to compute
    elsewhere and install with `install_computed_target`.
    """
    if group is None or computing:
        return Result(False)
    pending = pending_target(group, ctx)
    if pending is None:
        return Result(False)
    if not assignment_due(group, ctx):
        return Result(False, (), (ScheduleAssignment(next_assignment_ms(group, ctx)),))
    if not pending.fits_inline(ctx.config):
        return Result(pending)
    computation = pending.with_members(group.members, group.target, group.member_ids_in_order())
    records = computation.compute_kept(ctx.config, group.target_summary)
    return Result(bool(records), tuple(records))


def install_computed_target(group: Group | None, records: Sequence[Record], ctx: Context) -> Result[bool]:
    """Installs a target computed elsewhere from an earlier read of the group.

    The group kept serving heartbeats while it was computed (Kafka's offloaded
    assignment, KIP-1263), so the records are checked against it now: nothing is
    installed if a target as new was installed meanwhile or the group's members
    took over assigning; targets of members that left meanwhile are dropped (a
    target is never given to a member that is not there). Members that joined
    meanwhile, and any other change, moved the group epoch on: the next
    computation is scheduled. A target only says what members should own; the
    reconciliation still revokes before it assigns, so an older read cannot give
    a partition two owners."""
    if not records or group is None or group.has_client_assignors():
        return Result(False)
    epoch_record = records[-1]
    if not isinstance(epoch_record, TargetAssignmentEpochRecord):
        raise UnknownServerError("A computed target must end with its epoch record.")
    if group.assignment_epoch >= epoch_record.assignment_epoch:
        return Result(False)
    members = group.members
    kept: list[Record] = [
        r for r in records[:-1] if not isinstance(r, TargetAssignmentMemberRecord) or r.member_id in members
    ]
    if len(kept) < len(records) - 1 and group.group_epoch == epoch_record.assignment_epoch:
        # A member left meanwhile without moving the group epoch: a static member replaced
        # by a new one under its instance id, which inherited its old target. Installed,
        # the departed member's new target would be lost (partitions given to nobody) and
        # the replacement's inherited one could overlap the others' new targets (each
        # waiting for the other's partitions), with no epoch bump to compute again. Compute
        # again now for the members there instead (found by the offloaded state machine,
        # tests/unit/reconciler/test_offloaded_properties.py). When the epoch moved on,
        # the next computation is scheduled below and mends what this one leaves.
        return Result(False, (), (ScheduleAssignment(ctx.now_ms),))
    kept.append(epoch_record)
    timers: tuple[TimerOp, ...] = ()
    if group.group_epoch > epoch_record.assignment_epoch:
        interval = max(ctx.config.assignment_interval_ms, 0)
        timers = (ScheduleAssignment(ctx.now_ms + interval),)
    return Result(True, tuple(kept), timers)
