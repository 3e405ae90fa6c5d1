"""Group history: the events of a group's changes, each with its reason.

Derived from the records an operation produced, before they are stored, so
that the shell stores them in the same transaction as the change
(`derive_events`). Pure: the group as it was, the records, the operation's
cause and time in, events out. A heartbeat that changes nothing produces no
record, so it produces no event either.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any, Literal

from .client_assignment import assignor_in_use
from .context import GroupConfig
from .model import (
    EMPTY_ASSIGNMENT,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    Group,
    GroupState,
    MemberMetadata,
    MemberState,
    difference,
    partition_count,
)
from .records import (
    AssignorStateRecord,
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
from .topics import TopicsImage


class EventType(IntEnum):
    """GroupEventType in proto/regroup/v1/admin.proto (same numbers)."""

    GROUP_CREATED = 1
    GROUP_DELETED = 2
    MEMBER_JOINED = 3
    MEMBER_LEFT = 4
    MEMBER_LEFT_TEMPORARILY = 5
    MEMBER_FENCED = 6
    SESSION_EXPIRED = 7
    REBALANCE_TIMED_OUT = 8
    SUBSCRIPTION_CHANGED = 9
    ASSIGNOR_CHANGED = 10
    TOPIC_CREATED = 11
    TOPIC_GROWN = 12
    TOPIC_DELETED = 13
    GROUP_EPOCH_BUMPED = 14
    TARGET_COMPUTED = 15
    MEMBER_RECONCILED = 16
    GROUP_STABLE = 17
    ASSIGNMENT_INSTALLED = 18
    ASSIGNMENT_REFUSED = 19
    OFFSETS_RESET = 20
    CONNECTORS_CHANGED = 21
    MEMBER_DRAINING = 22
    MEMBER_DRAINED = 23
    MEMBER_UNDRAINED = 24


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """One event of a group's history (GroupEvent in admin.proto).

    `sequence` is 0 until the store gives it one (increasing per group, not
    contiguous); `timestamp_ms` is wall-clock epoch ms.
    """

    type: EventType
    timestamp_ms: int
    group_epoch: int
    reason: str = ""
    message: str = ""
    previous_group_epoch: int = 0
    member_id: str = ""
    instance_id: str = ""
    member_epoch: int = 0
    topic_name: str = ""
    partition_count: int = 0
    assignor: str = ""
    duration_ms: int = 0
    partitions_moved: int = 0
    sequence: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class TopicChange:
    """A topic created, grown or deleted (its partition count after; 0 once deleted)."""

    name: str
    kind: Literal["created", "grown", "deleted"]
    partition_count: int


@dataclass(frozen=True, slots=True)
class Circumstances:
    """What the records alone do not tell, given by the shell that ran the operation."""

    #: The changes of topics the group subscribes to that these records take in (a
    #: metadata refresh's why; also a join's or a leave's that took them in first).
    topic_changes: tuple[TopicChange, ...] = ()
    #: The member that asked (InstallAssignment's caller).
    member_id: str = ""
    #: How long the target took to compute, when measured (ms).
    compute_ms: int = 0
    #: When the group's epoch was bumped and it has not been Stable since (wall ms;
    #: None: not known to this process, as after a restart).
    unsettled_since_ms: int | None = None
    #: ResetOffsets: to_offset, shift_by or delete.
    reset_mode: str = ""


NO_CIRCUMSTANCES = Circumstances()

#: Why a group's epoch was bumped, by the operation's cause, when the records alone do
#: not tell (a member joined, left or changed its metadata).
BUMP_CAUSES = {
    "metadata_refresh": "topics_changed",
    "connectors_changed": "connectors_changed",
    "session_timeout": "session_expired",
    "rebalance_timeout": "rebalance_timed_out",
    "install_assignment": "assignment_installed",
    "delete": "group_deleted",
    "drain": "member_draining",
    "undrain": "member_undrained",
}

#: The event of a member removed by the coordinator, by the operation's cause.
_REMOVALS = {
    "leave": (EventType.MEMBER_LEFT, "left"),
    "session_timeout": (EventType.SESSION_EXPIRED, "session_expired"),
    "rebalance_timeout": (EventType.REBALANCE_TIMED_OUT, "rebalance_timed_out"),
}

_TOPIC_EVENTS = {
    "created": EventType.TOPIC_CREATED,
    "grown": EventType.TOPIC_GROWN,
    "deleted": EventType.TOPIC_DELETED,
}


def derive_events(
    group: Group | None,
    group_id: str,
    records: Sequence[Record],
    cause: str,
    now_ms: int,
    config: GroupConfig,
    circumstances: Circumstances = NO_CIRCUMSTANCES,
) -> list[GroupEvent]:
    """The events of `records`, which the operation `cause` produced on `group` (as it
    was before them) at `now_ms`, in the order of the changes."""
    if not records:
        return []
    return _Derivation(group, group_id, records, cause, now_ms, config, circumstances).run()


class _Derivation:
    """One operation's records walked once, with what they changed so far."""

    def __init__(
        self,
        group: Group | None,
        group_id: str,
        records: Sequence[Record],
        cause: str,
        now_ms: int,
        config: GroupConfig,
        circumstances: Circumstances,
    ) -> None:
        self.group = group
        self.group_id = group_id
        self.records = records
        self.cause = cause
        self.now_ms = now_ms
        self.config = config
        self.circumstances = circumstances
        self.events: list[GroupEvent] = []
        self.epoch = 0 if group is None else group.group_epoch
        self.assignment_epoch = 0 if group is None else group.assignment_epoch
        self.exists = group is not None
        #: Members' metadata as these records left it (None: removed).
        self.metadata: dict[str, MemberMetadata | None] = {}
        #: Members' current assignment as these records left it (None: removed).
        self.current: dict[str, CurrentAssignmentRecord | None] = {}
        #: Targets as these records left them.
        self.targets: dict[str, Assignment] = {}
        self.moved = 0
        self.bump_index: int | None = None
        self.member_cause = ""  # why the epoch moved, as the member records tell it
        self.offsets_changed = 0
        #: The last current-assignment record of each member (its reconciled event is there).
        self.last_current = {
            r.member_id: i for i, r in enumerate(records) if type(r) is CurrentAssignmentRecord
        }

    # -- the walk ------------------------------------------------------------

    def run(self) -> list[GroupEvent]:
        if not self.exists and any(type(r) is GroupMetadataRecord for r in self.records):
            self.exists = True
            first = next(r for r in self.records if type(r) is GroupMetadataRecord)
            assert isinstance(first, GroupMetadataRecord)
            self._add(
                EventType.GROUP_CREATED,
                reason=self.cause,
                message=f"The {first.group_type} group was created.",
                epoch=first.group_epoch,
            )
        for change in self.circumstances.topic_changes:
            self._topic_changed(change)
        for index, record in enumerate(self.records):
            self._record(index, record)
        if self.offsets_changed and self.cause == "reset_offsets":
            self._add(
                EventType.OFFSETS_RESET,
                reason=self.circumstances.reset_mode,
                partition_count=self.offsets_changed,
                message=f"Committed offsets of {self.offsets_changed} partitions reset"
                + (f" ({self.circumstances.reset_mode})." if self.circumstances.reset_mode else "."),
            )
        self._name_bump()
        if self.exists and self._became_stable():
            self._stable()
        return self.events

    def _record(self, index: int, record: Record) -> None:
        match record:
            case GroupMetadataRecord():
                self._group_metadata(record)
            case GroupTombstone():
                self.exists = False
                self._add(EventType.GROUP_DELETED, reason=self.cause, message="The group was deleted.")
            case MemberMetadataRecord():
                self._member_metadata(record)
            case MemberMetadataTombstone():
                self._member_removed(record.member_id)
            case TargetAssignmentMemberRecord():
                self._target(record.member_id, record.partitions)
            case TargetAssignmentMemberTombstone():
                self._target(record.member_id, EMPTY_ASSIGNMENT)
            case TargetAssignmentEpochRecord():
                self._target_computed(record.assignment_epoch)
            case CurrentAssignmentRecord():
                self._current(index, record)
            case CurrentAssignmentTombstone():
                self.current[record.member_id] = None
            case AssignorStateRecord() if record.error:
                self._add(
                    EventType.ASSIGNMENT_REFUSED,
                    reason="assignor_failed",
                    member_id=self.circumstances.member_id,
                    message=record.error,
                )
            case ConnectorsRecord():
                self._add(
                    EventType.CONNECTORS_CHANGED,
                    reason=self.cause,
                    message=f"The group's connectors are now {len(record.connectors)} "
                    f"({sum(tasks for _, tasks in record.connectors)} tasks).",
                )
            case OffsetCommitRecord() | OffsetTombstone():
                self.offsets_changed += 1
            case _:
                pass

    # -- group ---------------------------------------------------------------

    def _group_metadata(self, record: GroupMetadataRecord) -> None:
        self.exists = True
        if record.group_epoch == self.epoch:
            return
        previous, self.epoch = self.epoch, record.group_epoch
        self.bump_index = len(self.events)
        self._add(
            EventType.GROUP_EPOCH_BUMPED,
            previous_group_epoch=previous,
            message=f"Group epoch {previous} -> {record.group_epoch}.",
        )

    def _name_bump(self) -> None:
        """The bump's reason, once every record told what it could."""
        if self.bump_index is None:
            return
        reason = BUMP_CAUSES.get(self.cause) or self.member_cause or self.cause
        event = self.events[self.bump_index]
        self.events[self.bump_index] = replace(
            event, reason=reason, message=f"{event.message[:-1]} ({reason.replace('_', ' ')})."
        )
        # The changes that caused the bump come before it in the records; they are of the new epoch.
        for i in range(self.bump_index):
            if self.events[i].type is not EventType.GROUP_CREATED:
                self.events[i] = replace(self.events[i], group_epoch=event.group_epoch)

    def _topic_changed(self, change: TopicChange) -> None:
        counted = f" ({change.partition_count} partitions)" if change.kind != "deleted" else ""
        self._add(
            _TOPIC_EVENTS[change.kind],
            reason=change.kind,
            topic_name=change.name,
            partition_count=change.partition_count,
            message=f"Topic {change.name} was {change.kind}{counted}.",
        )

    # -- members -------------------------------------------------------------

    def _metadata_of(self, member_id: str) -> MemberMetadata | None:
        if member_id in self.metadata:
            return self.metadata[member_id]
        member = None if self.group is None else self.group.members.get(member_id)
        return None if member is None else member.metadata

    def _current_of(self, member_id: str) -> CurrentAssignmentRecord | None:
        if member_id in self.current:
            return self.current[member_id]
        member = None if self.group is None else self.group.members.get(member_id)
        return None if member is None else CurrentAssignmentRecord.of(member)

    def _member_metadata(self, record: MemberMetadataRecord) -> None:
        member_id, new = record.member_id, record.metadata
        old = self._metadata_of(member_id)
        self.metadata[member_id] = new
        if old is None:
            self._joined(member_id, new)
            return
        self.member_cause = self.member_cause or "member_metadata_changed"
        if (old.subscribed_topic_names, old.subscribed_topic_regex) != (
            new.subscribed_topic_names,
            new.subscribed_topic_regex,
        ):
            self._member(
                EventType.SUBSCRIPTION_CHANGED,
                member_id,
                new,
                message=f"Now subscribes to {_subscription(new)}.",
            )
        if (old.server_assignor, old.client_assignors) != (new.server_assignor, new.client_assignors):
            self._member(
                EventType.ASSIGNOR_CHANGED, member_id, new, message=f"Now asks for {_assignors(new)}."
            )
        if old.draining != new.draining:
            self._drain_changed(member_id, new)

    def _joined(self, member_id: str, metadata: MemberMetadata) -> None:
        self.member_cause = "member_joined"
        replaced = self._replaced_static_member(member_id, metadata)
        epoch_index = self.last_current.get(member_id)
        epoch = 0
        if epoch_index is not None:
            current = self.records[epoch_index]
            assert isinstance(current, CurrentAssignmentRecord)
            epoch = current.member_epoch
        message = f"Subscribes to {_subscription(metadata)}."
        if replaced:
            message = f"Rejoined as instance {metadata.instance_id}, replacing member {replaced}. {message}"
        self._member(
            EventType.MEMBER_JOINED,
            member_id,
            metadata,
            reason="static_member_rejoined" if replaced else "joined",
            member_epoch=epoch,
            message=message,
        )

    def _replaced_static_member(self, member_id: str, metadata: MemberMetadata) -> str:
        """The member a static member's new incarnation replaces (in these records), or ""."""
        if metadata.instance_id is None or self.group is None:
            return ""
        old = self.group.member_by_instance_id(metadata.instance_id)
        return "" if old is None or old.member_id == member_id else old.member_id

    def _member_removed(self, member_id: str) -> None:
        metadata = self._metadata_of(member_id)
        self.metadata[member_id] = None
        if self.cause == "delete" or metadata is None:
            return
        if self.cause == "heartbeat" and metadata.instance_id is not None:
            for r in self.records:
                if (
                    type(r) is MemberMetadataRecord
                    and r.member_id != member_id
                    and r.metadata.instance_id == metadata.instance_id
                ):
                    return  # replaced by the instance's new incarnation: its join says so
        kind, reason = _REMOVALS.get(self.cause, (EventType.MEMBER_FENCED, self.cause))
        self.member_cause = self.member_cause or (
            "member_left" if kind is EventType.MEMBER_LEFT else "member_fenced"
        )
        member = None if self.group is None else self.group.members.get(member_id)
        self._member(
            kind,
            member_id,
            metadata,
            reason=reason,
            member_epoch=0 if member is None else member.member_epoch,
            message=_REMOVAL_MESSAGES.get(kind, f"Removed by the coordinator ({reason})."),
        )

    def _drain_changed(self, member_id: str, metadata: MemberMetadata) -> None:
        if not metadata.draining:
            self._member(EventType.MEMBER_UNDRAINED, member_id, metadata, message="Back in service.")
            return
        self._member(
            EventType.MEMBER_DRAINING,
            member_id,
            metadata,
            message="Draining: the assignor gives it nothing; its partitions are revoked, then reassigned.",
        )
        current = self._current_of(member_id)
        if current is None or not (current.assigned or current.pending_revocation):
            self._member(EventType.MEMBER_DRAINED, member_id, metadata, message="Drained: it owns nothing.")

    def _current(self, index: int, record: CurrentAssignmentRecord) -> None:
        member_id = record.member_id
        before = self._current_of(member_id)
        self.current[member_id] = record
        metadata = self._metadata_of(member_id)
        if metadata is None or self.last_current.get(member_id) != index:
            return
        away = record.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH
        if away:
            self.member_cause = self.member_cause or "member_left"
            self._member(
                EventType.MEMBER_LEFT_TEMPORARILY,
                member_id,
                metadata,
                reason="left_temporarily",
                member_epoch=record.member_epoch,
                message="A static member left for now: its partitions wait for its return "
                "until its session times out.",
            )
        owned_before = before is not None and bool(before.assigned or before.pending_revocation)
        if metadata.draining and owned_before and not (record.assigned or record.pending_revocation):
            # Also when it leaves for now: what it was still revoking is given up with it.
            self._member(EventType.MEMBER_DRAINED, member_id, metadata, message="Drained: it owns nothing.")
        if (
            not away
            and _reconciled(record, self.assignment_epoch)
            and not (before is not None and _reconciled(before, self.assignment_epoch))
        ):
            self._member(
                EventType.MEMBER_RECONCILED,
                member_id,
                metadata,
                member_epoch=record.member_epoch,
                partition_count=partition_count(record.assigned),
                message=f"Reached the target at epoch {record.member_epoch} "
                f"({partition_count(record.assigned)} partitions).",
            )

    # -- targets -------------------------------------------------------------

    def _target(self, member_id: str, partitions: Assignment) -> None:
        old = self.targets.get(member_id)
        if old is None:
            old = EMPTY_ASSIGNMENT if self.group is None else self.group.target_of(member_id)
        self.targets[member_id] = partitions
        self.moved += partition_count(difference(partitions, old))

    def _target_computed(self, assignment_epoch: int) -> None:
        self.assignment_epoch = assignment_epoch
        if self.cause == "install_assignment":
            installed = assignment_epoch == self.epoch and not any(
                type(r) is AssignorStateRecord and r.error for r in self.records
            )
            if not installed:
                return  # the assignor failed: its refusal is the AssignorStateRecord's event
        assignor = self._assignor()
        self._add(
            EventType.TARGET_COMPUTED,
            epoch=assignment_epoch,
            assignor=assignor,
            duration_ms=self.circumstances.compute_ms,
            partitions_moved=self.moved,
            message=f"Target computed for epoch {assignment_epoch} by {assignor or 'the assignor'}: "
            f"{self.moved} partitions moved.",
        )
        if self.cause == "install_assignment":
            self._add(
                EventType.ASSIGNMENT_INSTALLED,
                epoch=assignment_epoch,
                member_id=self.circumstances.member_id,
                assignor=assignor,
                message=f"Client-side assignment installed by {self.circumstances.member_id or 'a member'}.",
            )
        self.moved = 0

    def _assignor(self) -> str:
        if self.group is None:
            return self.config.default_assignor
        return assignor_in_use(self.group, self.config)

    # -- stable --------------------------------------------------------------

    def _became_stable(self) -> bool:
        """Whether the group is Stable after these records and was not before (or was,
        at an earlier epoch): projected from the records, since they are not applied yet."""
        group = self.group
        before_stable = group is not None and group.state() is GroupState.STABLE
        if before_stable and group is not None and group.group_epoch == self.epoch:
            return False
        if self.epoch > self.assignment_epoch:
            return False
        alive = 0 if group is None else len(group.members)
        stable = 0 if group is None else group.stable_count(self.assignment_epoch)
        touched = set(self.metadata) | set(self.current)
        for member_id in touched:
            member = None if group is None else group.members.get(member_id)
            if member is not None:
                alive -= 1
                stable -= _stable_at(member.state, member.member_epoch, self.assignment_epoch)
            if self._metadata_of(member_id) is None:
                continue
            alive += 1
            current = self._current_of(member_id)
            if current is None:
                stable += self.assignment_epoch == 0  # replayed as a fresh member: STABLE at epoch 0
            else:
                stable += _stable_at(current.state, current.member_epoch, self.assignment_epoch)
        return alive > 0 and stable == alive

    def _stable(self) -> None:
        since = self.circumstances.unsettled_since_ms
        if self.bump_index is not None:
            since = self.now_ms
        duration = 0 if since is None else max(0, self.now_ms - since)
        self._add(
            EventType.GROUP_STABLE,
            duration_ms=duration,
            message=f"Stable at epoch {self.epoch}"
            + (f", {duration} ms after the epoch bump." if since is not None else "."),
        )

    # -- building ------------------------------------------------------------

    def _member(
        self,
        kind: EventType,
        member_id: str,
        metadata: MemberMetadata,
        *,
        reason: str = "",
        member_epoch: int = 0,
        partition_count: int = 0,
        message: str = "",
    ) -> None:
        self._add(
            kind,
            reason=reason,
            member_id=member_id,
            instance_id=metadata.instance_id or "",
            member_epoch=member_epoch,
            partition_count=partition_count,
            message=message,
        )

    def _add(self, kind: EventType, *, epoch: int | None = None, **fields: Any) -> None:
        self.events.append(
            GroupEvent(
                type=kind,
                timestamp_ms=self.now_ms,
                group_epoch=self.epoch if epoch is None else epoch,
                **fields,
            )
        )


