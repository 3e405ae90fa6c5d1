"""regroup's pure engine: epochs, reconciliation and assignors, with no I/O.

Operations take a group, a request and a `Context` (time as `now_ms`,
configuration, the topic registry) and return a `Result`: records to store,
timers to arm and a response. Only `replay` changes a group, after the shell
has stored the records.
"""

from __future__ import annotations

from .context import (
    CancelRebalanceTimeout,
    CancelTimeouts,
    Context,
    GroupConfig,
    Result,
    ScheduleAssignment,
    ScheduleRebalanceTimeout,
    ScheduleSessionTimeout,
    TimerOp,
)
from .errors import ApiError, ErrorCode
from .heartbeat import consumer_group_heartbeat
from .membership import (
    delete_group,
    on_rebalance_timeout,
    on_session_timeout,
    refresh_metadata,
)
from .messages import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse, OwnedTopicPartitions
from .model import Assignment, Group, GroupState, Member, MemberState
from .records import Record
from .replay import replay, replay_all
from .target_assignment import on_assignment_timer
from .topics import Topic, TopicsImage

__all__ = [
    "ApiError",
    "Assignment",
    "CancelRebalanceTimeout",
    "CancelTimeouts",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupHeartbeatResponse",
    "Context",
    "ErrorCode",
    "Group",
    "GroupConfig",
    "GroupState",
    "Member",
    "MemberState",
    "OwnedTopicPartitions",
    "Record",
    "Result",
    "ScheduleAssignment",
    "ScheduleRebalanceTimeout",
    "ScheduleSessionTimeout",
    "TimerOp",
    "Topic",
    "TopicsImage",
    "consumer_group_heartbeat",
    "delete_group",
    "on_assignment_timer",
    "on_rebalance_timeout",
    "on_session_timeout",
    "refresh_metadata",
    "replay",
    "replay_all",
]
