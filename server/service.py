"""The gRPC servicers: map the wire to the domain, call the runtime, map back.

Protocol outcomes are answered as `error_code` with gRPC status OK; only a bug
becomes a non-OK status (INTERNAL), logged with its traceback.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf import message_factory
from opentelemetry import propagate
from opentelemetry.trace import SpanKind, Tracer

from regroup.reconciler import ApiError, ErrorCode, Topic, TopicsImage
from regroup.reconciler.errors import CoordinatorNotAvailable, GroupIdNotFound, InvalidRequest, NotCoordinator
from regroup.reconciler.messages import PrepareAssignment
from regroup.reconciler.offsets import OffsetToCommit, ResetOffsets, ResetTopic
from regroup.reconciler.topics import MAX_TOPIC_NAME_LENGTH
from regroup.reconciler.validation import validate_group_id
from regroup.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc

from . import access, mapping, paging, watch
from .access import Access, Caller, Rule, Unauthenticated
from .authz import Operation, ResourceType
from .forwarding import NOT_COORDINATOR, Forwarder, client_host
from .history import WatchClosed
from .runtime import Coordinator
from .streams import MemberKey, StreamClosed, StreamHub, StreamSession, refusal, run_stream
from .telemetry import Metrics
from .topicadmin import TopicOutcome

log = structlog.get_logger("regroup")

TopicDescription = admin_pb2.TopicDescription
GroupListing = admin_pb2.ListGroupsResponse.Group

#: Longest identifier echoed back in an error result.
MAX_ECHO = 256

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Ctx = grpc.aio.ServicerContext[Any, Any]
Handler = Callable[[Any, Req, Ctx], Awaitable[Resp]]


def internal_errors(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Turns an unexpected exception into INTERNAL (after logging it) instead of UNKNOWN,
    and records every call's duration and outcome (`rpc.server.call.duration`): the error code
    of its response (0 for responses that carry one per item), or the status it ended with."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: Ctx) -> Resp:
        tracer = self._coordinator.writer.tracer
        if tracer is None:
            return await measured(self, request, context)
        with _server_span(tracer, self.SERVICE, name, request, context) as span:
            response = await measured(self, request, context)
            span.set_attribute("regroup.error_code", int(getattr(response, "error_code", 0)))
            epoch = getattr(response, "member_epoch", None)
            if isinstance(epoch, int):
                span.set_attribute("regroup.response.member_epoch", epoch)
            return response

    async def measured(self: Any, request: Req, context: Ctx) -> Resp:
        started = time.perf_counter()
        metrics: Metrics = self._coordinator.writer.metrics
        try:
            gate: Access = self._access
            if gate.enabled:
                response = await guarded(self, gate, request, context)
            else:
                response = await method(self, request, context)
        except grpc.aio.AbortError:
            metrics.rpc(self.SERVICE, name, started, 0, _status_name(context))
            raise
        except asyncio.CancelledError:
            metrics.rpc(self.SERVICE, name, started, 0, "CANCELLED")
            raise
        except Exception as e:
            log.exception("internal_error", rpc=name)
            metrics.rpc(self.SERVICE, name, started, 0, "INTERNAL")
            await context.abort(grpc.StatusCode.INTERNAL, f"Internal error in {name}: {e!r}")
            raise  # unreachable: abort raises
        metrics.rpc(self.SERVICE, name, started, getattr(response, "error_code", 0))
        return response

    async def guarded(self: Any, gate: Access, request: Req, context: Ctx) -> Resp:
        """The call, made by its principal, if the principal may make it (see server/access.py)."""
        try:
            caller = gate.caller(context)
        except Unauthenticated as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
            raise  # unreachable: abort raises
        except ApiError as e:  # an untrusted claim to be a replica
            refused: Resp = await _refused(self.SERVICE, name, request, context, e)
            return refused
        return await _served_as(self, name, caller, request, context, method)

    return wrapper


async def _served_as(
    service: Any, name: str, caller: Caller, request: Req, context: Ctx, method: Handler[Req, Resp]
) -> Resp:
    """`method` run as `caller`, if the call's rule lets the caller make it (`request` rules;
    handlers check the items of `items` ones); else the refusal, with nothing done."""
    refusal = _request_refusal(access.RULES[(service.SERVICE, name)], caller, request, service._coordinator)
    if refusal is not None:
        refused: Resp = await _refused(service.SERVICE, name, request, context, refusal)
        return refused
    token = access.enter(caller)
    try:
        return await method(service, request, context)
    finally:
        access.leave(token)


def _request_refusal(
    rule: Rule, caller: Caller, request: Any, coordinator: Coordinator, *, audit: bool = True
) -> ApiError | None:
    """Why the call may not go on, for RPCs about one group (items are checked by their
    handlers); logged unless `audit` is False (see access.refusal)."""
    if rule.scope != "request" or caller.authorizer is None:
        return None
    operation = rule.operation_for(request)
    group_id: str = request.group_id
    if not caller.allowed(operation, rule.resource_type, group_id):
        return access.refusal(rule.resource_type, _echo(group_id), operation, caller.principal, audit=audit)
    if rule.subscription:
        return access.subscription_refusal(caller, request, coordinator, audit=audit)
    return None


async def _refused(service: str, method: str, request: Any, context: Ctx, error: ApiError) -> Any:
    """The RPC's response carrying `error` (nothing was done); PERMISSION_DENIED for a
    response with no error_code of its own (its results are per item)."""
    output = _SERVICES[service].methods_by_name[method].output_type
    fields = output.fields_by_name
    if "error_code" not in fields:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{error.code.name}: {error.message}")
    response: dict[str, Any] = _error_fields(error)
    if "member_id" in fields:
        response["member_id"] = request.member_id
    return message_factory.GetMessageClass(output)(**response)


_SERVICES = {
    d.full_name: d
    for d in (
        coordinator_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"],
        admin_pb2.DESCRIPTOR.services_by_name["GroupAdmin"],
    )
}


def _server_span(
    tracer: Tracer, service: str, method: str, request: Any, context: Ctx, *, stream: bool = False
) -> Any:
    """The span of one call (or of one heartbeat of a member stream), a child of the
    caller's W3C trace context."""
    attributes = _span_attributes(service, method, request)
    if stream:
        attributes["regroup.stream"] = True
    return tracer.start_as_current_span(
        f"{service}/{method}",
        context=propagate.extract(dict(context.invocation_metadata() or ())),
        kind=SpanKind.SERVER,
        attributes=attributes,
    )


