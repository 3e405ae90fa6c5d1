"""Kafka's range assignor for consumer groups, computed by a member.

The same rules as the server's `range` assignor (one meaning per assignor
name), written plainly: for each topic, its subscribers in range order get
contiguous ranges of its partitions, and the first `partitions % subscribers`
of them get one partition more. Range order (Kafka's RangeAssignor): static
members first, by instance id, then dynamic members by member id, so that a
static member that restarts under a new member id gets the same ranges back.
Not sticky: the result depends only on the members' ids, instance ids and
subscriptions and the topics' partition counts. Topics with the same partition
count and subscribers are split the same way (co-partitioning).
"""

from __future__ import annotations

from regroup.client.assignors.base import (
    CONSUMER,
    AssignmentPlan,
    AssignorMember,
    GroupSnapshot,
    Resource,
    SimpleAssignor,
)
from regroup.client.types import TopicPartition


def range_order(member: AssignorMember) -> tuple[bool, str, str]:
    """Static members (by instance id) before dynamic ones (by member id)."""
    if member.instance_id is not None:
        return (False, member.instance_id, member.member_id)
    return (True, member.member_id, "")


class RangeAssignor(SimpleAssignor):
    """Contiguous ranges of each topic's partitions over its subscribers (Kafka's "range")."""

    name: str = "range"
    serves = CONSUMER

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        refused = self.refuse(group)
        if refused is not None:
            return refused
        members = sorted(group.members, key=range_order)
        out: dict[str, set[Resource]] = {m.member_id: set() for m in members}
        for topic in group.topics:
            subscribers = [m.member_id for m in members if topic.name in m.subscribed_topics]
            if not subscribers:
                continue
            per_member, extra = divmod(topic.num_partitions, len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                length = per_member + (1 if i < extra else 0)
                out[member_id].update(
                    TopicPartition(topic.name, p, topic.topic_id) for p in range(start, start + length)
                )
                start += length
        return AssignmentPlan(assignments={mid: frozenset(rs) for mid, rs in out.items()})
