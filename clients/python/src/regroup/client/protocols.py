"""What differs between a consumer member and a Connect worker on the wire.

The member's logic (heartbeats, reconciliation, fencing, client-side
computations) is the same for both; an adapter says which RPC to call, how
owned resources and assignments are encoded, which listener methods to call,
and how PrepareAssignment/InstallAssignment carry resources.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from regroup.client.assignors.base import (
    CONNECT,
    CONSUMER,
    AssignmentPlan,
    AssignorMember,
    GroupSnapshot,
    Resource,
    TopicInfo,
)
from regroup.client.types import ConnectorTaskId, TopicPartition, partitions_from_pb, partitions_to_pb
from regroup.v1 import common_pb2, coordinator_pb2


class ConsumerWire:
    group_type = CONSUMER
    rpc = "ConsumerGroupHeartbeat"
    #: The heartbeat's field in a MemberStream item.
    stream_field = "consumer"
    request_type: Any = coordinator_pb2.ConsumerGroupHeartbeatRequest
    callbacks = ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost")

    @staticmethod
    def set_owned(request: Any, owned: frozenset[Any]) -> None:
        request.topic_partitions.SetInParent()
        request.topic_partitions.CopyFrom(partitions_to_pb(owned))

    @staticmethod
    def assignment(response: Any) -> frozenset[Any] | None:
        if not response.HasField("assignment"):
            return None
        return partitions_from_pb(response.assignment.topic_partitions)

    @staticmethod
    def snapshot(group_id: str, prep: coordinator_pb2.PrepareAssignmentResponse) -> GroupSnapshot:
        members = tuple(
            _member(m, frozenset(m.subscribed_topic_names), partitions_from_pb(m.assignment.topic_partitions))
            for m in prep.members
        )
        return GroupSnapshot(
            group_id=group_id,
            group_type=CONSUMER,
            group_epoch=prep.group_epoch,
            assignor=prep.assignor_name,
            members=members,
            topics=tuple(
                TopicInfo(t.topic_id, t.name, t.num_partitions, tuple(t.partition_racks)) for t in prep.topics
            ),
            state=prep.assignor_state,
            now_ms=prep.coordinator_time_ms,
        )

    @staticmethod
    def fill_install(request: coordinator_pb2.InstallAssignmentRequest, plan: AssignmentPlan) -> None:
        for member_id, resources in sorted(plan.assignments.items()):
            entry = request.members.add(member_id=member_id)
            entry.topic_partitions.extend(partitions_to_pb(_partitions(resources)).topics)
        request.unassigned_topic_partitions.extend(partitions_to_pb(_partitions(plan.unassigned)).topics)


class ConnectWire:
    group_type = CONNECT
    rpc = "ConnectGroupHeartbeat"
    stream_field = "connect"
    request_type: Any = coordinator_pb2.ConnectGroupHeartbeatRequest
    callbacks = ("on_revoked", "on_assigned", "on_lost")

    @staticmethod
    def set_owned(request: Any, owned: frozenset[Any]) -> None:
        request.owned.SetInParent()
        request.owned.CopyFrom(connect_to_pb(owned))

    @staticmethod
    def assignment(response: Any) -> frozenset[Any] | None:
        if not response.HasField("assignment"):
            return None
        return connect_from_pb(response.assignment)

    @staticmethod
    def snapshot(group_id: str, prep: coordinator_pb2.PrepareAssignmentResponse) -> GroupSnapshot:
        members = tuple(_member(m, frozenset(), connect_from_pb(m.connect_assignment)) for m in prep.members)
        return GroupSnapshot(
            group_id=group_id,
            group_type=CONNECT,
            group_epoch=prep.group_epoch,
            assignor=prep.assignor_name,
            members=members,
            connectors={c.name: c.tasks for c in prep.connectors},
            state=prep.assignor_state,
            now_ms=prep.coordinator_time_ms,
        )

    @staticmethod
    def fill_install(request: coordinator_pb2.InstallAssignmentRequest, plan: AssignmentPlan) -> None:
        for member_id, resources in sorted(plan.assignments.items()):
            request.members.add(member_id=member_id).connect_assignment.CopyFrom(connect_to_pb(resources))
        request.unassigned_connect.CopyFrom(connect_to_pb(plan.unassigned))


Wire = type[ConsumerWire] | type[ConnectWire]


def _member(
    m: coordinator_pb2.AssignmentMember, subscribed: frozenset[str], assignment: frozenset[Any]
) -> AssignorMember:
    return AssignorMember(
        member_id=m.member_id,
        member_epoch=m.member_epoch,
        instance_id=m.instance_id or None,
        rack_id=m.rack_id or None,
        url=m.url,
        version=m.assignor_version,
        reason=m.assignor_reason,
        metadata=m.assignor_metadata,
        subscribed_topics=subscribed,
        assignment=assignment,
        capacity=m.capacity or 1,
        draining=m.draining,
    )


def _partitions(resources: Iterable[Resource]) -> list[TopicPartition]:
    out = []
    for r in resources:
        if not isinstance(r, TopicPartition):
            raise TypeError(f"a consumer group's assignor returned {r!r}, not a TopicPartition")
        out.append(r)
    return out


def connect_from_pb(value: common_pb2.ConnectorsAndTasks) -> frozenset[Any]:
    resources: set[Any] = set(value.connectors)
    resources.update(ConnectorTaskId(t.connector, t.task) for t in value.tasks)
    return frozenset(resources)


def connect_to_pb(resources: Iterable[Any]) -> common_pb2.ConnectorsAndTasks:
    items = list(resources)
    connectors = sorted(r for r in items if isinstance(r, str))
    tasks = sorted(r for r in items if isinstance(r, ConnectorTaskId))
    if len(connectors) + len(tasks) != len(items):
        raise TypeError("Connect resources are connector names (str) and ConnectorTaskId values")
    return common_pb2.ConnectorsAndTasks(
        connectors=connectors,
        tasks=[common_pb2.ConnectorTaskId(connector=t.connector, task=t.task) for t in tasks],
    )
