"""Committed offsets, fenced by member epoch and by ownership.

Kafka's rules (OffsetMetadataManager.validateOffsetCommit): an empty member id
with a negative epoch is an admin commit, accepted only while the group has no
members (and it creates the group if needed); otherwise the member must exist
(UNKNOWN_MEMBER_ID) and its epoch must be exactly the current one
(STALE_MEMBER_EPOCH). Beyond Kafka, each partition must be owned by the
committing member now (assigned, or pending revocation: a member commits what
it is giving up before it acknowledges the revocation), otherwise that
partition alone is refused with PARTITION_NOT_OWNED: a former owner is a
zombie and its progress must not overwrite the new owner's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .context import Context, Result
from .errors import (
    ErrorCode,
    GroupIdNotFound,
    InvalidRequest,
    NonEmptyGroup,
    UnknownMemberId,
)
from .membership import current_member
from .model import CONSUMER_GROUP_TYPE, CommittedOffset, Group, Member
from .records import GroupMetadataRecord, OffsetCommitRecord, OffsetTombstone, Record
from .replicas import copy_held, holds_copies, is_copy, split
from .topics import Topic
from .validation import validate_group_id, validate_id

#: Kafka's offset.metadata.max.bytes.
MAX_METADATA_BYTES = 4096
MAX_PARTITIONS_PER_REQUEST = 100_000


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    #: The topic id, resolved by the shell ("" when the topic is unknown).
    topic_id: str
    partition: int
    offset: int
    metadata: str


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    topic_id: str
    partition: int
    error: ErrorCode = ErrorCode.NONE
    message: str = ""


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic_id: str
    partition: int
    committed: CommittedOffset | None


def _is_admin(member_id: str, member_epoch: int) -> bool:
    return not member_id and member_epoch < 0


def _owns(member: Member, topic_id: str, partition: int) -> bool:
    for owned in (member.assigned, member.pending_revocation):
        partitions = owned.get(topic_id)
        if partitions is not None and partition in partitions:
            return True
    return False


def commit_offsets(
    group: Group | None,
    group_id: str,
    member_id: str,
    member_epoch: int,
    offsets: Sequence[OffsetToCommit],
    ctx: Context,
) -> Result[list[PartitionOutcome]]:
    validate_group_id(group_id)
    validate_id("MemberId", member_id)
    if len(offsets) > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(
            f"At most {MAX_PARTITIONS_PER_REQUEST} partitions per commit, got {len(offsets)}."
        )
    records: list[Record] = []
    member: Member | None = None
    if _is_admin(member_id, member_epoch):
        if group is not None and group.members:
            raise UnknownMemberId(
                f"Group {group_id} has {len(group.members)} members: an admin commit (no member id, "
                "epoch -1) is accepted only while the group is empty."
            )
        if group is None:
            records.append(GroupMetadataRecord(0, 0, CONSUMER_GROUP_TYPE))
        committed_epoch = -1
    else:
        if not member_id:
            raise InvalidRequest("MemberId can't be empty (use epoch -1 for an admin commit).")
        member = current_member(group, group_id, member_id, member_epoch)
        committed_epoch = member_epoch
    outcomes: list[PartitionOutcome] = []
    for o in offsets:
        refused = _check(o, member, ctx)
        if refused is not None:
            outcomes.append(PartitionOutcome(o.topic_id, o.partition, *refused))
            continue
        # In a redundant group each copy has its own progress, under its copy topic.
        key = o.topic_id if member is None else copy_held(member, o.topic_id, o.partition)
        records.append(
            OffsetCommitRecord(key, o.partition, o.offset, o.metadata, committed_epoch, ctx.now_ms)
        )
        outcomes.append(PartitionOutcome(o.topic_id, o.partition))
    if len(records) == 1 and isinstance(records[0], GroupMetadataRecord):
        records = []  # nothing committed: do not create the group for nothing
    return Result(outcomes, tuple(records))


def _check(o: OffsetToCommit, member: Member | None, ctx: Context) -> tuple[ErrorCode, str] | None:
    """Why this partition's commit is refused, or None."""
    topic = ctx.image.by_id.get(o.topic_id) if o.topic_id else None
    if topic is None or not 0 <= o.partition < topic.num_partitions:
        return (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"Partition {o.topic_id or '?'}-{o.partition} does not exist.",
        )
    if o.offset < 0:
        return ErrorCode.INVALID_REQUEST, f"Offset must be >= 0, got {o.offset}."
    if len(o.metadata.encode()) > MAX_METADATA_BYTES:
        return (
            ErrorCode.OFFSET_METADATA_TOO_LARGE,
            f"Offset metadata is longer than {MAX_METADATA_BYTES} bytes.",
        )
    if member is not None and not _owns(member, copy_held(member, o.topic_id, o.partition), o.partition):
        return ErrorCode.PARTITION_NOT_OWNED, (
            f"Member {member.member_id} does not own {topic.name}-{o.partition} at epoch "
            f"{member.member_epoch}; only its current owner may commit it."
        )
    return None


