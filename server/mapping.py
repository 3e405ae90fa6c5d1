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
from regroup.reconciler.client_assignment import assignor_in_use
from regroup.reconciler.connect import CONNECT_SUBSCRIPTION, from_connect, to_connect
from regroup.reconciler.context import GroupConfig
from regroup.reconciler.drain import drain_state
from regroup.reconciler.history import GroupEvent
from regroup.reconciler.messages import InstallAssignment, PrepareAssignmentResponse
from regroup.reconciler.model import CONNECT_GROUP_TYPE, ClientAssignor, Member, make_assignment
from regroup.reconciler.placement import (
    CoPartitioning,
    co_partitioning,
    copies,
    rack_local_partitions,
    target_rack_locality,
)
from regroup.reconciler.rack_locality import RackLocality
from regroup.reconciler.replicas import collapse
from regroup.reconciler.topics import resolve_topic_id
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


#: ConsumerGroupHeartbeatRequest's fields without presence (group_id, member_id,
#: member_epoch) are numbered 1-3; every field numbered after them is optional.
_LAST_REQUIRED_HEARTBEAT_FIELD = coordinator_pb2.ConsumerGroupHeartbeatRequest.MEMBER_EPOCH_FIELD_NUMBER


def heartbeat_from_pb(
    req: coordinator_pb2.ConsumerGroupHeartbeatRequest, client_host: str
) -> ConsumerGroupHeartbeat:
    fields = req.ListFields()  # the fields present, by field number
    if not fields or fields[-1][0].number <= _LAST_REQUIRED_HEARTBEAT_FIELD:
        # A plain heartbeat, as almost all are: one C call tells that none of
        # the twelve optional fields is present, instead of twelve HasField calls.
        plain = ConsumerGroupHeartbeat(req.group_id, req.member_id, req.member_epoch)
        plain.client_host = client_host
        return plain
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
        client_assignors=client_assignors_from_pb(req),
        capacity=req.capacity if req.HasField("capacity") else None,
        replicas=req.replicas if req.HasField("replicas") else None,
        require_co_partitioning=(
            req.require_co_partitioning if req.HasField("require_co_partitioning") else None
        ),
    )


def client_assignors_from_pb(
    req: coordinator_pb2.ConsumerGroupHeartbeatRequest | coordinator_pb2.ConnectGroupHeartbeatRequest,
) -> tuple[ClientAssignor, ...] | None:
    if not req.HasField("client_assignors"):
        return None
    return tuple(
        ClientAssignor(
            name=a.name,
            minimum_version=a.minimum_version,
            maximum_version=a.maximum_version,
            reason=a.reason,
            version=a.version,
            metadata=a.metadata,
        )
        for a in req.client_assignors.assignors
    )


def client_assignor_pb(a: ClientAssignor) -> common_pb2.ClientAssignor:
    return common_pb2.ClientAssignor(
        name=a.name,
        minimum_version=a.minimum_version,
        maximum_version=a.maximum_version,
        reason=a.reason,
        version=a.version,
        metadata=a.metadata,
    )


def connect_heartbeat_from_pb(
    req: coordinator_pb2.ConnectGroupHeartbeatRequest, client_host: str
) -> ConsumerGroupHeartbeat:
    """A Connect heartbeat as the engine's heartbeat of a "connect" group: every
    worker subscribes to all connectors; connectors and tasks are resource units."""
    owned = None
    if req.HasField("owned"):
        units = from_connect(req.owned.connectors, ((t.connector, t.task) for t in req.owned.tasks))
        owned = tuple(OwnedTopicPartitions(c, "", tuple(sorted(p))) for c, p in sorted(units.items()))
    return ConsumerGroupHeartbeat(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id if req.HasField("instance_id") else None,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.HasField("rebalance_timeout_ms") else None,
        subscribed_topic_regex=CONNECT_SUBSCRIPTION if req.member_epoch == 0 else None,
        server_assignor=req.server_assignor if req.HasField("server_assignor") else None,
        owned_topic_partitions=owned,
        client_id=req.client_id if req.HasField("client_id") else None,
        client_host=client_host,
        client_assignors=client_assignors_from_pb(req),
        url=req.url if req.HasField("url") else None,
        group_type=CONNECT_GROUP_TYPE,
    )


def connect_pb(assignment: Assignment) -> common_pb2.ConnectorsAndTasks:
    connectors, tasks = to_connect(assignment)
    return common_pb2.ConnectorsAndTasks(
        connectors=connectors, tasks=[common_pb2.ConnectorTaskId(connector=c, task=t) for c, t in tasks]
    )


