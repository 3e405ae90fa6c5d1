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
    InvalidRequest,
    UnknownMemberId,
)
from .membership import current_member
from .model import CONSUMER_GROUP_TYPE, CommittedOffset, Group, Member
from .records import GroupMetadataRecord, OffsetCommitRecord, OffsetTombstone, Record
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
        records.append(
            OffsetCommitRecord(o.topic_id, o.partition, o.offset, o.metadata, committed_epoch, ctx.now_ms)
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
    if member is not None and not _owns(member, o.topic_id, o.partition):
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
    if not _is_admin(member_id, member_epoch):
        current_member(group, group_id, member_id, member_epoch)
    offsets = {} if group is None else group.offsets
    if wanted is None:
        return [FetchedOffset(t, p, c) for (t, p), c in sorted(offsets.items())]
    out: list[FetchedOffset] = []
    for topic_id, partitions in wanted:
        if partitions:
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