def _span_attributes(service: str, method: str, request: Any) -> dict[str, Any]:
    """The RPC's semantic-convention attributes, and the group, member and epoch it is about."""
    attributes: dict[str, Any] = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
    for field, key in (
        ("group_id", "regroup.group_id"),
        ("member_id", "regroup.member_id"),
        ("member_epoch", "regroup.member_epoch"),
        ("group_epoch", "regroup.group_epoch"),
    ):
        value = getattr(request, field, None)
        if isinstance(value, str | int) and value != "":
            attributes[key] = value
    return attributes


def _status_name(context: Ctx) -> str:
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def forwardable(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """A group call answered NOT_COORDINATOR here is sent on to the owner, whose
    answer is returned; the refusal (with the owner's address) when that fails."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: Ctx) -> Resp:
        response: Any = await method(self, request, context)
        if response.error_code != NOT_COORDINATOR:
            return response  # type: ignore[no-any-return]
        forwarder: Forwarder | None = self._forwarder
        address = response.coordinator_address
        if forwarder is None or not forwarder.may_forward(context, address):
            return response  # type: ignore[no-any-return]
        stub = forwarder.coordinator(address) if self.IS_COORDINATOR else forwarder.admin(address)
        forwarded = await forwarder.call(stub, name, request, context)
        return response if forwarded is None else forwarded  # type: ignore[no-any-return]

    return wrapper


class GroupCoordinatorService(coordinator_pb2_grpc.GroupCoordinatorServicer):
    IS_COORDINATOR = True
    SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"].full_name

    def __init__(
        self,
        coordinator: Coordinator,
        forwarder: Forwarder | None = None,
        *,
        access: Access | None = None,
        streams: StreamHub | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._forwarder = forwarder
        self._access = access or Access()
        self.streams = streams or StreamHub()
        coordinator.writer.on_written = self.streams.written

    @internal_errors
    async def FindCoordinator(
        self, request: coordinator_pb2.FindCoordinatorRequest, context: Ctx
    ) -> coordinator_pb2.FindCoordinatorResponse:
        try:
            validate_group_id(request.group_id)
        except ApiError as e:
            return coordinator_pb2.FindCoordinatorResponse(**_error_fields(e))
        shards = self._coordinator.shards
        shard = shards.shard(request.group_id)
        try:
            # The owners are the last lease round's: not to be told once it is out of date.
            shards.check_view(self._coordinator.clock.monotonic_ms())
        except ApiError as e:
            return coordinator_pb2.FindCoordinatorResponse(shard=shard, **_error_fields(e))
        owner = shards.owners.get(shard)
        if owner is None or not owner[1]:
            return coordinator_pb2.FindCoordinatorResponse(
                shard=shard,
                **_error_fields(
                    CoordinatorNotAvailable(
                        f"No replica holds shard {shard} (group {request.group_id}) right now; retry."
                    )
                ),
            )
        return coordinator_pb2.FindCoordinatorResponse(address=owner[1], replica_id=owner[0], shard=shard)

    @internal_errors
    @forwardable
    async def ConsumerGroupHeartbeat(
        self, request: coordinator_pb2.ConsumerGroupHeartbeatRequest, context: Ctx
    ) -> coordinator_pb2.ConsumerGroupHeartbeatResponse:
        # The client's address is only worth reading when it joins.
        host = client_host(context) if request.member_epoch == 0 else ""
        try:
            response = await self._coordinator.consumer_group_heartbeat(
                mapping.heartbeat_from_pb(request, host)
            )
        except ApiError as e:
            return coordinator_pb2.ConsumerGroupHeartbeatResponse(
                **_heartbeat_error_fields(e, request.member_id)
            )
        return mapping.heartbeat_to_pb(response, self._coordinator.image)

    @internal_errors
    @forwardable
    async def ConnectGroupHeartbeat(
        self, request: coordinator_pb2.ConnectGroupHeartbeatRequest, context: Ctx
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        host = client_host(context) if request.member_epoch == 0 else ""
        try:
            response = await self._coordinator.consumer_group_heartbeat(
                mapping.connect_heartbeat_from_pb(request, host)
            )
        except ApiError as e:
            return coordinator_pb2.ConnectGroupHeartbeatResponse(
                **_heartbeat_error_fields(e, request.member_id)
            )
        return mapping.connect_heartbeat_to_pb(response)

    async def MemberStream(self, request_iterator: Any, context: Ctx) -> None:  # type: ignore[override]
        """Heartbeats of many members in batches, answered as the unary RPCs answer
        them, and nudges (server/streams.py; the protocol in coordinator.proto)."""
        gate = self._access
        caller: Caller | None = None
        refused_all: ApiError | None = None
        if gate.enabled:
            try:
                caller = gate.caller(context)
            except Unauthenticated as e:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
            except ApiError as e:  # an untrusted claim to be a replica: every item is refused
                refused_all = e

        def serve(session: StreamSession, item: coordinator_pb2.StreamHeartbeat) -> None:
            self._serve_stream_item(session, item, context, caller, refused_all)

        await run_stream(self.streams, request_iterator, context, serve)

    def _serve_stream_item(
        self,
        session: StreamSession,
        item: coordinator_pb2.StreamHeartbeat,
        context: Ctx,
        caller: Caller | None,
        refused_all: ApiError | None,
    ) -> None:
        """Answers the item now when it changes nothing (no await, no task), else serves
        it in a task; the stream's own refusals (limits, a malformed item) first."""
        correlation_id = item.correlation_id
        kind = item.WhichOneof("heartbeat")
        if kind is None:
            session.answer(
                refusal(
                    correlation_id,
                    common_pb2.INVALID_REQUEST,
                    "The item carries no heartbeat (consumer or connect).",
                )
            )
            return
        if correlation_id in session.in_flight:
            session.answer(
                refusal(
                    correlation_id,
                    common_pb2.INVALID_REQUEST,
                    f"Correlation id {correlation_id} is already in use by a heartbeat not answered yet.",
                )
            )
            return
        request: Any = item.consumer if kind == "consumer" else item.connect
        key = (request.group_id, request.member_id)
        session.heard(key)
        streams = self.streams
        if request.member_epoch < 0:
            streams.unregister(session, key)  # leaving: no more nudges
        elif not streams.may_carry(session, key):
            session.answer(
                refusal(
                    correlation_id,
                    common_pb2.STREAM_LIMIT_REACHED,
                    f"The stream carries {streams.limits.max_members} members already "
                    "(REGROUP_STREAM_MAX_MEMBERS): send this member's heartbeats with the unary RPC "
                    "or on another stream.",
                )
            )
            return
        if refused_all is None:
            started = time.perf_counter()
            response = self._answer_now(kind, request, caller)
            if response is not None:
                self._coordinator.writer.metrics.rpc(
                    self.SERVICE, _HEARTBEAT_RPC[kind], started, response.error_code
                )
                self._stream_answered(session, correlation_id, kind, key, response)
                return
        session.in_flight.add(correlation_id)
        if request.member_epoch >= 0 and key not in session.members:
            session.joining.add(correlation_id)
        task = asyncio.get_running_loop().create_task(
            self._serve_later(session, correlation_id, kind, key, request, context, caller, refused_all)
        )
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)

    def _answer_now(self, kind: str, request: Any, caller: Caller | None) -> Any | None:
        """The heartbeat's answer when it changes nothing and is allowed; None otherwise
        (then nothing was done). With traces on, every heartbeat gets its span instead."""
        coordinator = self._coordinator
        if request.member_epoch <= 0 or coordinator.writer.tracer is not None:
            return None
        if caller is not None:
            rule = access.RULES[(self.SERVICE, _HEARTBEAT_RPC[kind])]
            if _request_refusal(rule, caller, request, coordinator, audit=False) is not None:
                return None  # refused (and logged) as the unary RPC refuses, in `_serve_later`
        if kind == "consumer":
            response = coordinator.answer_heartbeat_now(mapping.heartbeat_from_pb(request, ""))
            return None if response is None else mapping.heartbeat_to_pb(response, coordinator.image)
        response = coordinator.answer_heartbeat_now(mapping.connect_heartbeat_from_pb(request, ""))
        return None if response is None else mapping.connect_heartbeat_to_pb(response)

    async def _serve_later(
        self,
        session: StreamSession,
        correlation_id: int,
        kind: str,
        key: MemberKey,
        request: Any,
        context: Ctx,
        caller: Caller | None,
        refused_all: ApiError | None,
    ) -> None:
        """Serves the item as its unary RPC would (access, the heartbeat, forwarding,
        metrics, its span); a bug ends the stream with INTERNAL."""
        name = _HEARTBEAT_RPC[kind]
        started = time.perf_counter()
        metrics = self._coordinator.writer.metrics
        try:
            response = await self._stream_heartbeat(name, request, context, caller, refused_all)
        except asyncio.CancelledError:
            metrics.rpc(self.SERVICE, name, started, 0, "CANCELLED")
            raise
        except Exception as e:
            log.exception("internal_error", rpc=name, stream=True)
            metrics.rpc(self.SERVICE, name, started, 0, "INTERNAL")
            session.fail(StreamClosed(grpc.StatusCode.INTERNAL, f"Internal error in {name}: {e!r}"))
            return
        finally:
            session.in_flight.discard(correlation_id)
            session.joining.discard(correlation_id)  # registered below when it is carried
        metrics.rpc(self.SERVICE, name, started, response.error_code)
        self._stream_answered(session, correlation_id, kind, key, response)

    async def _stream_heartbeat(
        self, name: str, request: Any, context: Ctx, caller: Caller | None, refused_all: ApiError | None
    ) -> Any:
        # The unary handler as `forwardable` wraps it (`internal_errors` is the stream's).
        handler = getattr(type(self), name).__wrapped__

        async def guarded(service: Any, request: Any, context: Ctx) -> Any:
            if refused_all is not None:
                return await _refused(service.SERVICE, name, request, context, refused_all)
            if caller is None:
                return await handler(service, request, context)
            return await _served_as(service, name, caller, request, context, handler)

        tracer = self._coordinator.writer.tracer
        if tracer is None:
            return await guarded(self, request, context)
        with _server_span(tracer, self.SERVICE, name, request, context, stream=True) as span:
            response = await guarded(self, request, context)
            span.set_attribute("regroup.error_code", int(response.error_code))
            span.set_attribute("regroup.response.member_epoch", response.member_epoch)
            return response

    def _stream_answered(
        self, session: StreamSession, correlation_id: int, kind: str, key: MemberKey, response: Any
    ) -> None:
        """Queues the answer; the member's later changes are pushed to this stream while
        it is in the group (a served heartbeat), not once it left or was refused."""
        code = response.error_code
        if code in _KEEPS_MEMBER and response.member_epoch >= 0 and response.member_id:
            if key[1] != response.member_id:  # a join without an id: the id generated
                key = (key[0], response.member_id)
            if key not in session.members:
                self.streams.register(session, key)
                told_to_compute = code == common_pb2.COMPUTE_ASSIGNMENT
                self.streams.catch_up(session, key, self._coordinator.groups.get(key[0]), told_to_compute)
        elif code in _DROPS_MEMBER or response.member_epoch < 0:
            self.streams.unregister(session, key)
        answer = coordinator_pb2.StreamHeartbeatResponse(correlation_id=correlation_id)
        getattr(answer, kind).CopyFrom(response)
        session.answer(answer)

    @internal_errors
    @forwardable
    async def PrepareAssignment(
        self, request: coordinator_pb2.PrepareAssignmentRequest, context: Ctx
    ) -> coordinator_pb2.PrepareAssignmentResponse:
        try:
            response = await self._coordinator.prepare_assignment(
                PrepareAssignment(request.group_id, request.member_id, request.member_epoch)
            )
        except ApiError as e:
            return coordinator_pb2.PrepareAssignmentResponse(**_error_fields(e))
        return mapping.prepare_to_pb(response, self._coordinator.image_for(request.group_id))

    @internal_errors
    @forwardable
    async def InstallAssignment(
        self, request: coordinator_pb2.InstallAssignmentRequest, context: Ctx
    ) -> coordinator_pb2.InstallAssignmentResponse:
        coordinator = self._coordinator
        group = coordinator.group(request.group_id)
        group_type = group.group_type if group is not None else "consumer"
        try:
            await coordinator.install_assignment(
                mapping.install_from_pb(request, coordinator.image_for(request.group_id), group_type)
            )
        except ApiError as e:
            return coordinator_pb2.InstallAssignmentResponse(**_error_fields(e))
        return coordinator_pb2.InstallAssignmentResponse()

    @internal_errors
    @forwardable
    async def OffsetCommit(
        self, request: coordinator_pb2.OffsetCommitRequest, context: Ctx
    ) -> coordinator_pb2.OffsetCommitResponse:
        coordinator = self._coordinator
        topics = _topic_ids(request.topics, coordinator.image_for(request.group_id))
        offsets = [
            OffsetToCommit(topic_id, p.partition, p.offset, p.metadata)
            for topic_id, _, t in topics
            for p in t.partitions
        ]
        try:
            outcomes = await coordinator.commit_offsets(
                request.group_id, request.member_id, request.member_epoch, offsets
            )
        except ApiError as e:
            return coordinator_pb2.OffsetCommitResponse(**_error_fields(e))
        results = iter(outcomes)
        response = coordinator_pb2.OffsetCommitResponse()
        for topic_id, name, t in topics:
            entry = response.topics.add(topic_id=topic_id or _echo(t.topic_id), name=_echo(name))
            for _ in t.partitions:
                o = next(results)
                entry.partitions.add(
                    partition=o.partition, error_code=mapping.error_code_pb(o.error), error_message=o.message
                )
        return response

    @internal_errors
    @forwardable
    async def OffsetFetch(
        self, request: coordinator_pb2.OffsetFetchRequest, context: Ctx
    ) -> coordinator_pb2.OffsetFetchResponse:
        coordinator = self._coordinator
        image = coordinator.image_for(request.group_id)
        topics = _topic_ids(request.topics, image)
        wanted = [(topic_id, list(t.partitions)) for topic_id, _, t in topics if topic_id] if topics else None
        try:
            fetched = await coordinator.fetch_offsets(
                request.group_id, request.member_id, request.member_epoch, wanted
            )
        except ApiError as e:
            return coordinator_pb2.OffsetFetchResponse(**_error_fields(e))
        response = coordinator_pb2.OffsetFetchResponse()
        entries: dict[str, Any] = {}
        for topic_id, name, t in topics:
            if not topic_id:
                missing = response.topics.add(topic_id=_echo(t.topic_id), name=_echo(name))
                for p in t.partitions:
                    missing.partitions.add(
                        partition=p,
                        offset=-1,
                        error_code=mapping.error_code_pb(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                        error_message=f"Topic {t.topic_id or t.name} does not exist.",
                    )
        for f in fetched:
            entry = entries.get(f.topic_id)
            if entry is None:
                entry = entries[f.topic_id] = response.topics.add(
                    topic_id=f.topic_id, name=image.name_of(f.topic_id)
                )
            c = f.committed
            if c is None:
                entry.partitions.add(partition=f.partition, offset=-1)
            else:
                entry.partitions.add(
                    partition=f.partition,
                    offset=c.offset,
                    metadata=c.metadata,
                    committed_member_epoch=c.member_epoch,
                    commit_timestamp_ms=c.commit_ms,
                )
        return response


def _topic_ids(topics: Any, image: TopicsImage) -> list[tuple[str, str, Any]]:
    """(topic id or "", name, entry) for request topics named by id or by name."""
    out = []
    for t in topics:
        found: Topic | None = image.by_id.get(t.topic_id) if t.topic_id else image.by_name.get(t.name)
        if found is None:
            out.append(("", t.name, t))
        else:
            out.append((found.topic_id, found.name, t))
    return out


def _error_fields(e: ApiError) -> dict[str, Any]:
    fields = {"error_code": mapping.error_code_pb(e.code), "error_message": e.message}
    if isinstance(e, NotCoordinator) and e.coordinator_address:
        # Only group operations refuse so, and every group response has the field.
        fields["coordinator_address"] = e.coordinator_address
    return fields


def _heartbeat_error_fields(e: ApiError, member_id: str) -> dict[str, Any]:
    """A refused heartbeat; with COORDINATOR_NOT_AVAILABLE, whether its session was renewed."""
    fields = {**_error_fields(e), "member_id": member_id}
    if isinstance(e, CoordinatorNotAvailable) and e.renewed_epoch is not None:
        fields.update(
            member_epoch=e.renewed_epoch, session_timeout_ms=e.session_timeout_ms, session_renewed=True
        )
    return fields


class GroupAdminService(admin_pb2_grpc.GroupAdminServicer):
    IS_COORDINATOR = False
    SERVICE = admin_pb2.DESCRIPTOR.services_by_name["GroupAdmin"].full_name

    def __init__(
        self,
        coordinator: Coordinator,
        *,
        max_message_bytes: int = paging.GRPC_DEFAULT_MAX_MESSAGE_BYTES,
        forwarder: Forwarder | None = None,
        access: Access | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._forwarder = forwarder
        self._access = access or Access()
        # Listings page before their response would pass the server's message limit.
        self._page_bytes = paging.byte_budget(max_message_bytes)
        self._max_message_bytes = max_message_bytes

    @internal_errors
    async def CreateTopics(
        self, request: admin_pb2.CreateTopicsRequest, context: Ctx
    ) -> admin_pb2.CreateTopicsResponse:
        Result = admin_pb2.CreateTopicsResponse.Result
        topics = list(request.topics)

        async def create(allowed: list[Any]) -> list[Any]:
            outcomes = await self._coordinator.create_topics(
                [(t.name, t.num_partitions, tuple(t.partition_racks)) for t in allowed]
            )
            return [Result(**_topic_result(o)) for o in outcomes]

        results = await _checked(
            topics,
            [_item_refusal("admin", "topic", t.name) for t in topics],
            create,
            lambda t, e: Result(name=_echo(t.name), **_error_fields(e)),
        )
        return admin_pb2.CreateTopicsResponse(topics=results)

    @internal_errors
    async def CreatePartitions(
        self, request: admin_pb2.CreatePartitionsRequest, context: Ctx
    ) -> admin_pb2.CreatePartitionsResponse:
        Result = admin_pb2.CreatePartitionsResponse.Result
        topics = list(request.topics)
        image = self._coordinator.image

        async def grow(allowed: list[Any]) -> list[Any]:
            outcomes = await self._coordinator.create_partitions(
                [(t.name, t.topic_id, t.count, tuple(t.new_partition_racks)) for t in allowed]
            )
            return [Result(**_topic_result(o)) for o in outcomes]

        results = await _checked(
            topics,
            [_topic_refusal(image, t.name, t.topic_id) for t in topics],
            grow,
            lambda t, e: Result(name=_echo(t.name), topic_id=_echo(t.topic_id), **_error_fields(e)),
        )
        return admin_pb2.CreatePartitionsResponse(topics=results)

    @internal_errors
    async def DeleteTopics(
        self, request: admin_pb2.DeleteTopicsRequest, context: Ctx
    ) -> admin_pb2.DeleteTopicsResponse:
        Result = admin_pb2.DeleteTopicsResponse.Result
        image = self._coordinator.image
        # Outcomes come for the names, then for the ids, each in request order.
        items = [("", n) for n in request.names] + [("id", t) for t in request.topic_ids]

        async def delete(allowed: list[tuple[str, str]]) -> list[Any]:
            outcomes = await self._coordinator.delete_topics(
                [v for k, v in allowed if not k], [v for k, v in allowed if k]
            )
            results = []
            for o in outcomes:
                fields = _topic_result(o)
                fields.pop("num_partitions", None)
                results.append(Result(**fields))
            return results

        results = await _checked(
            items,
            [_topic_refusal(image, "" if k else v, v if k else "") for k, v in items],
            delete,
            lambda item, e: Result(
                name="" if item[0] else _echo(item[1]),
                topic_id=_echo(item[1]) if item[0] else "",
                **_error_fields(e),
            ),
        )
        return admin_pb2.DeleteTopicsResponse(topics=results)

    @internal_errors
    async def DescribeTopics(
        self, request: admin_pb2.DescribeTopicsRequest, context: Ctx
    ) -> admin_pb2.DescribeTopicsResponse:
        try:
            page = self._describe_topics(request)
        except ApiError as e:
            return admin_pb2.DescribeTopicsResponse(**_error_fields(e))
        return admin_pb2.DescribeTopicsResponse(topics=page.entries, next_page_token=page.next_page_token)

    def _describe_topics(self, request: admin_pb2.DescribeTopicsRequest) -> paging.Page[TopicDescription]:
        """Every topic in name order, or the named ones in request order: both page
        by key (a name, or a position in `names`) and by bytes. Named topics are not
        bounded by count unless asked: the request already holds every name, and
        callers from before paging expect one result per name."""
        image = self._coordinator.image
        names = list(request.names)
        if not names:
            topics = paging.Cursor("DescribeTopics", [], str, "names")
            return paging.take_page(
                paging.sorted_after(image.by_name, topics.after(request.page_token)),
                # Topics the principal may not describe are left out, as Kafka's Metadata does.
                lambda name: (
                    _describe_topic(image, name) if access.allowed("describe", "topic", name) else None
                ),
                paging.page_size(request.page_size),
                self._page_bytes,
                topics,
                _racks_left_out,
            )
        named = paging.Cursor("DescribeTopics", names, int, "names")
        last = named.after(request.page_token)
        if last is not None and not 0 <= last < len(names) - 1:
            raise InvalidRequest(f"page_token points past the {len(names)} names asked for.")
        start = 0 if last is None else last + 1
        return paging.take_page(
            range(start, len(names)),
            lambda i: _describe_named_topic(image, names[i]),
            paging.page_size(request.page_size, default=len(names)),
            self._page_bytes,
            named,
            _racks_left_out,
        )

    @internal_errors
    async def ListGroups(
        self, request: admin_pb2.ListGroupsRequest, context: Ctx
    ) -> admin_pb2.ListGroupsResponse:
        states = {s.lower() for s in request.states_filter}
        types = {t.lower() for t in request.types_filter}
        coordinator = self._coordinator

        def listing(group_id: str) -> GroupListing | None:
            if not access.allowed("describe", "group", group_id):
                return None  # left out, as Kafka leaves out groups the principal may not describe
            group = coordinator.group(group_id)  # served: taken from served_group_ids below
            if group is None:
                return None
            if types and group.group_type.lower() not in types:
                return None
            state = group.state().value
            if states and state.lower() not in states:
                return None
            return GroupListing(
                group_id=group_id,
                group_state=state,
                group_type=group.group_type,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                members=len(group.members),
            )

        cursor = paging.Cursor(
            "ListGroups", [sorted(states), sorted(types)], str, "states_filter or types_filter"
        )
        try:
            size = paging.page_size(request.page_size)
            # Nothing here awaits, so the groups cannot change while the page is taken.
            page = paging.take_page(
                paging.sorted_after(coordinator.served_group_ids(), cursor.after(request.page_token)),
                listing,
                size,
                self._page_bytes,
                cursor,
            )
        except ApiError as e:
            return admin_pb2.ListGroupsResponse(**_error_fields(e))
        peers = self._peers(context)
        if not peers:
            return admin_pb2.ListGroupsResponse(groups=page.entries, next_page_token=page.next_page_token)
        return await self._list_everywhere(request, context, page, peers, cursor, size)

    def _peers(self, context: Ctx) -> dict[str, str]:
        """The other live replicas a listing asks (none for a call forwarded here)."""
        forwarder = self._forwarder
        if forwarder is None or not forwarder.may_forward(context, "-"):
            return {}
        return self._coordinator.peers()

    async def _list_everywhere(
        self,
        request: admin_pb2.ListGroupsRequest,
        context: Ctx,
        local: paging.Page[GroupListing],
        peers: dict[str, str],
        cursor: paging.Cursor[str],
        size: int,
    ) -> admin_pb2.ListGroupsResponse:
        """Each replica lists the groups it serves: this one's page merged with the
        same page of every other live replica, in group id order. A replica that
        stopped early (its page was full) bounds the merged page at its last key, so
        that no group is skipped; the next token resumes there for everyone."""
        assert self._forwarder is not None
        answers = await asyncio.gather(
            *(
                self._forwarder.call(self._forwarder.admin(address), "ListGroups", request, context)
                for address in peers.values()
            )
        )
        pages: list[tuple[list[GroupListing], str]] = [(local.entries, local.next_page_token)]
        for (replica, address), answer in zip(peers.items(), answers, strict=True):
            if answer is None or answer.error_code != common_pb2.NONE:
                why = "unreachable" if answer is None else answer.error_message
                error = CoordinatorNotAvailable(
                    f"Replica {replica} at {address} could not list its groups: {why}"
                )
                return admin_pb2.ListGroupsResponse(**_error_fields(error))
            pages.append((list(answer.groups), answer.next_page_token))
        bounds = [cursor.after(token) for _, token in pages if token]
        bound = min((b for b in bounds if b is not None), default=None)
        entries = {
            e.group_id: e for entries, _ in pages for e in entries if bound is None or e.group_id <= bound
        }
        page = paging.take_page(sorted(entries), entries.get, size, self._page_bytes, cursor)
        token = page.next_page_token
        if not token and bound is not None:
            token = cursor.token(bound)
        return admin_pb2.ListGroupsResponse(groups=page.entries, next_page_token=token)

    @internal_errors
    async def DescribeGroups(
        self, request: admin_pb2.DescribeGroupsRequest, context: Ctx
    ) -> admin_pb2.DescribeGroupsResponse:
        out = []
        for group_id in request.group_ids:
            refusal = _item_refusal("describe", "group", group_id)
            if refusal is not None:
                out.append(admin_pb2.DescribedGroup(group_id=_echo(group_id), **_error_fields(refusal)))
                continue
            out.append(self._describe_one(group_id))
        await self._forward_groups(out, "DescribeGroups", "groups", admin_pb2.DescribeGroupsRequest, context)
        return admin_pb2.DescribeGroupsResponse(groups=out)

    async def _forward_groups(
        self, results: list[Any], method: str, field: str, request_type: Any, context: Ctx
    ) -> None:
        """Per-group results refused with NOT_COORDINATOR are asked of their owners
        (one call per owner) and replaced by the owners' answers, in place."""
        forwarder = self._forwarder
        if forwarder is None:
            return
        by_owner: dict[str, list[int]] = {}
        for i, result in enumerate(results):
            if result.error_code == NOT_COORDINATOR and forwarder.may_forward(
                context, result.coordinator_address
            ):
                by_owner.setdefault(result.coordinator_address, []).append(i)
        for address, indexes in by_owner.items():
            request = request_type(group_ids=[results[i].group_id for i in indexes])
            answer = await forwarder.call(forwarder.admin(address), method, request, context)
            if answer is not None:
                for i, forwarded in zip(indexes, getattr(answer, field), strict=False):
                    results[i] = forwarded

    @internal_errors
    async def DeleteGroups(
        self, request: admin_pb2.DeleteGroupsRequest, context: Ctx
    ) -> admin_pb2.DeleteGroupsResponse:
        results = []
        for group_id in request.group_ids:
            refusal = _item_refusal("admin", "group", group_id)
            if refusal is not None:
                results.append(
                    admin_pb2.DeleteGroupsResponse.Result(group_id=_echo(group_id), **_error_fields(refusal))
                )
                continue
            try:
                validate_group_id(group_id)
                await self._coordinator.delete_group(group_id)
                results.append(admin_pb2.DeleteGroupsResponse.Result(group_id=group_id))
            except ApiError as e:
                results.append(
                    admin_pb2.DeleteGroupsResponse.Result(group_id=_echo(group_id), **_error_fields(e))
                )
        await self._forward_groups(results, "DeleteGroups", "results", admin_pb2.DeleteGroupsRequest, context)
        return admin_pb2.DeleteGroupsResponse(results=results)

    @internal_errors
    @forwardable
    async def PutConnectors(
        self, request: admin_pb2.PutConnectorsRequest, context: Ctx
    ) -> admin_pb2.PutConnectorsResponse:
        try:
            validate_group_id(request.group_id)
            epoch = await self._coordinator.put_connectors(
                request.group_id, [(c.name, c.tasks) for c in request.connectors]
            )
        except ApiError as e:
            return admin_pb2.PutConnectorsResponse(**_error_fields(e))
        return admin_pb2.PutConnectorsResponse(group_epoch=epoch)

    @internal_errors
    async def ListGroupEvents(
        self, request: admin_pb2.ListGroupEventsRequest, context: Ctx
    ) -> admin_pb2.ListGroupEventsResponse:
        try:
            return await watch.list_group_events(self._coordinator, request, self._max_message_bytes)
        except ApiError as e:
            return admin_pb2.ListGroupEventsResponse(**_error_fields(e))

    async def WatchGroup(
        self, request: admin_pb2.WatchGroupRequest, context: Ctx
    ) -> AsyncIterator[admin_pb2.WatchGroupResponse]:
        """The group's description, then its events as they are stored (server/watch.py).
        A server stream: checked for access here, as internal_errors checks unary calls."""
        gate = self._access
        if gate.enabled:
            try:
                caller = gate.caller(context)
            except Unauthenticated as e:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
                return
            except ApiError as e:  # an untrusted claim to be a replica
                yield watch.refused(request.group_id, e)
                return
            rule = access.RULES[(self.SERVICE, "WatchGroup")]
            refusal = _request_refusal(rule, caller, request, self._coordinator)
            if refusal is not None:
                yield watch.refused(request.group_id, refusal)
                return
        try:
            async for message in watch.watch_group(self._coordinator, request, self._describe_one):
                yield message
        except WatchClosed as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))

    def _describe_one(self, group_id: str) -> admin_pb2.DescribedGroup:
        """The group as this replica may tell it now (DescribeGroups, WatchGroup): not served
        here (NOT_COORDINATOR, forwarded by DescribeGroups), its lease not trusted, not a
        valid id, or absent (Dead)."""
        coordinator = self._coordinator
        try:
            validate_group_id(group_id)
            group = coordinator.served_group(group_id)
        except ApiError as e:
            return admin_pb2.DescribedGroup(group_id=_echo(group_id), group_state="Dead", **_error_fields(e))
        if group is None:
            error = GroupIdNotFound(f"Group {group_id} not found.")
            return admin_pb2.DescribedGroup(group_id=group_id, group_state="Dead", **_error_fields(error))
        return mapping.group_pb(group, coordinator.image_for(group_id), coordinator.config)

    @internal_errors
    @forwardable
    async def DrainMember(
        self, request: admin_pb2.DrainMemberRequest, context: Ctx
    ) -> admin_pb2.DrainMemberResponse:
        try:
            outcome = await self._coordinator.drain_member(
                request.group_id, request.member_id, request.instance_id, request.undrain
            )
        except ApiError as e:
            return admin_pb2.DrainMemberResponse(member_id=_echo(request.member_id), **_error_fields(e))
        return admin_pb2.DrainMemberResponse(
            member_id=outcome.member_id, drain_state=outcome.drain_state, group_epoch=outcome.group_epoch
        )

    @internal_errors
    @forwardable
    async def ResetOffsets(
        self, request: admin_pb2.ResetOffsetsRequest, context: Ctx
    ) -> admin_pb2.ResetOffsetsResponse:
        mode = request.WhichOneof("reset")
        req = ResetOffsets(
            group_id=request.group_id,
            topics=tuple(ResetTopic(t.name, t.topic_id, tuple(t.partitions)) for t in request.topics),
            to_offset=request.to_offset if mode == "to_offset" else None,
            shift_by=request.shift_by if mode == "shift_by" else None,
            # delete=false is no choice at all (refused as such), not a reset.
            delete=mode == "delete" and request.delete,
            dry_run=request.dry_run,
        )
        try:
            plan = await self._coordinator.reset_offsets(req)
        except ApiError as e:
            return admin_pb2.ResetOffsetsResponse(**_error_fields(e))
        return admin_pb2.ResetOffsetsResponse(
            partitions=[
                admin_pb2.ResetOffsetsResponse.Partition(
                    topic_name=_echo(p.topic_name),
                    topic_id=_echo(p.topic_id),
                    partition=p.partition,
                    current_offset=p.current_offset,
                    new_offset=p.new_offset,
                    error_code=mapping.error_code_pb(p.error),
                    error_message=p.message,
                )
                for p in plan.partitions
            ],
            # Only now: the coordinator answers once the records are stored (a failed
            # store is answered as an error above, never as applied).
            applied=plan.applied,
        )