def fetch_offsets(
    group: Group | None,
    group_id: str,
    member_id: str,
    member_epoch: int,
    wanted: Sequence[tuple[str, Sequence[int]]] | None,
) -> list[FetchedOffset]:
    """Offsets of (topic id, partitions) pairs (all of a topic's when empty), or every one."""
    validate_group_id(group_id)
    member = None
    if not _is_admin(member_id, member_epoch):
        member = current_member(group, group_id, member_id, member_epoch)
    offsets = {} if group is None else group.offsets
    copies = member is not None and (holds_copies(member.assigned) or holds_copies(member.pending_revocation))
    if wanted is None and copies:
        # Every topic, each partition as the copy this member holds (copy 0 otherwise).
        wanted = [(t, []) for t in sorted({split(t)[0] for t, _ in offsets})]
    if wanted is None:
        return [FetchedOffset(t, p, c) for (t, p), c in sorted(offsets.items())]
    out: list[FetchedOffset] = []
    for topic_id, partitions in wanted:
        if member is not None and copies:
            # A member of a redundant group reads the progress of the copy it holds.
            if not partitions:
                partitions = sorted({p for t, p in offsets if split(t)[0] == topic_id})
            out.extend(
                FetchedOffset(topic_id, p, offsets.get((copy_held(member, topic_id, p), p)))
                for p in partitions
            )
        elif partitions:
            out.extend(FetchedOffset(topic_id, p, offsets.get((topic_id, p))) for p in partitions)
        else:
            out.extend(FetchedOffset(t, p, c) for (t, p), c in sorted(offsets.items()) if t == topic_id)
    return out


def expire_offsets(group: Group, retention_ms: int, ctx: Context) -> Result[int]:
    """Removes the offsets of an empty group committed more than `retention_ms` ago."""
    if group.members or retention_ms <= 0:
        return Result(0)
    cutoff = ctx.now_ms - retention_ms
    records: list[Record] = [
        OffsetTombstone(t, p) for (t, p), c in sorted(group.offsets.items()) if c.commit_ms < cutoff
    ]
    return Result(len(records), tuple(records))


# -- resetting offsets (GroupAdmin.ResetOffsets) ------------------------------------

#: The largest offset a reset may produce (Postgres bigint, the wire's int64): a shift
#: past it is clamped, as a shift below 0 is.
MAX_OFFSET = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ResetTopic:
    """A topic of a reset, by name or by id ("" when not given), and its partitions
    (empty: every partition of the topic, see `reset_offsets`)."""

    name: str = ""
    topic_id: str = ""
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ResetOffsets:
    """GroupAdmin.ResetOffsets: exactly one of `to_offset`, `shift_by` and `delete`."""

    group_id: str
    #: Empty: every topic the group has committed offsets for.
    topics: tuple[ResetTopic, ...] = ()
    to_offset: int | None = None
    shift_by: int | None = None
    delete: bool = False
    dry_run: bool = False

    @property
    def mode(self) -> str:
        """The way chosen, by its field's name ("" when none or several: refused)."""
        chosen = [
            name
            for name, is_set in (
                ("to_offset", self.to_offset is not None),
                ("shift_by", self.shift_by is not None),
                ("delete", self.delete),
            )
            if is_set
        ]
        return chosen[0] if len(chosen) == 1 else ""


@dataclass(frozen=True, slots=True)
class PlannedReset:
    """One partition of a reset plan."""

    topic_name: str
    topic_id: str
    partition: int
    #: -1: nothing committed.
    current_offset: int
    #: -1: deleted, or left without an offset.
    new_offset: int
    error: ErrorCode = ErrorCode.NONE
    message: str = ""


@dataclass(frozen=True, slots=True)
class ResetPlan:
    #: By topic name, then partition.
    partitions: tuple[PlannedReset, ...]
    #: True when the plan's records are to be stored: not a dry run, and something changes.
    applied: bool


