"""Kafka's range assignor for consumer groups, computed by a member.

For each topic, the members subscribed to it, sorted by member id, get
contiguous ranges of its partitions; the first `partitions % members` of them
get one partition more. Not sticky: the result depends only on the members'
ids and subscriptions and the topics' partition counts.
"""

from __future__ import annotations

from regroup.client.assignors.base import CONSUMER, AssignmentPlan, GroupSnapshot, Resource, SimpleAssignor
from regroup.client.types import TopicPartition


class RangeAssignor(SimpleAssignor):
    """Contiguous ranges of each topic's partitions over its subscribers (Kafka's "range")."""

    name: str = "range"
    serves = CONSUMER

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        refused = self.refuse(group)
        if refused is not None:
            return refused
        members = sorted(group.members, key=lambda m: m.member_id)
        out: dict[str, set[Resource]] = {m.member_id: set() for m in members}
        for topic in sorted(group.topics, key=lambda t: (t.name, t.topic_id)):
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
