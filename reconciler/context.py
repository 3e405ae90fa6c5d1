"""What an operation receives (time, configuration, topics) and what it returns.

The per-heartbeat objects (Context, Result, ScheduleSessionTimeout) are not
`frozen`: a frozen dataclass's __init__ is about twice as slow, and they are
built on every heartbeat. Nothing mutates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .assignors import BUILTIN_ASSIGNORS, Assignor
from .records import Record
from .topics import TopicsImage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Coordinator-wide settings that shape every group's behaviour."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    #: Members a group may hold; None means unbounded.
    max_group_size: int | None = None
    #: At most one target computation per group per interval (Kafka's KIP-1263
    #: group.consumer.assignment.interval.ms); 0 computes on every epoch bump.
    assignment_interval_ms: int = 0
    #: Groups subscribed to more partitions than this get their target from the
    #: assignment timer (which the shell runs off the event loop), not inside a
    #: heartbeat; None computes every target inline.
    inline_assignment_max_partitions: int | None = None
    #: Offsets of an empty group expire this long after their commit (Kafka's
    #: offsets.retention.minutes, 7 days); 0 keeps them forever.
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    #: How often expired offsets are looked for (offsets.retention.check.interval.ms).
    offsets_retention_check_ms: int = 600_000
    #: Available server-side assignors by name; the first is the default.
    assignors: Mapping[str, Assignor] = field(default_factory=lambda: dict(BUILTIN_ASSIGNORS))

    @property
    def default_assignor(self) -> str:
        return next(iter(self.assignors))


@dataclass(slots=True)
class Context:
    """The inputs of one operation besides the group and the request."""

    #: The operation's time in wall-clock epoch milliseconds: values derived from it
    #: are stored and sent. Timer deadlines are stated in it too; the shell arms them
    #: at the same distance on a monotonic clock (server/clock.py says which is which).
    now_ms: int
    config: GroupConfig
    image: TopicsImage
    #: A fresh member id the shell drew, used when a member joins without one.
    new_member_id: str = ""


@dataclass(slots=True)
class ScheduleSessionTimeout:
    """(Re)arm the member's session timer; the member is fenced at `deadline_ms`."""

    member_id: str
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class ScheduleRebalanceTimeout:
    """Arm the revocation deadline; fence only if the member is still at `member_epoch`."""

    member_id: str
    deadline_ms: int
    member_epoch: int


@dataclass(frozen=True, slots=True)
class ScheduleAssignment:
    """Compute the group's target assignment at `deadline_ms` (a batched bump)."""

    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelRebalanceTimeout:
    member_id: str


@dataclass(frozen=True, slots=True)
class CancelTimeouts:
    """The member is gone: cancel both of its timers."""

    member_id: str


TimerOp = (
    ScheduleSessionTimeout
    | ScheduleRebalanceTimeout
    | CancelRebalanceTimeout
    | CancelTimeouts
    | ScheduleAssignment
)


@dataclass(slots=True)
class Result(Generic[T]):
    """An operation's outcome: records to store, timers to set, then the response."""

    response: T
    records: tuple[Record, ...] = ()
    timers: tuple[TimerOp, ...] = ()