#: The unary RPC of each kind of stream heartbeat.
_HEARTBEAT_RPC = {"consumer": "ConsumerGroupHeartbeat", "connect": "ConnectGroupHeartbeat"}
#: Answers after which a member is in the group (its changes are pushed), or is not.
_KEEPS_MEMBER = frozenset({common_pb2.NONE, common_pb2.COMPUTE_ASSIGNMENT})
_DROPS_MEMBER = frozenset(
    {common_pb2.UNKNOWN_MEMBER_ID, common_pb2.FENCED_MEMBER_EPOCH, common_pb2.GROUP_ID_NOT_FOUND}
)

Item = TypeVar("Item")
Out = TypeVar("Out")


def _item_refusal(operation: Operation, resource_type: ResourceType, name: str) -> ApiError | None:
    """Why the call being served may not do `operation` on this item, or None."""
    caller = access.current()
    if caller is None or caller.allowed(operation, resource_type, name):
        return None
    return access.refusal(resource_type, _echo(name), operation, caller.principal)


def _topic_refusal(image: TopicsImage, name: str, topic_id: str) -> ApiError | None:
    """`admin` on a topic named by id (as the topic admin finds it: by id first) or by name.
    An id that names no topic is let through: its answer, UNKNOWN_TOPIC_ID, tells nothing."""
    if topic_id:
        topic = image.by_id.get(topic_id)
        if topic is None:
            return None
        name = topic.name
    return _item_refusal("admin", "topic", name)


