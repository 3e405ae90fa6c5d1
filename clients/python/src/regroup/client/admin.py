"""GroupAdmin: thin typed wrappers over the GroupAdmin service, async and sync.

The plural calls return the per-item results as the service sends them; the
singular ones raise RegroupError (of its class, errors.py) when the item was refused.
The listings (`list_groups`, `describe_topics`) follow the service's pages and return
them all. Calls about groups go to each group's coordinator: a group answered
NOT_COORDINATOR is asked again where the answer says (see routing.py). What is
retriable (`Unavailable`: the address unreachable, COORDINATOR_NOT_AVAILABLE...;
`NotCoordinator`) is retried after `retry_backoff_ms`, doubling, within the client's
`timeout`; gRPC failures are raised as RegroupErrors `from` them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from regroup.client.errors import Channels, Unavailable, error_for
from regroup.client.retries import retry_async, retry_blocking
from regroup.client.routing import CoordinatorRouter, GroupCall, drive_async, drive_blocking, routed, single
from regroup.client.tls import TlsConfig, aio_connector, blocking_connector, check_factory
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2

T = TypeVar("T")
Plan = tuple[str, Any, Callable[[Any], T]]
#: A call about groups, routed to their coordinators, and how to read its response.
GroupPlan = tuple[GroupCall, Callable[[Any], T]]

CreatedTopic = admin_pb2.CreateTopicsResponse.Result
TopicDescription = admin_pb2.TopicDescription
GroupListing = admin_pb2.ListGroupsResponse.Group
DescribedGroup = admin_pb2.DescribedGroup
GroupEvent = admin_pb2.GroupEvent
ResetOffsetsResponse = admin_pb2.ResetOffsetsResponse


def _check(result: Any) -> Any:
    if result.error_code != common_pb2.NONE:
        raise error_for(result.error_code, result.error_message)
    return result


def _only(results: Sequence[T]) -> T:
    (result,) = results
    return _check(result)  # type: ignore[no-any-return]


def _topics(topics: Mapping[str, int] | Iterable[admin_pb2.CreatableTopic]) -> list[admin_pb2.CreatableTopic]:
    if isinstance(topics, Mapping):
        return [admin_pb2.CreatableTopic(name=n, num_partitions=p) for n, p in topics.items()]
    return list(topics)


class _Plans:
    """Each admin call as (rpc name, request, how to read the response)."""

    @staticmethod
    def create_topics(
        topics: Mapping[str, int] | Iterable[admin_pb2.CreatableTopic],
    ) -> Plan[list[CreatedTopic]]:
        return "CreateTopics", admin_pb2.CreateTopicsRequest(topics=_topics(topics)), lambda r: list(r.topics)

    @staticmethod
    def create_topic(name: str, partitions: int, racks: Sequence[str] = ()) -> Plan[str]:
        topic = admin_pb2.CreatableTopic(name=name, num_partitions=partitions, partition_racks=racks)
        return (
            "CreateTopics",
            admin_pb2.CreateTopicsRequest(topics=[topic]),
            lambda r: _only(r.topics).topic_id,
        )

    @staticmethod
    def create_partitions(name: str, count: int) -> Plan[int]:
        request = admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name=name, count=count)]
        )
        return "CreatePartitions", request, lambda r: _only(r.topics).num_partitions

    @staticmethod
    def delete_topics(names: Iterable[str]) -> Plan[list[admin_pb2.DeleteTopicsResponse.Result]]:
        return "DeleteTopics", admin_pb2.DeleteTopicsRequest(names=list(names)), lambda r: list(r.topics)

    @staticmethod
    def delete_topic(name: str) -> Plan[str]:
        return "DeleteTopics", admin_pb2.DeleteTopicsRequest(names=[name]), lambda r: _only(r.topics).topic_id

    # The listings read one page each; `_pages` asks for the next until the last.

    @staticmethod
    def describe_topics(names: Iterable[str], page_size: int) -> Plan[list[TopicDescription]]:
        request = admin_pb2.DescribeTopicsRequest(names=list(names), page_size=page_size)
        return "DescribeTopics", request, lambda r: list(_check(r).topics)

    @staticmethod
    def list_groups(states: Iterable[str], types: Iterable[str], page_size: int) -> Plan[list[GroupListing]]:
        request = admin_pb2.ListGroupsRequest(
            states_filter=list(states), types_filter=list(types), page_size=page_size
        )
        return "ListGroups", request, lambda r: list(_check(r).groups)

    @staticmethod
    def describe_groups(group_ids: Iterable[str]) -> GroupPlan[list[DescribedGroup]]:
        return _describe(group_ids), lambda r: list(r.groups)

    @staticmethod
    def describe_group(group_id: str) -> GroupPlan[DescribedGroup]:
        return _describe([group_id]), lambda r: _only(r.groups)

    @staticmethod
    def delete_groups(group_ids: Iterable[str]) -> GroupPlan[list[admin_pb2.DeleteGroupsResponse.Result]]:
        return _delete(group_ids), lambda r: list(r.results)

    @staticmethod
    def delete_group(group_id: str) -> GroupPlan[None]:
        return _delete([group_id]), lambda r: _only(r.results) and None


def _describe(group_ids: Iterable[str]) -> GroupCall:
    return GroupCall(
        "admin",
        "DescribeGroups",
        tuple(group_ids),
        lambda ids: admin_pb2.DescribeGroupsRequest(group_ids=ids),
        lambda r: r.groups,
        lambda groups: admin_pb2.DescribeGroupsResponse(groups=groups),
    )


def _delete(group_ids: Iterable[str]) -> GroupCall:
    return GroupCall(
        "admin",
        "DeleteGroups",
        tuple(group_ids),
        lambda ids: admin_pb2.DeleteGroupsRequest(group_ids=ids),
        lambda r: r.results,
        lambda results: admin_pb2.DeleteGroupsResponse(results=results),
    )


def _next_page(request: Any, response: Any) -> bool:
    """Points `request` at the page after `response`; False after the last one."""
    token: str = response.next_page_token
    if not token:
        return False
    if token == request.page_token:
        # A server that hands the same token back would keep us here forever.
        raise error_for(common_pb2.UNKNOWN_SERVER_ERROR, f"The server repeated page token {token!r}.")
    request.page_token = token
    return True


def _put_connectors(group_id: str, connectors: Mapping[str, int]) -> GroupPlan[int]:
    request = admin_pb2.PutConnectorsRequest(
        group_id=group_id,
        connectors=[admin_pb2.ConnectorConfig(name=n, tasks=t) for n, t in connectors.items()],
    )
    return single("admin", "PutConnectors", group_id, request), lambda r: _check(r).group_epoch


def _admin_commit(group_id: str, offsets: Mapping[tuple[str, int], int]) -> GroupPlan[None]:
    """An admin commit (no member id, epoch -1): only into an empty group."""
    request = coordinator_pb2.OffsetCommitRequest(group_id=group_id, member_id="", member_epoch=-1)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    for topic, entries in sorted(by_topic.items()):
        request.topics.add(name=topic).partitions.extend(
            coordinator_pb2.OffsetCommitRequest.Partition(partition=p, offset=o) for p, o in sorted(entries)
        )

    def read(r: Any) -> None:
        _check(r)
        for t in r.topics:
            for p in t.partitions:
                if p.error_code != common_pb2.NONE:
                    raise error_for(p.error_code, f"{t.name}-{p.partition}: {p.error_message}")

    return single("coordinator", "OffsetCommit", group_id, request), read


def _admin_fetch(group_id: str) -> GroupPlan[dict[tuple[str, int], int]]:
    request = coordinator_pb2.OffsetFetchRequest(group_id=group_id, member_id="", member_epoch=-1)
    return (
        single("coordinator", "OffsetFetch", group_id, request),
        lambda r: {
            (t.name, p.partition): p.offset for t in _check(r).topics for p in t.partitions if p.offset >= 0
        },
    )


def _group_events(
    group_id: str,
    limit: int,
    after_sequence: int,
    before_sequence: int,
    oldest_first: bool,
    types: Iterable[int],
) -> Plan[list[GroupEvent]]:
    """A group's history (any replica answers it, from the store: not routed)."""
    request = admin_pb2.ListGroupEventsRequest(
        group_id=group_id,
        limit=limit,
        after_sequence=after_sequence,
        before_sequence=before_sequence,
        oldest_first=oldest_first,
        types=[admin_pb2.GroupEventType.ValueType(t) for t in types],
    )
    return "ListGroupEvents", request, lambda r: list(_check(r).events)


