"""Kafka Connect's eager (round-robin) assignment, computed by a worker.

Not sticky: connectors sorted by name go round-robin over the workers sorted
by member id, then the tasks sorted by (connector, task) continue the same
round robin. With no workers, everything is left unassigned.
"""

from __future__ import annotations

from regroup.client.assignors.base import CONNECT, AssignmentPlan, GroupSnapshot, Resource
from regroup.client.types import ConnectorTaskId


class EagerAssignor:
    """Round-robin of all connectors, then all tasks, over the workers (Connect's eager protocol)."""

    name: str = "eager"
    minimum_version: int = 0
    maximum_version: int = 0

    def metadata(self) -> tuple[int, bytes]:
        return 0, b""

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        if group.group_type != CONNECT:
            return AssignmentPlan(
                assignments={},
                error=1,
                error_message=f"the eager assignor serves connect groups, not {group.group_type!r}",
            )
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