def connect_heartbeat_to_pb(
    resp: ConsumerGroupHeartbeatResponse,
) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
    out = coordinator_pb2.ConnectGroupHeartbeatResponse(
        member_id=resp.member_id,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        session_timeout_ms=resp.session_timeout_ms,
    )
    if resp.compute_assignment:
        out.error_code = error_code_pb(ErrorCode.COMPUTE_ASSIGNMENT)
        out.error_message = "This member was chosen to compute the group's target assignment."
    if resp.assignment is not None:
        out.assignment.CopyFrom(connect_pb(resp.assignment))
    return out


def prepare_to_pb(
    resp: PrepareAssignmentResponse, image: TopicsImage
) -> coordinator_pb2.PrepareAssignmentResponse:
    connect = resp.group_type == CONNECT_GROUP_TYPE
    members = []
    for m in resp.members:
        view = coordinator_pb2.AssignmentMember(
            member_id=m.member_id,
            member_epoch=m.member_epoch,
            instance_id=m.instance_id or "",
            rack_id=m.rack_id or "",
            url=m.url,
            capacity=m.capacity,
            draining=m.draining,
            assignor_version=m.assignor.version,
            assignor_reason=m.assignor.reason,
            assignor_metadata=m.assignor.metadata,
        )
        if connect:
            view.connect_assignment.CopyFrom(connect_pb(m.target))
        else:
            view.subscribed_topic_names.extend(sorted(image.name_of(t) for t in m.subscribed_topic_ids))
            view.assignment.CopyFrom(assignment_pb(m.target, image))
        members.append(view)
    out = coordinator_pb2.PrepareAssignmentResponse(
        group_epoch=resp.group_epoch,
        assignor_name=resp.assignor_name,
        group_type=resp.group_type,
        members=members,
        assignor_state=resp.assignor_state,
        coordinator_time_ms=resp.now_ms,
    )
    if connect:
        out.connectors.extend(
            coordinator_pb2.AssignableConnector(name=c, tasks=n - 1)
            for c, n in sorted(resp.resources.items())
        )
    else:
        out.topics.extend(
            coordinator_pb2.AssignableTopic(
                topic_id=t,
                name=image.name_of(t),
                num_partitions=n,
                partition_racks=image.by_id[t].partition_racks if t in image.by_id else (),
            )
            for t, n in sorted(resp.resources.items(), key=lambda item: image.name_of(item[0]))
        )
    return out


def _repeats(units: Iterable[tuple[str, int]], who: str) -> list[str]:
    seen: set[tuple[str, int]] = set()
    repeated = []
    for unit in units:
        if unit in seen:
            repeated.append(f"{unit[0]}-{unit[1]} ({who})")
        seen.add(unit)
    return repeated


def _topic_units(entries: Iterable[common_pb2.TopicPartitions], image: TopicsImage) -> Assignment:
    return make_assignment((resolve_topic_id(image, e.topic_id, e.topic_name), e.partitions) for e in entries)


def _connect_units(value: common_pb2.ConnectorsAndTasks) -> Assignment:
    return from_connect(value.connectors, ((t.connector, t.task) for t in value.tasks))


