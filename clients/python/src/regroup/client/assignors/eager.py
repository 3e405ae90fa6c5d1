"""Kafka Connect's eager (round-robin) assignment, computed by a worker.

Not sticky: connectors sorted by name go round-robin over the workers sorted
by member id, then the tasks sorted by (connector, task) continue the same
round robin. With no workers, everything is left unassigned.
"""

from __future__ import annotations

from regroup.client.assignors.base import CONNECT, AssignmentPlan, GroupSnapshot, Resource, SimpleAssignor
from regroup.client.types import ConnectorTaskId


class EagerAssignor(SimpleAssignor):
    """Round-robin of all connectors, then all tasks, over the workers (Connect's eager protocol)."""

    name: str = "eager"
    serves = CONNECT

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        refused = self.refuse(group)
        if refused is not None:
            return refused
        workers = sorted(m.member_id for m in group.members)
        if not workers:
            return AssignmentPlan(assignments={}, unassigned=group.resources())
        out: dict[str, set[Resource]] = {w: set() for w in workers}
        ordered: list[Resource] = []
        ordered.extend(sorted(group.connectors))
        ordered.extend(
            ConnectorTaskId(c, t) for c in sorted(group.connectors) for t in range(group.connectors[c])
        )
        for i, resource in enumerate(ordered):
            out[workers[i % len(workers)]].add(resource)
        return AssignmentPlan(assignments={w: frozenset(rs) for w, rs in out.items()})
