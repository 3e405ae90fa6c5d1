"""Maps between the protobuf wire types and the engine's domain types."""

from __future__ import annotations

from collections.abc import Iterable

from regroup.reconciler import (
    Assignment,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    ErrorCode,
    Group,
    OwnedTopicPartitions,
    TopicsImage,
)
from regroup.reconciler.context import GroupConfig
from regroup.reconciler.model import Member
from regroup.reconciler.target_assignment import preferred_assignor
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2


def error_code_pb(code: ErrorCode) -> common_pb2.ErrorCode.ValueType:
    return common_pb2.ErrorCode.ValueType(int(code))


def peer_host(peer: str) -> str:
    """The address part of a gRPC peer string ("ipv4:10.0.0.1:5000" -> "10.0.0.1")."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return rest or peer


def heartbeat_from_pb(
    req: coordinator_pb2.ConsumerGroupHeartbeatRequest, client_host: str
) -> ConsumerGroupHeartbeat:
    owned = None
    if req.HasField("topic_partitions"):
        owned = tuple(
            OwnedTopicPartitions(t.topic_id, t.topic_name, tuple(t.partitions))
            for t in req.topic_partitions.topics
        )
    return ConsumerGroupHeartbeat(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id if req.HasField("instance_id") else None,
        rack_id=req.rack_id if req.HasField("rack_id") else None,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.HasField("rebalance_timeout_ms") else None,
        subscribed_topic_names=(
            tuple(req.subscribed_topic_names.values) if req.HasField("subscribed_topic_names") else None
        ),
        subscribed_topic_regex=req.subscribed_topic_regex if req.HasField("subscribed_topic_regex") else None,
        server_assignor=req.server_assignor if req.HasField("server_assignor") else None,
        owned_topic_partitions=owned,
        client_id=req.client_id if req.HasField("client_id") else None,
        client_host=client_host,
    )


def topic_partitions_pb(assignment: Assignment, image: TopicsImage) -> list[common_pb2.TopicPartitions]:
    """Topics sorted by name (then id), partitions sorted; both topic id and name set."""
    entries = sorted((image.name_of(t), t) for t in assignment)
    return [
        common_pb2.TopicPartitions(topic_id=t, topic_name=name, partitions=sorted(assignment[t]))
        for name, t in entries
    ]


def assignment_pb(assignment: Assignment, image: TopicsImage) -> common_pb2.Assignment:
    return common_pb2.Assignment(topic_partitions=topic_partitions_pb(assignment, image))


def heartbeat_to_pb(
    resp: ConsumerGroupHeartbeatResponse, image: TopicsImage
) -> coordinator_pb2.ConsumerGroupHeartbeatResponse:
    out = coordinator_pb2.ConsumerGroupHeartbeatResponse(
        member_id=resp.member_id,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        session_timeout_ms=resp.session_timeout_ms,
    )
    if resp.assignment is not None:
        out.assignment.CopyFrom(assignment_pb(resp.assignment, image))
    return out


def member_pb(group: Group, member: Member, image: TopicsImage) -> admin_pb2.DescribedMember:
    return admin_pb2.DescribedMember(
        member_id=member.member_id,
        instance_id=member.instance_id or "",
        rack_id=member.rack_id or "",
        member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex or "",
        assignment=assignment_pb(member.assigned, image),
        target_assignment=assignment_pb(group.target_of(member.member_id), image),
        pending_revocation=assignment_pb(member.pending_revocation, image),
        member_state=member.state.name,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor or "",
    )


def group_pb(group: Group, image: TopicsImage, config: GroupConfig) -> admin_pb2.DescribedGroup:
    return admin_pb2.DescribedGroup(
        group_id=group.group_id,
        group_type=group.group_type,
        group_state=group.state().value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=preferred_assignor(group.server_assignor_counts(), config),
        members=[member_pb(group, m, image) for _, m in sorted(group.members.items())],
    )


def topic_description_pb(
    topics: Iterable[tuple[str, str, int, tuple[str, ...]]],
) -> list[admin_pb2.TopicDescription]:
    return [
        admin_pb2.TopicDescription(
            name=name, topic_id=topic_id, num_partitions=count, partition_racks=list(racks)
        )
        for name, topic_id, count, racks in topics
    ]