def _drain(group_id: str, member_id: str, instance_id: str, undrain: bool) -> GroupPlan[str]:
    request = admin_pb2.DrainMemberRequest(
        group_id=group_id, member_id=member_id, instance_id=instance_id, undrain=undrain
    )
    return single("admin", "DrainMember", group_id, request), lambda r: _check(r).drain_state


def _reset(
    group_id: str,
    topics: Mapping[str, Sequence[int]] | Iterable[str],
    to_offset: int | None,
    shift_by: int | None,
    delete: bool,
    dry_run: bool,
) -> GroupPlan[ResetOffsetsResponse]:
    """ResetOffsets; exactly one of to_offset, shift_by and delete (the server says so otherwise)."""
    wanted = topics.items() if isinstance(topics, Mapping) else ((t, ()) for t in topics)
    request = admin_pb2.ResetOffsetsRequest(
        group_id=group_id,
        topics=[admin_pb2.ResetOffsetsRequest.Topic(name=t, partitions=list(p)) for t, p in wanted],
        dry_run=dry_run,
    )
    if to_offset is not None:
        request.to_offset = to_offset
    if shift_by is not None:
        request.shift_by = shift_by
    if delete:
        request.delete = True
    return single("admin", "ResetOffsets", group_id, request), _check


def _address_of(router: CoordinatorRouter[Any], call: GroupCall, channels: Channels) -> str | None:
    """The address that answered a call about one group."""
    return router.address(call.group_ids[0]) or channels.bootstrap


