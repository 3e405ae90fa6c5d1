"""Where partitions land, beyond balance: co-partitioning and rack locality, as the
coordinator checks and reports them (DescribeGroups, and the heartbeat of a member
that requires co-partitioning).

Co-partitioning is the range assignor's: it cuts every topic into the same
contiguous ranges over the same ordered subscribers, so topics with the same
partition count and the same subscribers (the members that take part in the
assignment, draining ones left out) put partition p on the same member, for every
p. That is a guarantee of the range assignor, stated here once and reported from
here; no other built-in assignor gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .assignors.racks import partitions_by_rack
from .model import Assignment, Group, Member
from .rack_locality import RackLocality, rack_locality
from .replicas import group_replicas, split
from .subscription import member_topic_ids
from .target_assignment import group_spec
from .topics import TopicsImage

#: The one built-in assignor that co-partitions.
CO_PARTITIONING_ASSIGNOR = "range"


@dataclass(frozen=True, slots=True)
class CoPartitioning:
    """The group's co-partitioned topic sets (ids, each sorted, two or more topics),
    and why a member that requires co-partitioning does not get it ("" when all do)."""

    topic_sets: tuple[tuple[str, ...], ...]
    error: str = ""


def _subscriptions(members: Iterable[Member], image: TopicsImage) -> dict[str, frozenset[str]]:
    """Each assigned member's existing subscribed topic ids (draining members take no part)."""
    return {
        m.member_id: member_topic_ids(image, m.subscribed_topic_names, m.subscribed_topic_regex)
        for m in members
        if not m.metadata.draining
    }


def _classes(
    subscriptions: Mapping[str, frozenset[str]], image: TopicsImage
) -> dict[str, tuple[object, ...]]:
    """Each subscribed topic's co-partitioning class: its partition count and its subscribers."""
    subscribers: dict[str, list[str]] = {}
    for member_id in sorted(subscriptions):
        for topic_id in subscriptions[member_id]:
            subscribers.setdefault(topic_id, []).append(member_id)
    return {t: (image.by_id[t].num_partitions, tuple(s)) for t, s in subscribers.items()}


def co_partitioning(members: Iterable[Member], image: TopicsImage, assignor: str) -> CoPartitioning:
    """What DescribeGroups reports for a server-side group whose assignor is `assignor`."""
    members = list(members)
    subscriptions = _subscriptions(members, image)
    classes = _classes(subscriptions, image)
    sets: dict[tuple[object, ...], list[str]] = {}
    if assignor == CO_PARTITIONING_ASSIGNOR:
        for topic_id, key in classes.items():
            sets.setdefault(key, []).append(topic_id)
    topic_sets = tuple(sorted(tuple(sorted(ids)) for ids in sets.values() if len(ids) > 1))
    errors = [
        why
        for m in sorted(members, key=lambda m: m.member_id)
        if m.metadata.require_co_partitioning and not m.metadata.draining
        for why in [_why_not(m.member_id, subscriptions[m.member_id], classes, image, assignor)]
        if why
    ]
    return CoPartitioning(topic_sets, errors[0] if errors else "")


def co_partitioning_refusal(
    member: Member, others: Iterable[Member], image: TopicsImage, assignor: str
) -> str:
    """Why `member`, which requires co-partitioning, would not get it in a group of
    itself and `others` assigned by `assignor`; "" when it would."""
    subscriptions = _subscriptions([*others, member], image)
    mine = subscriptions.get(member.member_id, frozenset())
    return _why_not(member.member_id, mine, _classes(subscriptions, image), image, assignor)


def _why_not(
    member_id: str,
    topic_ids: frozenset[str],
    classes: Mapping[str, tuple[object, ...]],
    image: TopicsImage,
    assignor: str,
) -> str:
    if len(topic_ids) < 2:
        return ""  # one topic (or none) is trivially co-partitioned
    if assignor != CO_PARTITIONING_ASSIGNOR:
        return (
            f"Member {member_id} requires co-partitioning, but the group's assignor is {assignor}; "
            f"only {CO_PARTITIONING_ASSIGNOR} co-partitions."
        )
    ordered = sorted(topic_ids, key=image.name_of)
    first = ordered[0]
    for other in ordered[1:]:
        if classes[other][0] != classes[first][0]:
            return (
                f"Member {member_id} requires co-partitioning, but topic {image.name_of(first)} has "
                f"{classes[first][0]} partitions and topic {image.name_of(other)} has {classes[other][0]}."
            )
        if classes[other][1] != classes[first][1]:
            return (
                f"Member {member_id} requires co-partitioning, but topics {image.name_of(first)} and "
                f"{image.name_of(other)} have different subscribers."
            )
    return ""


def rack_local_partitions(member: Member, image: TopicsImage) -> int:
    """How many of the partitions `member` owns are in its own rack."""
    return local_count(member.rack_id, member.assigned, image)


def local_count(rack_id: str | None, assignment: Assignment, image: TopicsImage) -> int:
    if rack_id is None:
        return 0
    count = 0
    by_id = image.by_id
    for topic_id, partitions in assignment.items():
        topic = by_id.get(split(topic_id)[0])  # a copy topic's racks are its topic's
        if topic is not None and topic.partition_racks:
            # The rack-aware assignors' memoised layout, as rack_locality reads it.
            count += len(partitions & partitions_by_rack(topic.partition_racks).get(rack_id, frozenset()))
    return count


def copies(members: Iterable[Member]) -> tuple[int, int]:
    """(the copies of each partition a group asks for, the copies it gets now): the
    largest `replicas` of its assigned members, at most one per assigned member."""
    members = list(members)
    asked = group_replicas(members)
    assigned = sum(1 for m in members if not m.metadata.draining)
    return asked, min(asked, assigned)


def target_rack_locality(group: Group, image: TopicsImage, assignor: str) -> RackLocality | None:
    """The rack locality of the group's target under `assignor` when a member or a
    subscribed partition has a rack; None when none has. With racks on one side only
    nothing can be local, and the report says so (0 local, and 0 best where the
    assignor promises a best) rather than leaving it out: an operator who gave the
    members racks sees that the topics have none, and the other way round. A
    redundant group's assignor weighs no racks: it promises no best."""
    members_have_racks = any(m.rack_id for m in group.members.values())
    if not members_have_racks and not any(t.partition_racks for t in image.by_id.values()):
        return None  # no rack anywhere: no need for the group's spec
    spec = group_spec(group.members, group.target, image, group.member_ids_in_order())
    if not members_have_racks and not any(t.partition_racks for t in spec.topics.values()):
        return None
    report = rack_locality(spec, group.target, assignor)
    return report._replace(best_achievable=None) if spec.replicas > 1 else report