def install_from_pb(
    req: coordinator_pb2.InstallAssignmentRequest, image: TopicsImage, group_type: str
) -> InstallAssignment:
    connect = group_type == CONNECT_GROUP_TYPE
    members = tuple(
        (
            m.member_id,
            _connect_units(m.connect_assignment) if connect else _topic_units(m.topic_partitions, image),
        )
        for m in req.members
    )
    unassigned = (
        _connect_units(req.unassigned_connect)
        if connect
        else _topic_units(req.unassigned_topic_partitions, image)
    )
    repeated: list[str] = []
    for m in req.members:
        if connect:
            units = [(c, 0) for c in m.connect_assignment.connectors]
            units += [(t.connector, t.task + 1) for t in m.connect_assignment.tasks]
        else:
            units = [(t.topic_id or t.topic_name, p) for t in m.topic_partitions for p in t.partitions]
        repeated += _repeats(units, f"member {m.member_id}")
    return InstallAssignment(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        group_epoch=req.group_epoch,
        error=req.error,
        error_message=req.error_message,
        members=members,
        unassigned=unassigned,
        assignor_state=req.assignor_state,
        repeated=tuple(repeated),
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
    if resp.compute_assignment:
        out.error_code = error_code_pb(ErrorCode.COMPUTE_ASSIGNMENT)
        out.error_message = "This member was chosen to compute the group's target assignment."
    if resp.assignment is not None:
        out.assignment.CopyFrom(assignment_pb(resp.assignment, image))
    return out


def member_pb(group: Group, member: Member, image: TopicsImage) -> admin_pb2.DescribedMember:
    if group.group_type == CONNECT_GROUP_TYPE:
        return admin_pb2.DescribedMember(
            member_id=member.member_id,
            instance_id=member.instance_id or "",
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            client_id=member.client_id,
            client_host=member.client_host,
            member_state=member.state.name,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            server_assignor=member.server_assignor or "",
            client_assignors=[client_assignor_pb(a) for a in member.client_assignors],
            url=member.url,
            connect_assignment=connect_pb(member.assigned),
            connect_target_assignment=connect_pb(group.target_of(member.member_id)),
            connect_pending_revocation=connect_pb(member.pending_revocation),
            drain_state=drain_state(member),
        )
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
        # A member of a redundant group holds one copy of a partition at most: it is
        # shown as the partition, as the member sees it.
        assignment=assignment_pb(collapse(member.assigned), image),
        target_assignment=assignment_pb(collapse(group.target_of(member.member_id)), image),
        pending_revocation=assignment_pb(collapse(member.pending_revocation), image),
        member_state=member.state.name,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor or "",
        client_assignors=[client_assignor_pb(a) for a in member.client_assignors],
        drain_state=drain_state(member),
        capacity=member.metadata.capacity,
        rack_local_partitions=rack_local_partitions(member, image),
    )


def rack_locality_pb(report: RackLocality) -> admin_pb2.RackLocality:
    best = report.best_achievable
    return admin_pb2.RackLocality(
        partitions_with_rack=report.partitions_with_known_racks,
        rack_local_partitions=report.local_partitions,
        best_achievable=-1 if best is None else best,
    )


def co_partitioning_pb(report: CoPartitioning, image: TopicsImage) -> admin_pb2.CoPartitioning:
    return admin_pb2.CoPartitioning(
        co_partitioned_topics=[
            common_pb2.StringList(values=sorted(image.name_of(t) for t in ids)) for ids in report.topic_sets
        ],
        error=report.error,
    )


def group_pb(group: Group, image: TopicsImage, config: GroupConfig) -> admin_pb2.DescribedGroup:
    assignor = assignor_in_use(group, config)
    out = admin_pb2.DescribedGroup(
        group_id=group.group_id,
        group_type=group.group_type,
        group_state=group.state().value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=assignor,
        members=[member_pb(group, m, image) for _, m in sorted(group.members.items())],
        computing_member_id=group.computation.member_id if group.computation is not None else "",
        assignment_error=group.assignment_error,
    )
    if group.group_type != CONNECT_GROUP_TYPE:
        out.replicas, out.effective_replicas = copies(group.members.values())
    if group.group_type != CONNECT_GROUP_TYPE and not group.has_client_assignors():
        locality = target_rack_locality(group, image, assignor)
        if locality is not None:
            out.rack_locality.CopyFrom(rack_locality_pb(locality))
        out.co_partitioning.CopyFrom(
            co_partitioning_pb(co_partitioning(group.members.values(), image, assignor), image)
        )
    if group.group_type == CONNECT_GROUP_TYPE:
        out.connectors.extend(
            admin_pb2.ConnectorConfig(name=t.name, tasks=t.num_partitions - 1)
            for t in sorted(image.by_id.values(), key=lambda t: t.name)
        )
    return out


def topic_description_pb(
    topics: Iterable[tuple[str, str, int, tuple[str, ...]]],
) -> list[admin_pb2.TopicDescription]:
    return [
        admin_pb2.TopicDescription(
            name=name, topic_id=topic_id, num_partitions=count, partition_racks=list(racks)
        )
        for name, topic_id, count, racks in topics
    ]


def event_pb(event: GroupEvent) -> admin_pb2.GroupEvent:
    return admin_pb2.GroupEvent(
        sequence=event.sequence,
        timestamp_ms=event.timestamp_ms,
        type=admin_pb2.GroupEventType.ValueType(int(event.type)),
        reason=event.reason,
        message=event.message,
        group_epoch=event.group_epoch,
        previous_group_epoch=event.previous_group_epoch,
        member_id=event.member_id,
        instance_id=event.instance_id,
        member_epoch=event.member_epoch,
        topic_name=event.topic_name,
        partition_count=event.partition_count,
        assignor=event.assignor,
        duration_ms=event.duration_ms,
        partitions_moved=event.partitions_moved,
    )
