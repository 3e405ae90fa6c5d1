"""The server-side assignor interface.

An assignor is a pure function from a `GroupSpec` (members, their subscribed
topic ids and current target) to a new target assignment. It must be
deterministic: the same spec always gives the same result.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from ..model import Assignment
from ..target_summary import TargetSummary as TargetSummary  # re-exported: the assignors' API
from ..topics import Topic


@dataclass(slots=True)
class MemberSpec:
    """One member as an assignor sees it. Treat it as immutable: it is not a
    frozen dataclass only because a frozen one's __init__ (one object.__setattr__
    per field) cost 0.7 us, most of building the spec of a 10,000-member group."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    #: The existing topics the member subscribes to.
    subscribed_topic_ids: frozenset[str]
    #: The member's current target assignment, for stickiness.
    current: Assignment
    #: The member's weight (ConsumerGroupHeartbeatRequest.capacity, default 1): the
    #: uniform assignor gives members shares proportional to it.
    capacity: int = 1


class SubscriptionType(Enum):
    """Whether every member subscribes to the same topics (Kafka's SubscriptionType)."""

    HOMOGENEOUS = "homogeneous"
    HETEROGENEOUS = "heterogeneous"


@dataclass(frozen=True, slots=True)
class GroupSpec:
    #: Members by id.
    members: Mapping[str, MemberSpec]
    #: The topics any member subscribes to, by id.
    topics: Mapping[str, Topic]
    #: Set by the coordinator, which resolves each distinct subscription once and
    #: so knows it without looking at every member (as Kafka's GroupSpec does);
    #: None: the assignor finds out. It must describe `members` truly.
    subscription_type: SubscriptionType | None = None
    #: Whether some member's capacity is not 1. Set by the coordinator, which
    #: builds every MemberSpec and so knows it for free; None: the assignor finds
    #: out with a pass over the members (0.15 ms at 10,000, which the unweighted
    #: fast path of the uniform assignor should not pay on every target).
    weighted: bool | None = None
    #: Members that take no part in this assignment (draining: GroupAdmin.DrainMember),
    #: by id, with their current targets. They are not in `members`, so no assignor
    #: sees them and every assignor balances the others as if they had left; the
    #: coordinator gives each of them an empty target (`assign_target`).
    withheld: Mapping[str, Assignment] = field(default_factory=dict)
    #: Redundant assignment: the copies of each partition the group asks for. Above
    #: 1, `topics` and every member's subscription also hold the copy topics
    #: (reconciler/replicas.py) and the redundant assignor computes the target.
    replicas: int = 1
    #: The members' current targets summarised, aligned with `members` (in its
    #: order), or None. Given only by a caller that keeps the targets of one
    #: computation over these same topics (the group itself, or the worker's
    #: copy of a big group: reconciler/target_summary.py): every member's
    #: current target is the one that computation returned with this summary
    #: (a member that joined since has none, size 0), so the targets are
    #: disjoint and within their topics, and the local counts were counted
    #: against these topics' racks and the members' racks. An assignor may
    #: trust it instead of reading the targets.
    current_summary: TargetSummary | None = None
    #: True when `members` come in member id order, as the coordinator builds
    #: them (`group_spec`, from the group's sorted ids): assignors that hand
    #: partitions out by member id then need not check (a sort's pass over
    #: 10,000 ids cost 0.16 ms). False: they check.
    members_in_id_order: bool = False

    def is_homogeneous(self) -> bool:
        """True when every member subscribes to the same topics (Kafka's HOMOGENEOUS)."""
        if self.subscription_type is not None:
            return self.subscription_type is SubscriptionType.HOMOGENEOUS
        subscriptions = [m.subscribed_topic_ids for m in self.members.values()]
        # list.count compares by identity first, and members with the same
        # subscription usually share one frozenset: a C loop, not a Python one.
        return not subscriptions or subscriptions.count(subscriptions[0]) == len(subscriptions)

    def is_weighted(self) -> bool:
        """True when some member's capacity is not 1."""
        if self.weighted is not None:
            return self.weighted
        capacities = [m.capacity for m in self.members.values()]
        return capacities.count(1) != len(capacities)


class GroupAssignment(Mapping[str, Assignment]):
    """An assignor's result: each member's target, as two aligned sequences
    (Kafka's GroupAssignment, without the map).

    The coordinator compares new targets with current ones member by member, in
    the spec's order, and never needs them keyed by member id: building a
    10,000-entry dict for every target cost 0.6-1 ms, a third of the uniform
    assignor at 10,000 members. Read as a mapping, it builds that dict once, on
    first use. `member_ids` must be distinct.
    """

    __slots__ = ("_by_id", "member_ids", "summary", "targets")

    def __init__(
        self,
        member_ids: Sequence[str],
        targets: Sequence[Assignment],
        summary: TargetSummary | None = None,
    ) -> None:
        if len(member_ids) != len(targets):
            raise ValueError(f"{len(member_ids)} member ids but {len(targets)} targets")
        if summary is not None and len(summary.sizes) != len(targets):
            raise ValueError(f"{len(targets)} targets but {len(summary.sizes)} sizes in their summary")
        self.member_ids = member_ids
        self.targets = targets
        #: The targets summarised (aligned with them), when the assignor knows it.
        self.summary = summary
        self._by_id: dict[str, Assignment] | None = None

    def _mapping(self) -> dict[str, Assignment]:
        if self._by_id is None:
            self._by_id = dict(zip(self.member_ids, self.targets, strict=True))
        return self._by_id

    def __getitem__(self, member_id: str) -> Assignment:
        return self._mapping()[member_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.member_ids)

    def __len__(self) -> int:
        return len(self.member_ids)

    def __repr__(self) -> str:
        return f"GroupAssignment({self._mapping()!r})"


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment for this spec."""


class Assignor(Protocol):
    @property
    def name(self) -> str: ...

    def assign(self, spec: GroupSpec) -> Mapping[str, Assignment]:
        """Returns the target assignment of every member in `spec` (empty ones
        included): a dict, or a GroupAssignment, which the coordinator reads
        without building a dict."""
        ...
