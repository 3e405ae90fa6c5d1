"""Domain requests and responses, independent of the wire format.

They are created for every heartbeat, so they are slotted dataclasses without
`frozen` (whose generated __init__ costs about twice as much); treat them as
immutable all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import CONSUMER_GROUP_TYPE, Assignment, ClientAssignor


@dataclass(frozen=True, slots=True)
class OwnedTopicPartitions:
    """Partitions of one topic a member says it owns; the topic by id or by name."""

    topic_id: str
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(slots=True)
class ConsumerGroupHeartbeat:
    """A ConsumerGroupHeartbeat request. None means "not sent" (unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    #: None or -1 mean unchanged.
    rebalance_timeout_ms: int | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    #: An empty string removes the regex subscription.
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_topic_partitions: tuple[OwnedTopicPartitions, ...] | None = None
    client_id: str | None = None
    #: The address the request came from, filled in by the shell.
    client_host: str = ""
    client_assignors: tuple[ClientAssignor, ...] | None = None
    #: Connect workers: the worker URL.
    url: str | None = None
    #: The type of group the request is for (Connect heartbeats arrive as "connect").
    group_type: str = CONSUMER_GROUP_TYPE
    #: The member's weight for the uniform assignor (1..MAX_CAPACITY).
    capacity: int | None = None
    #: Copies of each partition the member asks the group for (1..MAX_REPLICAS).
    replicas: int | None = None
    #: The member needs its topics co-partitioned (range assignor).
    require_co_partitioning: bool | None = None


@dataclass(slots=True)
class ConsumerGroupHeartbeatResponse:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    session_timeout_ms: int
    #: The member's full assignment, or None when it did not change.
    assignment: Assignment | None = None
    #: The member is chosen to compute the target with its client-side assignor.
    compute_assignment: bool = False


@dataclass(frozen=True, slots=True)
class PrepareAssignment:
    group_id: str
    member_id: str
    member_epoch: int


@dataclass(frozen=True, slots=True)
class AssignmentMemberView:
    """One member as the client-side assignor sees it."""

    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    url: str
    assignor: ClientAssignor
    #: Resolved subscription: ids of the existing topics the member subscribes to.
    subscribed_topic_ids: frozenset[str]
    #: The member's current target assignment.
    target: Assignment
    #: Its weight (ConsumerGroupHeartbeatRequest.capacity).
    capacity: int = 1
    #: Draining (GroupAdmin.DrainMember): to be given nothing.
    draining: bool = False


@dataclass(frozen=True, slots=True)
class PrepareAssignmentResponse:
    group_epoch: int
    assignor_name: str
    group_type: str
    members: tuple[AssignmentMemberView, ...]
    #: topic id -> partition count, for every topic some member subscribes to.
    resources: dict[str, int]
    assignor_state: bytes
    now_ms: int


@dataclass(frozen=True, slots=True)
class InstallAssignment:
    group_id: str
    member_id: str
    member_epoch: int
    group_epoch: int
    error: int
    error_message: str
    #: member id -> its assignment (topic id -> partitions); repeats are kept
    #: apart so that a member listed twice can be refused.
    members: tuple[tuple[str, Assignment], ...]
    unassigned: Assignment
    assignor_state: bytes
    #: Resources the request listed more than once for the same member (or twice
    #: as unassigned), which the merge into assignments would otherwise hide.
    repeated: tuple[str, ...] = ()
