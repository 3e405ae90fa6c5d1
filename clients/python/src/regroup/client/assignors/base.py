"""Client-side assignors: the data they see and what they return.

When the coordinator answers a heartbeat with COMPUTE_ASSIGNMENT, the member
calls PrepareAssignment, turns the answer into a `GroupSnapshot`, runs the
group's assignor (`ClientAssignor.assign`) and installs the returned
`AssignmentPlan` with InstallAssignment. Assignors are pure: no I/O, no clock
(the coordinator's time is `GroupSnapshot.now_ms`).

Resources are `TopicPartition` for consumer groups, and connector names (str)
or `ConnectorTaskId` for Connect groups.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

from regroup.client.types import ConnectorTaskId, TopicPartition

CONSUMER = "consumer"
CONNECT = "connect"

Resource = Hashable  # TopicPartition | str | ConnectorTaskId


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: str
    name: str
    num_partitions: int
    #: The rack of each partition; empty when racks were not given.
    partition_racks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AssignorMember:
    member_id: str
    member_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    #: Connect workers: the worker URL ("" for consumers).
    url: str = ""
    #: The member's entry for the group's assignor.
    version: int = 0
    reason: int = 0
    metadata: bytes = b""
    #: Consumer groups: names of the existing topics the member subscribes to.
    subscribed_topics: frozenset[str] = frozenset()
    #: The member's resources in the current target assignment.
    assignment: frozenset[Resource] = frozenset()
    #: The member's weight (GroupMember.join(capacity=...)), 1 by default. The built-in
    #: `uniform` gives homogeneous groups shares proportional to it, as the server's does
    #: (`range` and heterogeneous `uniform` groups do not weigh it); a custom assignor may.
    capacity: int = 1
    #: Draining (GroupAdmin.DrainMember): it must be given nothing. The server-side
    #: assignors leave it out altogether, balancing the others as if it had left, and
    #: so do the built-in client-side ones (`SimpleAssignor.without_draining`).
    draining: bool = False

    @property
    def identity(self) -> str:
        """What survives a restart of the worker: its URL, else its instance id, else its member id."""
        return self.url or self.instance_id or self.member_id


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    group_id: str
    group_type: str
    group_epoch: int
    assignor: str
    #: Sorted by member id.
    members: tuple[AssignorMember, ...]
    #: Consumer groups: the subscribed topics.
    topics: tuple[TopicInfo, ...] = ()
    #: Connect groups: connector name -> task count.
    connectors: dict[str, int] = field(default_factory=dict)
    #: What the previous installation left (AssignmentPlan.state).
    state: bytes = b""
    #: The coordinator's clock, epoch milliseconds.
    now_ms: int = 0

    def resources(self) -> frozenset[Resource]:
        """Everything that must be assigned (or deliberately held back)."""
        if self.group_type == CONNECT:
            out: set[Resource] = set(self.connectors)
            out.update(ConnectorTaskId(c, t) for c, n in self.connectors.items() for t in range(n))
            return frozenset(out)
        subscribed = set().union(*(m.subscribed_topics for m in self.members)) if self.members else set()
        return frozenset(
            TopicPartition(t.name, p, t.topic_id)
            for t in self.topics
            if t.name in subscribed
            for p in range(t.num_partitions)
        )


@dataclass(frozen=True, slots=True)
class AssignmentPlan:
    #: member id -> its resources. Every member of the snapshot should appear.
    assignments: dict[str, frozenset[Resource]]
    #: Resources deliberately left unassigned for now.
    unassigned: frozenset[Resource] = frozenset()
    #: Opaque state handed to the next computation.
    state: bytes = b""
    #: Coordinator time at which the assignor wants to run again (a delayed
    #: rebalance); the member asks for it by changing its assignor reason.
    rebalance_at_ms: int | None = None
    #: Non-zero when the assignor could not compute: the current target stays.
    error: int = 0
    error_message: str = ""


class ClientAssignor(Protocol):
    """A client-side assignor. `name` and the version range are advertised in heartbeats."""

    name: str
    minimum_version: int
    maximum_version: int

    def metadata(self) -> tuple[int, bytes]:
        """The metadata version this member uses and the metadata bytes."""
        ...

    def assign(self, group: GroupSnapshot) -> AssignmentPlan: ...


class SimpleAssignor:
    """Defaults for assignors with no metadata of their own (version 0, no bytes)."""

    name: str = ""
    #: The group type the assignor serves (CONSUMER or CONNECT).
    serves: str = CONSUMER
    minimum_version: int = 0
    maximum_version: int = 0

    def metadata(self) -> tuple[int, bytes]:
        return 0, b""

    @staticmethod
    def without_draining(
        group: GroupSnapshot, assign: Callable[[GroupSnapshot], AssignmentPlan]
    ) -> AssignmentPlan:
        """`assign` over the group without its draining members, which get nothing: the
        target the server-side assignors compute (they never see a draining member)."""
        if not any(m.draining for m in group.members):
            return assign(group)
        plan = assign(dataclasses.replace(group, members=tuple(m for m in group.members if not m.draining)))
        empty: frozenset[Resource] = frozenset()
        assignments = {**plan.assignments, **{m.member_id: empty for m in group.members if m.draining}}
        return dataclasses.replace(plan, assignments=assignments)

    def refuse(self, group: GroupSnapshot) -> AssignmentPlan | None:
        """An error plan when `group` is not of the type this assignor serves."""
        if group.group_type == self.serves:
            return None
        return AssignmentPlan(
            assignments={},
            error=1,
            error_message=f"the {self.name} assignor serves {self.serves} groups, not {group.group_type!r}",
        )
