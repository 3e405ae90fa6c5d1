"""The target assignment: which member should own which partition.

Recomputed when the group epoch moves ahead of the assignment epoch. Only the
members whose target changed get a record, then the new assignment epoch is
recorded (Kafka's TargetAssignmentBuilder).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .assignors import GroupSpec, MemberSpec
from .context import GroupConfig
from .errors import UnknownServerError
from .model import EMPTY_ASSIGNMENT, Assignment, Member
from .records import Record, TargetAssignmentEpochRecord, TargetAssignmentMemberRecord
from .subscription import member_topic_ids
from .topics import TopicsImage


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


def assignor_counts_of(members: Iterable[Member]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for member in members:
        if member.server_assignor is not None:
            counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
    return counts


def compute_target_assignment(
    members: Mapping[str, Member],
    current_targets: Mapping[str, Assignment],
    image: TopicsImage,
    assignor_name: str,
    config: GroupConfig,
    group_epoch: int,
) -> tuple[list[Record], dict[str, Assignment]]:
    """Runs the assignor; returns the records of what changed and the new targets."""
    resolved: dict[tuple[tuple[str, ...], str | None], frozenset[str]] = {}
    specs: dict[str, MemberSpec] = {}
    topic_ids: set[str] = set()
    for member_id, member in members.items():
        key = (member.subscribed_topic_names, member.subscribed_topic_regex)
        ids = resolved.get(key)
        if ids is None:
            ids = member_topic_ids(image, member.subscribed_topic_names, member.subscribed_topic_regex)
            resolved[key] = ids
        topic_ids.update(ids)
        specs[member_id] = MemberSpec(
            member_id=member_id,
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            subscribed_topic_ids=ids,
            current=current_targets.get(member_id, EMPTY_ASSIGNMENT),
        )
    spec = GroupSpec(members=specs, topics={t: image.by_id[t] for t in sorted(topic_ids)})
    try:
        targets = config.assignors[assignor_name].assign(spec)
    except Exception as e:
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch} with assignor "
            f"{assignor_name}: {e}"
        ) from e

    records: list[Record] = []
    for member_id in sorted(members):
        new = targets.get(member_id, EMPTY_ASSIGNMENT)
        targets[member_id] = new
        if new != current_targets.get(member_id, EMPTY_ASSIGNMENT):
            records.append(TargetAssignmentMemberRecord(member_id, new))
    records.append(TargetAssignmentEpochRecord(group_epoch))
    return records, targets
