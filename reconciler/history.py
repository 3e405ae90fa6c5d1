"""Group history: the events of a group's changes, each with its reason.

Derived from the records an operation produced, before they are stored, so
that the shell stores them in the same transaction as the change
(`derive_events`). Pure: the group as it was, the records, the operation's
cause and time in, events out. A heartbeat that changes nothing produces no
record, so it produces no event either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class EventType(IntEnum):
    """GroupEventType in proto/regroup/v1/admin.proto (same numbers)."""

    GROUP_CREATED = 1
    GROUP_DELETED = 2
    MEMBER_JOINED = 3
    MEMBER_LEFT = 4
    MEMBER_LEFT_TEMPORARILY = 5
    MEMBER_FENCED = 6
    SESSION_EXPIRED = 7
    REBALANCE_TIMED_OUT = 8
    SUBSCRIPTION_CHANGED = 9
    ASSIGNOR_CHANGED = 10
    TOPIC_CREATED = 11
    TOPIC_GROWN = 12
    TOPIC_DELETED = 13
    GROUP_EPOCH_BUMPED = 14
    TARGET_COMPUTED = 15
    MEMBER_RECONCILED = 16
    GROUP_STABLE = 17
    ASSIGNMENT_INSTALLED = 18
    ASSIGNMENT_REFUSED = 19
    OFFSETS_RESET = 20
    CONNECTORS_CHANGED = 21
    MEMBER_DRAINING = 22
    MEMBER_DRAINED = 23
    MEMBER_UNDRAINED = 24


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """One event of a group's history (GroupEvent in admin.proto).

    `sequence` is 0 until the store gives it one (increasing per group, not
    contiguous); `timestamp_ms` is wall-clock epoch ms.
    """

    type: EventType
    timestamp_ms: int
    group_epoch: int
    reason: str = ""
    message: str = ""
    previous_group_epoch: int = 0
    member_id: str = ""
    instance_id: str = ""
    member_epoch: int = 0
    topic_name: str = ""
    partition_count: int = 0
    assignor: str = ""
    duration_ms: int = 0
    partitions_moved: int = 0
    sequence: int = field(default=0, compare=False)