async def _checked(
    items: list[Item],
    refusals: list[ApiError | None],
    run: Callable[[list[Item]], Awaitable[list[Out]]],
    refused: Callable[[Item, ApiError], Out],
) -> list[Out]:
    """One result per item, in order: `run` on the items allowed (not at all when every
    item was refused: nothing is done), `refused` for the others."""
    allowed = [item for item, refusal in zip(items, refusals, strict=True) if refusal is None]
    done = iter(await run(allowed) if allowed or not items else [])
    return [
        next(done) if refusal is None else refused(item, refusal)
        for item, refusal in zip(items, refusals, strict=True)
    ]


def _describe_named_topic(image: TopicsImage, name: str) -> TopicDescription:
    refusal = _item_refusal("describe", "topic", name)
    if refusal is not None:
        return TopicDescription(name=_echo(name), **_error_fields(refusal))
    return _describe_topic(image, name)


def _echo(value: str) -> str:
    """An identifier echoed back in a result; an absurdly long one is cut, not mirrored."""
    return value if len(value) <= MAX_ECHO else value[:MAX_ECHO] + "..."


def _describe_topic(image: TopicsImage, name: str) -> TopicDescription:
    topic = image.by_name.get(name)
    if topic is None and len(name) > MAX_TOPIC_NAME_LENGTH:
        return TopicDescription(
            name=_echo(name),
            error_code=mapping.error_code_pb(ErrorCode.INVALID_TOPIC_EXCEPTION),
            error_message=f"Topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters.",
        )
    if topic is None:
        return TopicDescription(
            name=_echo(name),
            error_code=mapping.error_code_pb(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            error_message=f"Topic '{name}' does not exist.",
        )
    (described,) = mapping.topic_description_pb(
        [(topic.name, topic.topic_id, topic.num_partitions, topic.partition_racks)]
    )
    return described


def _racks_left_out(description: TopicDescription, budget: int) -> TopicDescription:
    """A topic too large for any page: racks accumulate through CreatePartitions
    (up to 1,000,000 partitions with racks of up to 255 bytes) past what one
    request, and so one response, may hold. Its other fields still fit."""
    return TopicDescription(
        name=description.name,
        topic_id=description.topic_id,
        num_partitions=description.num_partitions,
        error_code=mapping.error_code_pb(ErrorCode.MESSAGE_TOO_LARGE),
        error_message=(
            f"partition_racks left out: the description takes {description.ByteSize()} bytes, "
            f"more than a response may hold ({budget})."
        ),
    )


def _topic_result(outcome: TopicOutcome) -> dict[str, Any]:
    if outcome.error is not None:
        return {
            "name": _echo(outcome.name),
            "topic_id": _echo(outcome.topic_id),
            **_error_fields(outcome.error),
        }
    assert outcome.topic is not None
    return {
        "name": outcome.topic.name,
        "topic_id": outcome.topic.topic_id,
        "num_partitions": outcome.topic.num_partitions,
    }
