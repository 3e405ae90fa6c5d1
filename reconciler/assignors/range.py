"""The range assignor: contiguous, co-partitioned ranges per topic.

For each topic, the members subscribing to it are sorted (static members by
instance id first, then dynamic members by member id) and each receives a
contiguous range of partitions; the first `n % m` members get one more. Two
topics with the same partition count and subscribers are split the same way,
so partition p of both lands on the same member (co-partitioning).

Example: topics t0 and t1 with 3 partitions, members A and B:
A gets t0[0,1] and t1[0,1]; B gets t0[2] and t1[2].
"""

from __future__ import annotations

from ..model import Assignment
from .base import GroupSpec, MemberSpec


def _member_order(member: MemberSpec) -> tuple[int, str]:
    if member.instance_id is not None:
        return (0, member.instance_id)
    return (1, member.member_id)


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        ordered = sorted(spec.members.values(), key=_member_order)
        result: dict[str, dict[str, frozenset[int]]] = {m.member_id: {} for m in ordered}
        for topic_id in sorted(spec.topics):
            subscribers = [m.member_id for m in ordered if topic_id in m.subscribed_topic_ids]
            if not subscribers:
                continue
            base, extra = divmod(spec.topics[topic_id].num_partitions, len(subscribers))
            start = 0
            for index, member_id in enumerate(subscribers):
                size = base + (1 if index < extra else 0)
                if size:
                    result[member_id][topic_id] = frozenset(range(start, start + size))
                start += size
        return dict(result)
