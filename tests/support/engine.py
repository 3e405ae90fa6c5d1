"""An in-memory driver for the pure engine, for unit and property tests.

Like Kafka's GroupMetadataManagerTestContext: runs an operation, replays its
records into the group, applies its timers, and lets a test advance time and
collect the members whose timers expired.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

from regroup.reconciler import (
    CancelRebalanceTimeout,
    CancelTimeouts,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    Context,
    Group,
    GroupConfig,
    OwnedTopicPartitions,
    Record,
    Result,
    ScheduleAssignment,
    ScheduleRebalanceTimeout,
    ScheduleSessionTimeout,
    Topic,
    TopicsImage,
    consumer_group_heartbeat,
    on_assignment_timer,
    on_rebalance_timeout,
    on_session_timeout,
    refresh_metadata,
    replay_all,
)
from regroup.reconciler.model import Assignment
from regroup.reconciler.target_assignment import PendingTarget, install_computed_target, preferred_assignor


@dataclass
class EngineHarness:
    config: GroupConfig = field(default_factory=GroupConfig)
    now_ms: int = 0
    image: TopicsImage = field(default_factory=TopicsImage)
    groups: dict[str, Group] = field(default_factory=dict)
    #: (group, member) -> session deadline
    sessions: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (group, member) -> (deadline, epoch)
    rebalances: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    #: group -> when a batched target assignment is due
    assignments: dict[str, int] = field(default_factory=dict)
    #: (group, assignor) of every target the assignment timer computed
    timer_computations: list[tuple[str, str]] = field(default_factory=list)
    last_records: tuple[Record, ...] = ()
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def ctx(self) -> Context:
        return Context(
            now_ms=self.now_ms, config=self.config, image=self.image, new_member_id=str(uuid.uuid4())
        )

    # -- topics ------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> str:
        topic_id = f"{name}-id"
        self.image = self.image.with_topic(Topic(topic_id, name, partitions))
        self.refresh_all()
        return topic_id

    def grow_topic(self, name: str, partitions: int) -> None:
        topic = self.image.by_name[name]
        self.image = self.image.with_topic(Topic(topic.topic_id, name, partitions))
        self.refresh_all()

    def delete_topic(self, name: str) -> None:
        self.image = self.image.without_topic(self.image.by_name[name].topic_id)
        self.refresh_all()

    def refresh_all(self) -> None:
        for group_id, group in list(self.groups.items()):
            self.apply(group_id, refresh_metadata(group, self.ctx()))

    # -- operations --------------------------------------------------------

    def apply(self, group_id: str, result: Result[Any]) -> None:
        self.last_records = result.records
        group = replay_all(self.groups.get(group_id), group_id, result.records)
        if group is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = group
        for op in result.timers:
            if isinstance(op, ScheduleAssignment):
                self.assignments[group_id] = op.deadline_ms
                continue
            key = (group_id, op.member_id)
            match op:
                case ScheduleSessionTimeout():
                    self.sessions[key] = op.deadline_ms
                case ScheduleRebalanceTimeout():
                    self.rebalances[key] = (op.deadline_ms, op.member_epoch)
                case CancelRebalanceTimeout():
                    self.rebalances.pop(key, None)
                case CancelTimeouts():
                    self.sessions.pop(key, None)
                    self.rebalances.pop(key, None)

    def heartbeat(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResponse:
        """Runs a heartbeat; protocol errors propagate as ApiError."""
        result = consumer_group_heartbeat(self.groups.get(req.group_id), req, self.ctx())
        self.apply(req.group_id, result)
        return result.response

    def advance(self, ms: int) -> list[tuple[str, str]]:
        """Moves time forward and fences the members whose timers expired."""
        self.now_ms += ms
        fenced = []
        for key, deadline in sorted(self.sessions.items(), key=lambda kv: kv[1]):
            if deadline <= self.now_ms and key in self.sessions:
                group_id, member_id = key
                result = on_session_timeout(self.groups[group_id], member_id, self.ctx())
                self.apply(group_id, result)
                if result.response:
                    fenced.append(key)
        for group_id, deadline in sorted(self.assignments.items(), key=lambda kv: kv[1]):
            if deadline <= self.now_ms and group_id in self.groups:
                del self.assignments[group_id]
                group = self.groups[group_id]
                assignor = preferred_assignor(group.server_assignor_counts(), self.config)
                # The runtime's rules (interval, inline limit); a target too big to compute
                # inline is computed and installed at once, as the worker process would.
                timer = on_assignment_timer(group, self.ctx())
                pending = timer.response
                if isinstance(pending, PendingTarget):
                    records = pending.with_members(group.members, group.target, group.member_ids_in_order())
                    timer = install_computed_target(group, records.compute(self.config), self.ctx())
                if timer.response:
                    self.timer_computations.append((group_id, assignor))
                self.apply(group_id, timer)
        for key, (deadline, epoch) in sorted(self.rebalances.items(), key=lambda kv: kv[1]):
            if deadline <= self.now_ms and key in self.rebalances:
                group_id, member_id = key
                result = on_rebalance_timeout(self.groups[group_id], member_id, epoch, self.ctx())
                self.rebalances.pop(key, None)
                self.apply(group_id, result)
                if result.response:
                    fenced.append(key)
        return fenced


def owned(assignment: Assignment | dict[str, Any]) -> tuple[OwnedTopicPartitions, ...]:
    return tuple(
        OwnedTopicPartitions(topic_id=t, topic_name="", partitions=tuple(sorted(p)))
        for t, p in sorted(assignment.items())
    )


def join(group_id: str, member_id: str, topics: list[str], **kwargs: Any) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=group_id,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=kwargs.pop("rebalance_timeout_ms", 300_000),
        subscribed_topic_names=tuple(topics),
        owned_topic_partitions=(),
        **kwargs,
    )


def beat(
    group_id: str, member_id: str, epoch: int, owned_now: Assignment | None = None, **kwargs: Any
) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        owned_topic_partitions=None if owned_now is None else owned(owned_now),
        **kwargs,
    )


def joined(
    member_racks: list[str | None],
    partition_racks: tuple[str, ...],
    assignor: str = "uniform",
    replicas: int = 1,
) -> tuple[Group, TopicsImage]:
    """A group of members (racks as given) on a topic of 4 partitions (racks as given)."""
    h = EngineHarness()
    h.image = h.image.with_topic(Topic("docs-id", "docs", 4, partition_racks))
    for i, rack in enumerate(member_racks):
        h.heartbeat(join("g", f"m{i}", ["docs"], server_assignor=assignor, rack_id=rack, replicas=replicas))
    return h.groups["g"], h.image