class GroupAdmin:
    """Async admin client: `admin = GroupAdmin("host:50051")`, then `await admin.create_topic("t", 8)`.

    `timeout` bounds each call, including its retries (after `retry_backoff_ms`, doubling
    up to `retry_backoff_max_ms`) of what is retriable: an unreachable address or a
    coordinator that cannot answer now (`Unavailable`), a group call following its
    coordinator (`NotCoordinator`). What is still failing then is raised;
    `channel_factory(address)` opens the channels, to the target and to the coordinators
    followed (default: insecure channels, or TLS ones with `tls`, a `TlsConfig`). Given
    a channel and no factory, every call goes through that channel (the service
    forwards). `token` is sent as `authorization: Bearer <token>` with every call."""

    def __init__(
        self,
        target: str | grpc.aio.Channel,
        *,
        timeout: float = 30.0,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 5_000,
        tls: TlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        check_factory(tls, channel_factory)
        self._owns_channel = isinstance(target, str)
        if isinstance(target, str):
            connect = channel_factory or aio_connector(tls)
            self._channel = connect(target)
            self._router = CoordinatorRouter(
                self._channel, bootstrap_address=target, connect=connect, token=token
            )
        else:
            self._channel = target
            follow = aio_connector(tls) if tls is not None else channel_factory
            self._router = CoordinatorRouter(target, connect=follow, token=token)
        self._stub = self._router.bootstrap.admin
        self._timeout = timeout
        self._backoff = (retry_backoff_ms, retry_backoff_max_ms)
        self._channels = Channels.of(target, tls, channel_factory)

    async def _retried(self, what: str, attempt: Callable[[float], Awaitable[T]]) -> T:
        backoff_ms, backoff_max_ms = self._backoff
        return await retry_async(
            attempt, within=self._timeout, backoff_ms=backoff_ms, backoff_max_ms=backoff_max_ms, what=what
        )

    async def _send(self, rpc: str, request: Any, read: Callable[[Any], T], seconds: float) -> tuple[Any, T]:
        """One call to the bootstrap address, and its response read."""
        try:
            response = await getattr(self._stub, rpc)(
                request, timeout=seconds, metadata=self._router.metadata()
            )
        except grpc.RpcError as err:
            raise self._channels.error(err) from err
        try:
            return response, read(response)
        except Unavailable as error:
            error.address = error.address or self._channels.bootstrap
            raise

    async def _do(self, plan: Plan[T]) -> T:
        rpc, request, read = plan

        async def attempt(seconds: float) -> T:
            return (await self._send(rpc, request, read, seconds))[1]

        return await self._retried(rpc, attempt)

    async def _do_group(self, plan: GroupPlan[T]) -> T:
        call, read = plan
        backoff_ms, backoff_max_ms = self._backoff

        async def attempt(seconds: float) -> T:
            steps = routed(
                self._router, call, timeout=seconds, backoff_ms=backoff_ms, backoff_max_ms=backoff_max_ms
            )
            try:
                response = await drive_async(self._router, steps)
            except grpc.RpcError as err:
                raise self._channels.error(err, self._router.failed_at) from err
            try:
                return read(response)
            except Unavailable as error:
                error.address = error.address or _address_of(self._router, call, self._channels)
                raise

        return await self._retried(call.rpc, attempt)

    async def _pages(self, plan: Plan[list[T]]) -> list[T]:
        rpc, request, read = plan
        out: list[T] = []
        while True:

            async def attempt(seconds: float) -> tuple[Any, list[T]]:
                return await self._send(rpc, request, read, seconds)

            response, items = await self._retried(rpc, attempt)
            out += items
            if not _next_page(request, response):
                return out

    async def create_topics(
        self, topics: Mapping[str, int] | Iterable[admin_pb2.CreatableTopic]
    ) -> list[CreatedTopic]:
        return await self._do(_Plans.create_topics(topics))

    async def create_topic(self, name: str, partitions: int, *, racks: Sequence[str] = ()) -> str:
        """Creates a topic and returns its id."""
        return await self._do(_Plans.create_topic(name, partitions, racks))

    async def create_partitions(self, name: str, count: int) -> int:
        """Grows a topic to `count` partitions; returns the new count."""
        return await self._do(_Plans.create_partitions(name, count))

    async def delete_topics(self, names: Iterable[str]) -> list[admin_pb2.DeleteTopicsResponse.Result]:
        return await self._do(_Plans.delete_topics(names))

    async def delete_topic(self, name: str) -> str:
        return await self._do(_Plans.delete_topic(name))

    async def describe_topics(
        self, names: Iterable[str] = (), *, page_size: int = 0
    ) -> list[TopicDescription]:
        """Describes the named topics (in the order given), or every topic (by name),
        over as many calls of at most `page_size` results as needed (0: the service's
        default)."""
        return await self._pages(_Plans.describe_topics(names, page_size))

    async def list_groups(
        self, *, states: Iterable[str] = (), types: Iterable[str] = (), page_size: int = 0
    ) -> list[GroupListing]:
        """Every group (by id) in one of `states` and `types` (all when empty), over as
        many calls of at most `page_size` groups as needed (0: the service's default)."""
        return await self._pages(_Plans.list_groups(states, types, page_size))

    async def describe_groups(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        return await self._do_group(_Plans.describe_groups(group_ids))

    async def describe_group(self, group_id: str) -> DescribedGroup:
        return await self._do_group(_Plans.describe_group(group_id))

    async def delete_groups(self, group_ids: Iterable[str]) -> list[admin_pb2.DeleteGroupsResponse.Result]:
        return await self._do_group(_Plans.delete_groups(group_ids))

    async def delete_group(self, group_id: str) -> None:
        await self._do_group(_Plans.delete_group(group_id))

    async def put_connectors(self, group_id: str, connectors: Mapping[str, int]) -> int:
        """Sets a Connect group's connectors (name -> task count); returns the group epoch."""
        return await self._do_group(_put_connectors(group_id, connectors))

    async def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Sets offsets of (topic name, partition) as an admin: only while the group has no members."""
        await self._do_group(_admin_commit(group_id, offsets))

    async def fetch_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group, by (topic name, partition)."""
        return await self._do_group(_admin_fetch(group_id))

    async def group_events(
        self,
        group_id: str,
        *,
        limit: int = 100,
        after_sequence: int = 0,
        before_sequence: int = 0,
        oldest_first: bool = False,
        types: Iterable[int] = (),
    ) -> list[GroupEvent]:
        """A page of the group's history (newest first unless `oldest_first`; docs/history.md)."""
        return await self._do(
            _group_events(group_id, limit, after_sequence, before_sequence, oldest_first, types)
        )

    async def drain_member(
        self, group_id: str, *, member_id: str = "", instance_id: str = "", undrain: bool = False
    ) -> str:
        """Takes a member out of service (or back with `undrain`); returns its drain state
        (DRAINING, DRAINED, or "" in service). See docs/operations.md."""
        return await self._do_group(_drain(group_id, member_id, instance_id, undrain))

    async def reset_offsets(
        self,
        group_id: str,
        topics: Mapping[str, Sequence[int]] | Iterable[str] = (),
        *,
        to_offset: int | None = None,
        shift_by: int | None = None,
        delete: bool = False,
        dry_run: bool = False,
    ) -> ResetOffsetsResponse:
        """Resets an empty group's offsets of `topics` (names, or name -> partitions; none:
        every topic with offsets); with `dry_run`, only the plan. Raises RegroupError when
        refused (NON_EMPTY_GROUP, ...); per-partition errors are in the answer."""
        return await self._do_group(_reset(group_id, topics, to_offset, shift_by, delete, dry_run))

    async def close(self) -> None:
        for channel in self._router.take_channels():
            await channel.close()
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> GroupAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SyncGroupAdmin:
    """The same calls on a blocking channel, for scripts and Spark drivers (and the same
    options: `channel_factory` makes blocking channels, `tls` makes TLS ones, `token` is
    sent with every call)."""

    def __init__(
        self,
        target: str | grpc.Channel,
        *,
        timeout: float = 30.0,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 5_000,
        tls: TlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        check_factory(tls, channel_factory)
        self._owns_channel = isinstance(target, str)
        if isinstance(target, str):
            connect = channel_factory or blocking_connector(tls)
            self._channel = connect(target)
            self._router = CoordinatorRouter(
                self._channel, bootstrap_address=target, connect=connect, token=token
            )
        else:
            self._channel = target
            follow = blocking_connector(tls) if tls is not None else channel_factory
            self._router = CoordinatorRouter(target, connect=follow, token=token)
        self._stub = self._router.bootstrap.admin
        self._timeout = timeout
        self._backoff = (retry_backoff_ms, retry_backoff_max_ms)
        self._channels = Channels.of(target, tls, channel_factory)

    def _retried(self, what: str, attempt: Callable[[float], T]) -> T:
        backoff_ms, backoff_max_ms = self._backoff
        return retry_blocking(
            attempt, within=self._timeout, backoff_ms=backoff_ms, backoff_max_ms=backoff_max_ms, what=what
        )

    def _send(self, rpc: str, request: Any, read: Callable[[Any], T], seconds: float) -> tuple[Any, T]:
        try:
            response = getattr(self._stub, rpc)(request, timeout=seconds, metadata=self._router.metadata())
        except grpc.RpcError as err:
            raise self._channels.error(err) from err
        try:
            return response, read(response)
        except Unavailable as error:
            error.address = error.address or self._channels.bootstrap
            raise

    def _do(self, plan: Plan[T]) -> T:
        rpc, request, read = plan
        return self._retried(rpc, lambda seconds: self._send(rpc, request, read, seconds)[1])

    def _do_group(self, plan: GroupPlan[T]) -> T:
        call, read = plan
        backoff_ms, backoff_max_ms = self._backoff

        def attempt(seconds: float) -> T:
            steps = routed(
                self._router, call, timeout=seconds, backoff_ms=backoff_ms, backoff_max_ms=backoff_max_ms
            )
            try:
                response = drive_blocking(self._router, steps)
            except grpc.RpcError as err:
                raise self._channels.error(err, self._router.failed_at) from err
            try:
                return read(response)
            except Unavailable as error:
                error.address = error.address or _address_of(self._router, call, self._channels)
                raise

        return self._retried(call.rpc, attempt)

    def _pages(self, plan: Plan[list[T]]) -> list[T]:
        rpc, request, read = plan
        out: list[T] = []
        while True:
            response, items = self._retried(rpc, lambda seconds: self._send(rpc, request, read, seconds))
            out += items
            if not _next_page(request, response):
                return out

    def create_topics(
        self, topics: Mapping[str, int] | Iterable[admin_pb2.CreatableTopic]
    ) -> list[CreatedTopic]:
        return self._do(_Plans.create_topics(topics))

    def create_topic(self, name: str, partitions: int, *, racks: Sequence[str] = ()) -> str:
        return self._do(_Plans.create_topic(name, partitions, racks))

    def create_partitions(self, name: str, count: int) -> int:
        return self._do(_Plans.create_partitions(name, count))

    def delete_topics(self, names: Iterable[str]) -> list[admin_pb2.DeleteTopicsResponse.Result]:
        return self._do(_Plans.delete_topics(names))

    def delete_topic(self, name: str) -> str:
        return self._do(_Plans.delete_topic(name))

    def describe_topics(self, names: Iterable[str] = (), *, page_size: int = 0) -> list[TopicDescription]:
        return self._pages(_Plans.describe_topics(names, page_size))

    def list_groups(
        self, *, states: Iterable[str] = (), types: Iterable[str] = (), page_size: int = 0
    ) -> list[GroupListing]:
        return self._pages(_Plans.list_groups(states, types, page_size))

    def describe_groups(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        return self._do_group(_Plans.describe_groups(group_ids))

    def describe_group(self, group_id: str) -> DescribedGroup:
        return self._do_group(_Plans.describe_group(group_id))

    def delete_groups(self, group_ids: Iterable[str]) -> list[admin_pb2.DeleteGroupsResponse.Result]:
        return self._do_group(_Plans.delete_groups(group_ids))

    def delete_group(self, group_id: str) -> None:
        self._do_group(_Plans.delete_group(group_id))

    def put_connectors(self, group_id: str, connectors: Mapping[str, int]) -> int:
        return self._do_group(_put_connectors(group_id, connectors))

    def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        self._do_group(_admin_commit(group_id, offsets))

    def fetch_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return self._do_group(_admin_fetch(group_id))

    def group_events(
        self,
        group_id: str,
        *,
        limit: int = 100,
        after_sequence: int = 0,
        before_sequence: int = 0,
        oldest_first: bool = False,
        types: Iterable[int] = (),
    ) -> list[GroupEvent]:
        return self._do(_group_events(group_id, limit, after_sequence, before_sequence, oldest_first, types))

    def drain_member(
        self, group_id: str, *, member_id: str = "", instance_id: str = "", undrain: bool = False
    ) -> str:
        return self._do_group(_drain(group_id, member_id, instance_id, undrain))

    def reset_offsets(
        self,
        group_id: str,
        topics: Mapping[str, Sequence[int]] | Iterable[str] = (),
        *,
        to_offset: int | None = None,
        shift_by: int | None = None,
        delete: bool = False,
        dry_run: bool = False,
    ) -> ResetOffsetsResponse:
        return self._do_group(_reset(group_id, topics, to_offset, shift_by, delete, dry_run))

    def close(self) -> None:
        for channel in self._router.take_channels():
            channel.close()
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> SyncGroupAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