_REMOVAL_MESSAGES = {
    EventType.MEMBER_LEFT: "Left the group.",
    EventType.SESSION_EXPIRED: "Its session expired: removed from the group.",
    EventType.REBALANCE_TIMED_OUT: "Did not revoke within its rebalance timeout: removed from the group.",
}


def _stable_at(state: MemberState, member_epoch: int, epoch: int) -> int:
    return int(state is MemberState.STABLE and member_epoch == epoch)


def _reconciled(current: CurrentAssignmentRecord, epoch: int) -> bool:
    return current.state is MemberState.STABLE and current.member_epoch == epoch and epoch > 0


def _subscription(metadata: MemberMetadata) -> str:
    if metadata.subscribed_topic_regex is not None:
        return f"topics matching /{metadata.subscribed_topic_regex}/"
    names = metadata.subscribed_topic_names
    if not names:
        return "nothing"
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return shown


def _assignors(metadata: MemberMetadata) -> str:
    if metadata.client_assignors:
        return "client-side assignors " + ", ".join(a.name for a in metadata.client_assignors)
    return f"assignor {metadata.server_assignor or '(default)'}"


def topic_changes(old: TopicsImage, new: TopicsImage, names: Iterable[str]) -> dict[str, TopicChange]:
    """What happened to each named topic between two images: created, grown or deleted
    (a topic whose partition count did not grow, only its racks, is left out)."""
    out: dict[str, TopicChange] = {}
    for name in names:
        before, after = old.by_name.get(name), new.by_name.get(name)
        if after is None:
            if before is not None:
                out[name] = TopicChange(name, "deleted", 0)
        elif before is None or before.topic_id != after.topic_id:
            out[name] = TopicChange(name, "created", after.num_partitions)
        elif after.num_partitions > before.num_partitions:
            out[name] = TopicChange(name, "grown", after.num_partitions)
    return out