def reset_offsets(group: Group | None, req: ResetOffsets, ctx: Context) -> Result[ResetPlan]:
    """The plan of a reset and, unless it is a dry run, its records, all in one operation.

    Refused whole (nothing planned, nothing changed): a bad group id, not exactly one
    way to reset, a negative `to_offset` or too many partitions (INVALID_REQUEST); an
    unknown group (GROUP_ID_NOT_FOUND); a group with members (NON_EMPTY_GROUP: an admin
    commit while members commit would race them, and Kafka refuses it too).

    Which partitions: those listed; a topic listed without partitions means all of its
    partitions (from the topics image) for `to_offset`, and those with a committed
    offset for `shift_by` and `delete`; no topic listed means every topic the group has
    committed offsets for, taken the same way. A `shift_by` leaves a partition without
    a committed offset as it is, and clamps at 0 (and at MAX_OFFSET). A topic that does
    not exist, or a partition outside it, gets UNKNOWN_TOPIC_OR_PARTITION on its own
    entries (partition -1 for a topic listed without partitions) and the rest of the
    plan goes on. New offsets are admin commits: member epoch -1, no metadata, `now_ms`.
    """
    validate_group_id(req.group_id)
    modes = (req.to_offset is not None) + (req.shift_by is not None) + req.delete
    if modes != 1:
        raise InvalidRequest(
            "Exactly one of to_offset, shift_by and delete must be set"
            + (f", got {modes}." if modes else ": none was.")
        )
    if req.to_offset is not None and req.to_offset < 0:
        raise InvalidRequest(f"to_offset must be >= 0, got {req.to_offset}.")
    listed = sum(len(t.partitions) for t in req.topics)
    if len(req.topics) > MAX_PARTITIONS_PER_REQUEST or listed > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(f"At most {MAX_PARTITIONS_PER_REQUEST} partitions per reset.")
    if group is None:
        raise GroupIdNotFound(f"Group {req.group_id} not found.")
    if group.members:
        raise NonEmptyGroup(
            f"Group {req.group_id} has {len(group.members)} members: its offsets can be reset only "
            "while it has none (stop them, or wait for their sessions to expire)."
        )
    committed: dict[str, list[int]] = {}
    for topic_id, partition in sorted(group.offsets):
        committed.setdefault(topic_id, []).append(partition)
    # A redundant group's copies (reconciler/replicas.py) come with their topic: one
    # plan line per copy, each reset the same way.
    topics = req.topics or tuple(ResetTopic(topic_id=t) for t in committed if not is_copy(t))

    planned: dict[tuple[str, str, int], PlannedReset] = {}
    records: list[Record] = []
    for wanted in topics:
        topic = (
            ctx.image.by_id.get(wanted.topic_id) if wanted.topic_id else ctx.image.by_name.get(wanted.name)
        )
        if topic is None:
            shown = wanted.name or wanted.topic_id
            message = f"Topic {shown or '(no name or id)'} does not exist."
            for partition in wanted.partitions or committed.get(wanted.topic_id, [-1]):
                planned.setdefault(
                    (wanted.name, wanted.topic_id, partition),
                    PlannedReset(
                        wanted.name,
                        wanted.topic_id,
                        partition,
                        -1,
                        -1,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        message,
                    ),
                )
            continue
        copies = [
            Topic(t, topic.name, topic.num_partitions) for t in committed if split(t)[0] == topic.topic_id
        ]
        for each in [topic, *(c for c in copies if c.topic_id != topic.topic_id)]:
            if wanted.partitions:
                partitions: Sequence[int] = wanted.partitions
            elif req.to_offset is not None:
                partitions = range(each.num_partitions)
            else:
                partitions = committed.get(each.topic_id, [])
            for partition in partitions:
                key = (each.name, each.topic_id, partition)
                if key in planned:
                    continue  # listed twice (by name and by id, or a repeated partition)
                if len(planned) >= MAX_PARTITIONS_PER_REQUEST:
                    raise InvalidRequest(f"At most {MAX_PARTITIONS_PER_REQUEST} partitions per reset.")
                planned[key] = _plan_partition(group, each, partition, req, ctx, records)
    plan = sorted(planned.values(), key=lambda p: (p.topic_name, p.partition, p.topic_id))
    applied = not req.dry_run and bool(records)
    return Result(ResetPlan(tuple(plan), applied), tuple(records) if applied else ())


def _plan_partition(
    group: Group, topic: Topic, partition: int, req: ResetOffsets, ctx: Context, records: list[Record]
) -> PlannedReset:
    """One partition's line of the plan; appends its record (if it changes) to `records`."""
    topic_id, name, num_partitions = topic.topic_id, topic.name, topic.num_partitions
    if not 0 <= partition < num_partitions:
        return PlannedReset(
            name,
            topic_id,
            partition,
            -1,
            -1,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"Partition {name}-{partition} does not exist: {name} has {num_partitions} partitions.",
        )
    current = group.offsets.get((topic_id, partition))
    before = -1 if current is None else current.offset
    if req.delete:
        if current is not None:
            records.append(OffsetTombstone(topic_id, partition))
        return PlannedReset(name, topic_id, partition, before, -1)
    if req.to_offset is not None:
        after = req.to_offset
    elif current is None:
        return PlannedReset(name, topic_id, partition, -1, -1)  # a shift leaves it without an offset
    else:
        assert req.shift_by is not None
        after = min(max(current.offset + req.shift_by, 0), MAX_OFFSET)
    records.append(OffsetCommitRecord(topic_id, partition, after, "", -1, ctx.now_ms))
    return PlannedReset(name, topic_id, partition, before, after)
