"""Records: the facts an operation produces, stored in one transaction.

One frozen dataclass per persisted fact, named after the entity, with its
tombstone spelled out (Kafka's ConsumerGroup*Key/Value record pairs). The shell
stores them; `replay` applies them to the in-memory group afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import Assignment, Computation, Member, MemberMetadata, MemberState
from .target_summary import ComputedSummary


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """The group exists at `group_epoch`, subscribed to topics hashing to `metadata_hash`."""

    group_epoch: int
    metadata_hash: int
    group_type: str


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    """The group is deleted."""


@dataclass(frozen=True, slots=True)
class MemberMetadataRecord:
    """A member's identity and subscription (its `MemberMetadata`)."""

    member_id: str
    metadata: MemberMetadata

    @classmethod
    def of(cls, member: Member) -> MemberMetadataRecord:
        return cls(member.member_id, member.metadata)


@dataclass(frozen=True, slots=True)
class MemberMetadataTombstone:
    member_id: str


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberRecord:
    """The partitions the target assignment gives one member."""

    member_id: str
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberTombstone:
    member_id: str


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochRecord:
    """The target assignment was computed for this group epoch.

    `computed_at_ms` is when (the operation's `now_ms`); it paces batched
    computations and is not stored, since a restart may reset it.

    `summary` is what a computation made in this process says of the targets
    it returned, for the group's keeper (target_summary.py): soft state too,
    never stored nor compared (a restarted group reads its targets once).
    """

    assignment_epoch: int
    computed_at_ms: int | None = None
    summary: ComputedSummary | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class CurrentAssignmentRecord:
    """Where a member is in its reconciliation: epochs, state, owned partitions."""

    member_id: str
    state: MemberState
    member_epoch: int
    previous_member_epoch: int
    assigned: Assignment
    pending_revocation: Assignment

    @classmethod
    def of(cls, member: Member) -> CurrentAssignmentRecord:
        return cls(
            member_id=member.member_id,
            state=member.state,
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            assigned=member.assigned,
            pending_revocation=member.pending_revocation,
        )


@dataclass(frozen=True, slots=True)
class CurrentAssignmentTombstone:
    member_id: str


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """A committed offset (Kafka's OffsetCommitKey/Value)."""

    topic_id: str
    partition: int
    offset: int
    metadata: str
    member_epoch: int
    commit_ms: int


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    topic_id: str
    partition: int


@dataclass(frozen=True, slots=True)
class AssignorStateRecord:
    """Client-side assignment: the state the last installation left, and the
    last computation error ("" when it succeeded)."""

    state: bytes
    error: str


@dataclass(frozen=True, slots=True)
class ConnectorsRecord:
    """A Connect group's connectors and their task counts (GroupAdmin.PutConnectors),
    replacing the previous set: Connect's config topic, as a record of the group."""

    connectors: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ComputationRecord:
    """Soft state, never stored: the client-side computation under way (None: none)."""

    computation: Computation | None


Record = (
    GroupMetadataRecord
    | GroupTombstone
    | MemberMetadataRecord
    | MemberMetadataTombstone
    | TargetAssignmentMemberRecord
    | TargetAssignmentMemberTombstone
    | TargetAssignmentEpochRecord
    | CurrentAssignmentRecord
    | CurrentAssignmentTombstone
    | AssignorStateRecord
    | ConnectorsRecord
    | ComputationRecord
    | OffsetCommitRecord
    | OffsetTombstone
)

#: Records the store skips: they only change memory.
SOFT_RECORDS = (ComputationRecord,)


def member_removal_records(member_id: str) -> list[Record]:
    """Tombstones for a member, in Kafka's order: current, target, metadata."""
    return [
        CurrentAssignmentTombstone(member_id),
        TargetAssignmentMemberTombstone(member_id),
        MemberMetadataTombstone(member_id),
    ]
