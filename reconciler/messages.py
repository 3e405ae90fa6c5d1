"""Domain requests and responses, independent of the wire format.

They are created for every heartbeat, so they are slotted dataclasses without
`frozen` (whose generated __init__ costs about twice as much); treat them as
immutable all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Assignment


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


@dataclass(slots=True)
class ConsumerGroupHeartbeatResponse:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    session_timeout_ms: int
    #: The member's full assignment, or None when it did not change.
    assignment: Assignment | None = None
