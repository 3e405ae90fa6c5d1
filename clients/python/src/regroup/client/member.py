"""GroupMember: the member side of the KIP-848 protocol, reconciling by itself.

Two tasks cooperate. The heartbeat task owns the conversation with the
coordinator: it sends one heartbeat at a time, adopts the epoch and target
assignment of each response, and handles errors (fencing, retries, session
expiry). The reconciliation task owns the listener: it walks the partitions
the member owns towards the latest target, revoking first (and acknowledging
the revocation with an immediate heartbeat) and assigning second, so that the
application never holds a partition the coordinator may already have given to
someone else. Callbacks are serialised in that one task, and heartbeats go on
while they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from regroup.client import streaming
from regroup.client._telemetry import span
from regroup.client.assignors.base import AssignmentPlan, ClientAssignor
from regroup.client.errors import (
    FENCING_CODES,
    RETRIABLE_CODES,
    RETRIABLE_STATUSES,
    Channels,
    CommitFailed,
    RegroupError,
    TimedOut,
    error_for,
    error_name,
)
from regroup.client.protocols import ConsumerWire, Wire
from regroup.client.retries import retry_async
from regroup.client.routing import (
    CoordinatorRouter,
    Endpoint,
    backoff_s,
    drive_async,
    find_async,
    routed,
    single,
)
from regroup.client.tls import TlsConfig, aio_connector, check_factory
from regroup.client.types import (
    Assignment,
    PartitionListener,
    RebalanceListener,
    TopicPartition,
    call_listener,
)
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2

log = logging.getLogger("regroup.client")

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
#: What a leave is sent again after: the coordinator is moving or loading the group.
LEAVE_RETRIABLE_CODES = frozenset(
    {
        common_pb2.COORDINATOR_NOT_AVAILABLE,
        common_pb2.NOT_COORDINATOR,
        common_pb2.COORDINATOR_LOAD_IN_PROGRESS,
    }
)

#: What commit() and committed() retry within their deadline: the coordinator is moving
#: or loading the group, or cannot reach its store for a moment.
CALL_RETRIABLE_CODES = LEAVE_RETRIABLE_CODES

Request = coordinator_pb2.ConsumerGroupHeartbeatRequest
Response = coordinator_pb2.ConsumerGroupHeartbeatResponse
Subscription = tuple[Literal["topics"], tuple[str, ...]] | tuple[Literal["regex"], str]


@dataclass(frozen=True)
class MemberOptions:
    """Tunables, named after their Kafka consumer counterparts."""

    client_id: str = "regroup-python"
    rebalance_timeout_ms: int = 60_000
    # How long one heartbeat may take before it is abandoned and retried in full.
    request_timeout_ms: int = 10_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 5_000
    # Owned partitions are given up (on_partitions_lost) this long before the
    # session would expire on the coordinator, measured from the sending of the
    # last answered heartbeat, so that the member stops working on them before
    # the coordinator can give them to someone else.
    session_safety_margin_ms: int = 1_000
    # Ask the bootstrap address (the target) which replica coordinates the group
    # (FindCoordinator) before the first heartbeat, and talk to that one directly.
    # Off by default: every replica forwards a group's calls to its owner. A server
    # without FindCoordinator is then talked to at the target, silently.
    find_coordinator: bool = False
    # Send heartbeats on the process's shared member stream (GroupCoordinator.MemberStream:
    # one per event loop and coordinator, carrying every member's heartbeats in batches),
    # through which the coordinator also nudges the member to heartbeat as soon as
    # something changed for it. Unary calls whenever there is no stream (an older
    # server, a stream that broke and is reopened after a backoff), and always when the
    # member was given `interceptors` of which none intercepts stream-stream calls.
    member_stream: bool = True
    # While wait_for_assignment() waits, the member logs why nothing arrives (the
    # coordinator unreachable, no such topic, nothing assigned yet): first after
    # wait_log_after_ms, then every wait_log_interval_ms. Heartbeats that keep failing
    # (join() against an unreachable address) are logged at once, then at most every
    # wait_log_interval_ms while the trouble lasts.
    wait_log_after_ms: int = 5_000
    wait_log_interval_ms: int = 30_000


#: The least time join() gives its last heartbeat; sooner than that it raises TimedOut.
MIN_JOIN_ATTEMPT_S = 0.05
#: How long the DescribeTopics that tells why nothing is assigned may take at most.
MAX_DIAGNOSIS_S = 2.0


@dataclass(frozen=True)
class _Why:
    """Why a member waits: what to say, at which log level, and the error behind it."""

    text: str
    level: int
    code: int = common_pb2.NONE
    cause: BaseException | None = None


class _Flush:
    """A wish to have the current owned set acknowledged by a heartbeat."""

    def __init__(self) -> None:
        self.done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def resolve(self, ok: bool) -> None:
        if not self.done.done():
            self.done.set_result(ok)


class GroupMember:
    """An asyncio group member: `await member.join(...)`, then it heartbeats and
    reconciles in the background until `await member.close()`.

    >>> async with GroupMember("127.0.0.1:50051", listener=MyListener()) as member:
    ...     await member.join("orders", topics=["orders"])
    ...     ...  # process member.assignment().partitions

    `target` is the bootstrap address (or a channel to it). When the service runs as
    several replicas, the member follows its group's coordinator (NOT_COORDINATOR
    naming another address, or `MemberOptions.find_coordinator`) on channels that
    `channel_factory(address)` opens, by default insecure ones with `interceptors`,
    or TLS ones with `tls` (a `TlsConfig`; not with a factory); pass a factory for
    channel options. Given a channel and no factory, the member stays on that channel
    (the service forwards), or follows over channels that `tls` makes. `token` is sent
    as `authorization: Bearer <token>` with every call (see "Access control" in the README).
    """

    _wire: Wire = ConsumerWire

    def __init__(
        self,
        target: str | grpc.aio.Channel,
        *,
        listener: PartitionListener | None = None,
        member_id: str | None = None,
        options: MemberOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        tls: TlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        check_factory(tls, channel_factory)
        #: How channels are made, as a key: members alike share a member stream.
        self._stream_key: tuple[Any, ...] = (
            tls,
            token,
            tuple(id(i) for i in interceptors or ()),
            id(channel_factory) if channel_factory is not None else None,
        )
        self._connect: Callable[[str], grpc.aio.Channel] | None
        self._bootstrap_target = target if isinstance(target, str) else None
        #: Where calls go and how channels speak, for the errors the member raises.
        self._channels = Channels.of(target, tls, channel_factory)
        if isinstance(target, str):
            if channel_factory is not None and interceptors:
                raise ValueError("with channel_factory, add the interceptors to the channels it makes")
            connect = channel_factory or aio_connector(tls, interceptors)
            self._connect = connect
            self._channel = connect(target)
            self._owns_channel = True
            self._router = CoordinatorRouter(
                self._channel, bootstrap_address=target, connect=connect, token=token
            )
        else:
            self._channel = target
            self._owns_channel = False
            follow = aio_connector(tls, interceptors) if tls is not None else channel_factory
            self._connect = follow
            self._router = CoordinatorRouter(target, connect=follow, token=token)
        #: The member streams this member used, by their key.
        self._muxes: dict[tuple[Any, ...], streaming.StreamMux] = {}
        #: Interceptors given here see every heartbeat: streams only without interceptors or
        #: with one that grpc applies to stream-stream calls (grpc applies each interceptor
        #: object to one kind of call only). Unary-only ones, adding credentials or watching
        #: answers, would otherwise silently miss the heartbeats sent on a stream.
        self._streams_intercepted = not interceptors or any(_intercepts_streams(i) for i in interceptors)
        #: Ask FindCoordinator before the next heartbeat (a NOT_COORDINATOR named nobody).
        self._lookup_wanted = False
        #: Called by method name (a ConnectWorker's listener has other names).
        self._listener: object = listener if listener is not None else RebalanceListener()
        self._options = options or MemberOptions()
        self._clock = clock
        self._member_id = member_id or uuid.uuid4().hex
        self._group_id = ""
        self._instance_id: str | None = None
        self._rack_id: str | None = None
        #: capacity, replicas, require_co_partitioning: None is never sent (the default).
        self._weights: dict[str, object] = {}
        self._server_assignor: str | None = None
        self._subscription: Subscription = ("topics", ())
        self._url: str | None = None
        #: Client-side assignors by name, in preference order, and the reason each advertises.
        self._assignors: dict[str, ClientAssignor] = {}
        self._reasons: dict[str, int] = {}
        self._computing = False
        self._rebalance_timer: asyncio.TimerHandle | None = None

        self._epoch = JOIN_EPOCH
        self._interval_ms = 0
        self._session_timeout_ms = 0
        self._last_answered_send = 0.0  # clock() when the last answered heartbeat was sent
        self._target: frozenset[TopicPartition] | None = None
        # What the member owns (its callbacks done) and the epoch at which it got
        # each partition; replaced as a whole, never mutated, so that another
        # thread (the synchronous twin) reads a consistent pair.
        self._holding: tuple[frozenset[TopicPartition], dict[TopicPartition, int]] = (frozenset(), {})

        self._sent: dict[str, object] = {}  # the fields the coordinator has from us
        self._send_full = True
        self._failures = 0
        self._flushes: list[_Flush] = []
        self._lose_requested = False
        self._lost_done: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._reconcile_wanted: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._failure: RegroupError | None = None
        #: Why the last heartbeats failed (None once one is answered), and when that was logged.
        self._trouble: RegroupError | None = None
        self._trouble_logged_at: float | None = None
        self._trouble_unlogged = 0
        #: Set (then dropped) at the next change `wait_for_assignment` may wait for.
        self._changed: asyncio.Event | None = None
        self._joined = False

    # -- public API --------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def member_epoch(self) -> int:
        return self._epoch

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def failure(self) -> RegroupError | None:
        """The error that stopped the member (FENCED_INSTANCE_ID, an invalid request...), if any."""
        return self._failure

    def assignment(self) -> Assignment:
        """The partitions the member owns now (callbacks done), with its member epoch."""
        owned, epochs = self._holding
        return Assignment(self._epoch, owned, epochs)

    @property
    def _owned(self) -> frozenset[TopicPartition]:
        return self._holding[0]

    def _hold(self, owned: frozenset[TopicPartition], epochs: dict[TopicPartition, int]) -> None:
        self._holding = (owned, epochs)
        self._notify()

    def _notify(self) -> None:
        """Wakes `wait_for_assignment`: the assignment, the epoch, the target or the
        failure changed. Every change of them calls this (on the member's loop)."""
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    async def join(
        self,
        group_id: str,
        *,
        topics: Sequence[str] | None = None,
        regex: str | None = None,
        instance_id: str | None = None,
        rack_id: str | None = None,
        assignor: str | None = None,
        client_assignors: Sequence[ClientAssignor] | None = None,
        capacity: int | None = None,
        replicas: int | None = None,
        require_co_partitioning: bool | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline for the retries, raised as TimedOut
    ) -> None:
        """Joins the group and returns once the coordinator accepted the member;
        partitions then arrive through the listener. Raises RegroupError when the
        coordinator refuses the join for good (invalid request, group full...).
        Retries an unreachable or busy coordinator, logging why (at once, then every
        `wait_log_interval_ms`), for ever or at most `timeout` seconds: then raises
        TimedOut (a RegroupError and a TimeoutError) saying why, from the last error.

        `assignor` names a server-side assignor; `client_assignors` (in order of
        preference) makes the group compute its assignment in its members.
        `rack_id` lets rack-aware assignors prefer partitions of the member's rack;
        `capacity` (1-1000) weighs its share under the uniform assignor; `replicas`
        (1-16) asks for each partition on that many distinct members;
        `require_co_partitioning` has the join refused (INVALID_REQUEST) unless the
        range assignor co-partitions the member's topics."""
        if (topics is None) == (regex is None):
            raise ValueError("pass exactly one of topics= or regex=")
        self._subscription = ("topics", tuple(topics)) if topics is not None else ("regex", regex or "")
        self._rack_id = rack_id
        self._weights = {
            "capacity": capacity,
            "replicas": replicas,
            "require_co_partitioning": require_co_partitioning,
        }
        await self._join(group_id, instance_id, assignor, client_assignors, timeout)

    async def _join(
        self,
        group_id: str,
        instance_id: str | None,
        assignor: str | None,
        client_assignors: Sequence[ClientAssignor] | None,
        within: float | None = None,
    ) -> None:
        if self._joined:
            raise RuntimeError("this member already joined; create a new one")
        if assignor is not None and client_assignors:
            raise ValueError("a member uses a server-side assignor or client-side assignors, not both")
        self._group_id = group_id
        self._instance_id = instance_id
        self._server_assignor = assignor
        self._assignors = {a.name: a for a in client_assignors or ()}
        self._reasons = dict.fromkeys(self._assignors, 0)
        self._wake = asyncio.Event()
        self._reconcile_wanted = asyncio.Event()
        self._lost_done = asyncio.Event()
        self._lost_done.set()
        self._lookup_wanted = self._options.find_coordinator
        with span("regroup.join", group_id=group_id, member_id=self._member_id):
            delay = await self._join_until_accepted(within)
        self._joined = True
        log.info("joined group %s as %s at epoch %d", group_id, self._member_id, self._epoch)
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(delay), name=f"regroup-heartbeat-{self._member_id}"),
            asyncio.create_task(self._reconcile_loop(), name=f"regroup-reconcile-{self._member_id}"),
        ]

    def subscribe(self, *, topics: Sequence[str] | None = None, regex: str | None = None) -> None:
        """Changes the subscription; the next heartbeat carries it."""
        if (topics is None) == (regex is None):
            raise ValueError("pass exactly one of topics= or regex=")
        self._subscription = ("topics", tuple(topics)) if topics is not None else ("regex", regex or "")
        self._poke()

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int | tuple[int, str]],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline for the retries
    ) -> None:
        """Commits offsets (the next offset to process, optionally with metadata) with
        the member's current epoch. A coordinator that is moving or loading the group,
        or cannot reach its store (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
        COORDINATOR_LOAD_IN_PROGRESS), or cannot be reached, is retried after the
        backoff within `timeout` seconds (default `request_timeout_ms`); then that
        error is raised (`Unavailable`, `NotCoordinator`). Raises `Fenced` when the
        whole commit is refused (STALE_MEMBER_EPOCH after a rebalance,
        UNKNOWN_MEMBER_ID), and CommitFailed naming the refused partitions
        (PARTITION_NOT_OWNED: not this member's any more)."""
        request = coordinator_pb2.OffsetCommitRequest(
            group_id=self._group_id, member_id=self._member_id, member_epoch=self._epoch
        )
        by_topic: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
        for tp, value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            by_topic.setdefault((tp.topic_id, tp.topic), []).append((tp.partition, offset, metadata))
        for (topic_id, name), entries in sorted(by_topic.items()):
            topic = request.topics.add(topic_id=topic_id, name=name)
            for partition, offset, metadata in sorted(entries):
                topic.partitions.add(partition=partition, offset=offset, metadata=metadata)
        with span("regroup.commit", group_id=self._group_id, partitions=len(offsets)):
            response = await self._retried_call("OffsetCommit", request, timeout)
        if response.error_code != common_pb2.NONE:
            raise error_for(response.error_code, response.error_message)
        failed = {
            TopicPartition(t.name, p.partition, t.topic_id): error_for(p.error_code, p.error_message)
            for t in response.topics
            for p in t.partitions
            if p.error_code != common_pb2.NONE
        }
        if failed:
            raise CommitFailed(failed)

    async def committed(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline for the retries
    ) -> dict[TopicPartition, int]:
        """The committed offsets of `partitions` (default: every committed one of the
        group); partitions without a committed offset are left out. Retries as
        `commit` does, within `timeout` seconds (default `request_timeout_ms`)."""
        request = coordinator_pb2.OffsetFetchRequest(
            group_id=self._group_id, member_id=self._member_id, member_epoch=self._epoch
        )
        if partitions is not None:
            by_topic: dict[tuple[str, str], list[int]] = {}
            for tp in partitions:
                by_topic.setdefault((tp.topic_id, tp.topic), []).append(tp.partition)
            for (topic_id, name), ps in sorted(by_topic.items()):
                request.topics.add(topic_id=topic_id, name=name, partitions=sorted(ps))
            if not by_topic:
                return {}
        response = await self._retried_call("OffsetFetch", request, timeout)
        if response.error_code != common_pb2.NONE:
            raise error_for(response.error_code, response.error_message)
        return {
            TopicPartition(t.name, p.partition, t.topic_id): p.offset
            for t in response.topics
            for p in t.partitions
            if p.error_code == common_pb2.NONE and p.offset >= 0
        }

    async def wait_for_assignment(
        self,
        predicate: Callable[[Assignment], bool] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - raised as TimedOut, saying why
    ) -> Assignment:
        """Waits until the owned partitions satisfy `predicate` (by default: the
        member reached its target and owns something), for ever or at most `timeout`
        seconds: then raises TimedOut (a RegroupError and a TimeoutError) saying why
        nothing arrived. While it waits, it logs why: first after `wait_log_after_ms`,
        then every `wait_log_interval_ms` (MemberOptions). Raises the member's
        failure if it stopped."""
        return await self._wait(predicate, timeout, report=True)

    async def _wait(
        self, predicate: Callable[[Assignment], bool] | None, within: float | None, *, report: bool
    ) -> Assignment:
        """wait_for_assignment, for at most `within` seconds; `report`: log why nothing
        arrives while waiting."""

        def settled(a: Assignment) -> bool:
            return self._target is not None and a.partitions == self._target and bool(a.partitions)

        check = predicate or settled
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = math.inf if within is None else now + within
        next_report = now + self._options.wait_log_after_ms / 1000 if report else math.inf
        while not check(self.assignment()):
            if self._failure is not None:
                raise self._failure
            now = loop.time()
            if now >= deadline:
                why = await self._why_waiting()
                raise TimedOut(
                    why.code, f"{self._who()}: not assigned within {within:g} s: {why.text}"
                ) from why.cause
            if now >= next_report:
                why = await self._why_waiting()
                log.log(why.level, "%s waits for its assignment: %s", self._who(), why.text)
                next_report = loop.time() + self._options.wait_log_interval_ms / 1000
            if self._changed is None:
                self._changed = asyncio.Event()
            wake = min(deadline, next_report) - loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if math.isinf(wake) else max(0.0, wake)):
                    await self._changed.wait()
        return self.assignment()

    def _who(self) -> str:
        return f"member {self._member_id} of group {self._group_id}"

    async def _why_waiting(self) -> _Why:
        """Why the member has no (satisfying) assignment now, for a log or a TimedOut."""
        trouble = self._trouble
        if not self._joined:
            why = (
                f"it has not joined ({trouble})"
                if trouble is not None
                else "it has not joined: call join() first"
            )
            return _Why(why, logging.WARNING, trouble.code if trouble else common_pb2.NONE, trouble)
        if trouble is not None:
            return _Why(f"no answer from the coordinator: {trouble}", logging.WARNING, trouble.code, trouble)
        target, owned = self._target, self._owned
        if target is None:
            return _Why(f"the coordinator sent no assignment yet (member epoch {self._epoch})", logging.INFO)
        if not target:
            return await self._why_nothing_assigned()
        if target != owned:
            return _Why(
                f"a rebalance is under way: it owns {len(owned)} of the {len(target)} partitions "
                "assigned to it (others may wait for their owners to release them)",
                logging.INFO,
            )
        return _Why(f"it owns {len(owned)} partitions, which the predicate does not accept", logging.INFO)

    async def _why_nothing_assigned(self) -> _Why:
        """The coordinator assigned nothing: a subscribed topic that does not exist says why."""
        kind, spec = self._subscription
        if kind == "regex":
            return _Why(
                f"nothing assigned: does a topic's whole name match the regex {spec!r}?", logging.WARNING
            )
        if not spec:
            return _Why("nothing assigned: it subscribes to no topics (subscribe())", logging.INFO)
        missing, unknown = await self._missing_topics(tuple(spec))
        if missing:
            return _Why(
                f"no such topic: {', '.join(missing)} (create it: GroupAdmin.create_topics, "
                "or `regroup topics create`)",
                logging.WARNING,
                common_pb2.UNKNOWN_TOPIC_OR_PARTITION,
            )
        return _Why(
            "nothing assigned yet: other members hold the partitions of "
            f"{', '.join(spec)} (more members than partitions?){unknown}",
            logging.INFO,
        )

    async def _missing_topics(self, names: tuple[str, ...]) -> tuple[list[str], str]:
        """The subscribed topics that do not exist (DescribeTopics at the bootstrap
        address), and why that could not be told, if it could not."""
        request = admin_pb2.DescribeTopicsRequest(names=list(names))
        seconds = min(self._options.request_timeout_ms / 1000, MAX_DIAGNOSIS_S)
        try:
            response = await self._router.bootstrap.admin.DescribeTopics(
                request, timeout=seconds, metadata=self._router.metadata()
            )
        except grpc.aio.AioRpcError as err:
            return [], f" (DescribeTopics failed: {err.code().name})"
        if response.error_code != common_pb2.NONE:
            return [], f" (DescribeTopics refused: {error_name(response.error_code)})"
        missing = [t.name for t in response.topics if t.error_code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION]
        refused = sorted(
            {error_name(t.error_code) for t in response.topics} - {"NONE", "UNKNOWN_TOPIC_OR_PARTITION"}
        )
        return missing, f" (DescribeTopics: {', '.join(refused)})" if refused else ""

    async def close(self, *, permanent: bool | None = None) -> None:
        """Revokes what the member owns (listener), then leaves the group: with
        epoch -1, or -2 for a static member, which keeps its partitions for it
        until its session times out (`permanent=True` leaves for good)."""
        if self._closing:
            return
        self._closing = True
        try:
            if self._joined:
                await self._stop_tasks()
                if self._failure is None and self._epoch > 0:
                    owned = self._owned
                    if owned:
                        with span("regroup.revoke", group_id=self._group_id, partitions=len(owned)):
                            await call_listener(self._listener, self._wire.callbacks[0], owned)
                    self._hold(frozenset(), {})
                    await self._leave(permanent)
        finally:
            await self._close_channels()

    async def abort(self) -> None:
        """Stops at once, without callbacks and without leaving: what a crash
        looks like to the coordinator, which removes the member when its session
        times out. For processes that must stop now, and for tests."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._resolve(self._flushes, False)
        self._flushes = []
        await self._close_channels()

    async def _close_channels(self) -> None:
        await self._release_streams()
        for channel in self._router.take_channels():
            await channel.close()
        if self._owns_channel:
            await self._channel.close()

    async def _group_call(self, rpc: str, request: Any, seconds: float | None = None) -> Any:
        """A call of the member's group other than the heartbeat, at the group's coordinator:
        it follows NOT_COORDINATOR and leaves an unreachable followed address, backing off
        in between, within `seconds` (request_timeout_ms) in all. Other answers come
        back as they are."""
        options = self._options
        steps = routed(
            self._router,
            single("coordinator", rpc, self._group_id, request),
            timeout=options.request_timeout_ms / 1000 if seconds is None else seconds,
            backoff_ms=options.retry_backoff_ms,
            backoff_max_ms=options.retry_backoff_max_ms,
        )
        return await drive_async(self._router, steps)

    async def _retried_call(self, rpc: str, request: Any, within: float | None) -> Any:
        """`_group_call`, retried after the backoff while the coordinator is moving,
        loading or unreachable (CALL_RETRIABLE_CODES, gRPC UNAVAILABLE), within `within`
        seconds (default request_timeout_ms); then that error is raised. Other answers
        come back as they are; other gRPC errors are raised as their RegroupError."""
        options = self._options

        async def attempt(seconds: float) -> Any:
            try:
                response = await self._group_call(rpc, request, seconds)
            except grpc.aio.AioRpcError as err:
                raise self._channels.error(err, self._router.failed_at) from err
            if response.error_code in CALL_RETRIABLE_CODES:
                address = self._router.address(self._group_id) or self._channels.bootstrap
                raise error_for(response.error_code, response.error_message, address=address)
            return response

        return await retry_async(
            attempt,
            within=options.request_timeout_ms / 1000 if within is None else within,
            backoff_ms=options.retry_backoff_ms,
            backoff_max_ms=options.retry_backoff_max_ms,
            what=f"{rpc} of {self._who()}",
        )

    async def __aenter__(self) -> GroupMember:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- heartbeats ----------------------------------------------------------

    async def _join_until_accepted(self, within: float | None) -> float:
        """The first heartbeat, retried until the coordinator accepts or refuses the member,
        or `within` seconds passed (TimedOut, from the last failure).

        The member may still be at epoch 0 (a new group whose first target is
        not computed yet): it is in the group, and keeps sending full requests."""
        deadline = math.inf if within is None else self._clock() + within
        while True:
            delay = await self._heartbeat_once(deadline - self._clock())
            if self._failure is not None:
                raise self._failure
            if self._failures == 0:
                return delay
            remaining = deadline - self._clock()
            if remaining < MIN_JOIN_ATTEMPT_S:
                trouble = self._trouble
                why = str(trouble) if trouble is not None else "no answer"
                code = trouble.code if trouble is not None else common_pb2.COORDINATOR_NOT_AVAILABLE
                raise TimedOut(code, f"{self._who()}: not joined within {within:g} s: {why}") from trouble
            await asyncio.sleep(min(delay, remaining - MIN_JOIN_ATTEMPT_S))

    async def _heartbeat_loop(self, delay: float) -> None:
        assert self._wake is not None and self._lost_done is not None
        while not self._closing:
            # asyncio.timeout rather than wait_for, which on 3.11 can swallow a cancellation
            # (CPython gh-86296); _closing ends the loop either way.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, delay)):
                    await self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            # A fenced member rejoins only after on_partitions_lost returned.
            await self._lost_done.wait()
            delay = await self._heartbeat_once()
            if self._failure is not None:
                return

    def _call_timeout(self, cap: float = math.inf) -> float:
        """How long the next call may take: request_timeout_ms, never past the session,
        nor past `cap` seconds (what is left of join()'s timeout)."""
        timeout = min(self._options.request_timeout_ms / 1000, max(MIN_JOIN_ATTEMPT_S, cap))
        if self._epoch > 0 and self._session_timeout_ms:
            # An answer that comes after the session expired would not save the partitions.
            timeout = max(0.05, min(timeout, self._session_expiry() - self._clock()))
        return timeout

    async def _heartbeat_once(self, cap: float = math.inf) -> float:
        """Sends one heartbeat (taking at most `cap` seconds) and applies its outcome;
        returns the delay until the next one."""
        if self._lookup_wanted:
            self._lookup_wanted = False
            # Half the time at most, so that the heartbeat keeps time for its own answer.
            await find_async(self._router, self._group_id, self._call_timeout(cap) / 2)
        request, fields = self._build_request()
        flushes, self._flushes = self._flushes, []
        sent_at = self._clock()
        timeout = self._call_timeout(cap)
        endpoint = self._router.route(self._group_id)
        try:
            with span("regroup.heartbeat", group_id=self._group_id, member_epoch=request.member_epoch):
                response = await self._send_heartbeat(endpoint, request, timeout)
        except asyncio.CancelledError:
            # close() stops the heartbeats: whoever waits for this acknowledgement (a
            # revocation in the reconciliation task) must not wait for ever.
            self._resolve(flushes, False)
            raise
        except grpc.aio.AioRpcError as err:
            error = self._channels.error(err, endpoint.address)
            error.__cause__ = err
            if err.code() not in RETRIABLE_STATUSES:
                self._fail(error)
                self._resolve(flushes, False)
                return 0.0
            self._troubled(error)
            # A followed coordinator that is gone: the retry goes to the bootstrap address.
            self._router.unreachable([self._group_id], endpoint, err.code())
            return self._retry_later(flushes)
        code: int = response.error_code
        if code not in RETRIABLE_CODES:
            self._untroubled()
        if code in (common_pb2.NONE, common_pb2.COMPUTE_ASSIGNMENT):
            self._accept(response, fields, sent_at)
            self._resolve(flushes, True)
            if code == common_pb2.COMPUTE_ASSIGNMENT:
                self._start_computation()
            interval_ms: int = response.heartbeat_interval_ms
            return interval_ms / 1000
        if code in FENCING_CODES and self._epoch != JOIN_EPOCH:
            log.warning(
                "member %s fenced (%s: %s); its partitions are lost, rejoining",
                self._member_id,
                error_name(code),
                response.error_message,
            )
            self._lose_everything()
            self._resolve(flushes, False)
            return 0.0
        if code in RETRIABLE_CODES:
            # Never a fencing: the member keeps its epoch and partitions (a failover keeps them too).
            self._troubled(
                error_for(code, response.error_message, address=endpoint.address or self._channels.bootstrap)
            )
            if code == common_pb2.NOT_COORDINATOR:
                step = self._router.not_coordinator(self._group_id, response.coordinator_address)
                self._lookup_wanted = step == "find"
            self._note_renewed_session(response, sent_at)
            return self._retry_later(flushes)
        self._fail(error_for(code, response.error_message))
        self._resolve(flushes, False)
        return 0.0

    def _troubled(self, error: RegroupError) -> None:
        """A heartbeat failed and is retried: logged at once, then at most every
        wait_log_interval_ms while the trouble lasts (each retry at DEBUG)."""
        self._trouble = error
        now = self._clock()
        logged = self._trouble_logged_at
        if logged is not None and now - logged < self._options.wait_log_interval_ms / 1000:
            self._trouble_unlogged += 1
            log.debug("heartbeat of %s failed: %s; retrying", self._who(), error)
            return
        doing = "heartbeats of" if self._joined else "cannot join yet:"
        since = f" ({self._trouble_unlogged} more failures since the last report)" if logged else ""
        log.warning("%s %s: %s; retrying%s", doing, self._who(), error, since)
        self._trouble_logged_at, self._trouble_unlogged = now, 0

    def _untroubled(self) -> None:
        """A heartbeat was answered: the trouble is over."""
        if self._trouble is not None and self._trouble_logged_at is not None:
            log.info("%s: the coordinator answers again", self._who())
        self._trouble, self._trouble_logged_at, self._trouble_unlogged = None, None, 0

    async def _send_heartbeat(self, endpoint: Endpoint[Any], request: Request, seconds: float) -> Response:
        """On the member stream to the endpoint when there is one, else a unary call."""
        mux = self._mux(endpoint)
        if mux is not None:
            response = await mux.heartbeat(self._wire.stream_field, request, seconds, self._poke)
            if response is not None:
                return response  # type: ignore[no-any-return]
        return await getattr(endpoint.coordinator, self._wire.rpc)(  # type: ignore[no-any-return]
            request, timeout=seconds, metadata=self._router.metadata()
        )

    def _mux(self, endpoint: Endpoint[Any]) -> streaming.StreamMux | None:
        """The process's member stream to `endpoint` (shared with every member that
        reaches that address alike), or None when streams are off."""
        if not self._options.member_stream or not self._streams_intercepted or self._closing:
            return None
        if endpoint.followed or self._owns_channel:
            address = endpoint.address if endpoint.followed else self._bootstrap_target
            connect = self._connect
            if address is None or connect is None:
                return None
            key: tuple[Any, ...] = ("address", address, *self._stream_key)
            owns = True

            def open_channel() -> Any:
                assert connect is not None and address is not None
                return connect(address)
        else:
            key = ("channel", id(endpoint.channel), self._stream_key[1])
            owns = False

            def open_channel() -> Any:
                return endpoint.channel

        mux = self._muxes.get(key)
        if mux is None:
            mux = self._muxes[key] = streaming.acquire(
                self,
                key,
                open_channel,
                self._router.metadata,
                owns_channel=owns,
                backoff_ms=self._options.retry_backoff_ms,
                backoff_max_ms=self._options.retry_backoff_max_ms,
            )
        return mux if mux.supported else None

    async def _release_streams(self) -> None:
        muxes, self._muxes = list(self._muxes.values()), {}
        for mux in muxes:
            mux.forget(self._group_id, self._member_id)
            await streaming.release(self, mux)

    def _build_request(self) -> tuple[Request, dict[str, object]]:
        """The full request after joining or any error, only changed fields otherwise."""
        fields = self._fields()
        if not self._send_full and self._epoch != JOIN_EPOCH:
            fields = {k: v for k, v in fields.items() if self._sent.get(k, _UNSENT) != v}
        request = self._wire.request_type(
            group_id=self._group_id, member_id=self._member_id, member_epoch=self._epoch
        )
        for name, value in fields.items():
            if name == "owned":
                assert isinstance(value, frozenset)
                self._wire.set_owned(request, value)
            else:
                _set_field(request, name, value)
        return request, fields

    def _fields(self) -> dict[str, object]:
        """Every field of a full request, by name (values compare for the deltas)."""
        return {
            "instance_id": self._instance_id,
            "rack_id": self._rack_id,
            "rebalance_timeout_ms": self._options.rebalance_timeout_ms,
            "subscription": self._subscription,
            "server_assignor": self._server_assignor,
            "client_assignors": self._client_assignors_field(),
            "client_id": self._options.client_id,
            **self._weights,
            "owned": self._owned,
        }

    def _client_assignors_field(self) -> tuple[tuple[str, int, int, int, int, bytes], ...] | None:
        if not self._assignors:
            return None
        entries = []
        for name, a in self._assignors.items():
            version, metadata = a.metadata()
            entries.append(
                (name, a.minimum_version, a.maximum_version, self._reasons[name], version, metadata)
            )
        return tuple(entries)

    def _accept(self, response: Response, fields: dict[str, object], sent_at: float) -> None:
        self._failures = 0
        self._send_full = False
        self._sent.update(fields)
        self._member_id = response.member_id or self._member_id
        self._epoch = response.member_epoch
        self._notify()
        self._session_timeout_ms = response.session_timeout_ms
        self._interval_ms = response.heartbeat_interval_ms
        self._last_answered_send = sent_at
        target = self._wire.assignment(response)
        if target is not None:
            if target != self._target:
                log.debug(
                    "member %s target at epoch %d: %d partitions", self._member_id, self._epoch, len(target)
                )
            self._target = target
            self._notify()
            self._want_reconcile()
        elif self._target is None and self._epoch > 0:
            self._target = frozenset()
            self._notify()

    def _note_renewed_session(self, response: Response, sent_at: float) -> None:
        """A refusal whose `session_renewed` says the coordinator could not store
        but renewed this member's session at its epoch: for the session's sake it
        counts as an answer, so the partitions stay through a database outage."""
        if (
            response.error_code == common_pb2.COORDINATOR_NOT_AVAILABLE
            and response.session_renewed
            and self._epoch > 0
            and response.member_epoch == self._epoch
            and response.session_timeout_ms > 0
        ):
            self._session_timeout_ms = response.session_timeout_ms
            self._last_answered_send = sent_at

    def _retry_later(self, flushes: list[_Flush]) -> float:
        """Back off with jitter; keep the partitions only while the session lives."""
        self._send_full = True
        self._flushes = flushes + self._flushes
        self._failures += 1
        delay = backoff_s(self._failures, self._options.retry_backoff_ms, self._options.retry_backoff_max_ms)
        if self._epoch <= 0 or not self._session_timeout_ms:
            return delay
        expires_in: float = self._session_expiry() - self._clock()
        if expires_in <= 0:
            log.warning(
                "member %s: session expired without an answer; its partitions are lost", self._member_id
            )
            self._lose_everything()
            return delay
        # Halfway to the expiry at the latest: a retry sent at the expiry itself would have
        # no time left to be answered (its deadline is the expiry), and an answer that
        # renews the session (even COORDINATOR_NOT_AVAILABLE, see _note_renewed_session)
        # would come too late to keep the partitions.
        return min(delay, expires_in / 2)

    def _session_expiry(self) -> float:
        margin = min(self._options.session_safety_margin_ms, self._session_timeout_ms // 2)
        return self._last_answered_send + (self._session_timeout_ms - margin) / 1000

    def _lose_everything(self) -> None:
        """Fenced or expired: the partitions go (on_partitions_lost), then the member rejoins."""
        assert self._lost_done is not None
        self._epoch = JOIN_EPOCH
        self._target = None
        self._notify()
        self._send_full = True
        self._lose_requested = True
        self._lost_done.clear()
        # Nobody waits for an acknowledgement that the coordinator will never get.
        self._resolve(self._flushes, False)
        self._flushes = []
        self._want_reconcile()

    def _fail(self, error: RegroupError) -> None:
        log.error("member %s stops: %s", self._member_id, error)
        self._failure = error
        self._notify()
        if self._joined:
            self._lose_everything()

    @staticmethod
    def _resolve(flushes: list[_Flush], ok: bool) -> None:
        for flush in flushes:
            flush.resolve(ok)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _heartbeat_now(self) -> bool:
        """Sends a heartbeat carrying the current owned set as soon as possible and
        waits for the coordinator to take it; False if the member was fenced."""
        if self._closing or self._lose_requested:
            return False
        flush = _Flush()
        self._flushes.append(flush)
        self._poke()
        return await flush.done

    async def _leave(self, permanent: bool | None) -> None:
        static_leave = self._instance_id is not None and not permanent
        epoch = STATIC_LEAVE_EPOCH if static_leave else LEAVE_EPOCH
        request = self._wire.request_type(
            group_id=self._group_id, member_id=self._member_id, member_epoch=epoch
        )
        if self._instance_id is not None:
            request.instance_id = self._instance_id
        with span("regroup.leave", group_id=self._group_id, member_epoch=epoch):
            response = await self._send_leave(request)
        if response is None:
            return
        if response.error_code != common_pb2.NONE:
            log.warning("leave of %s refused: %s", self._member_id, error_name(response.error_code))
        self._epoch = epoch
        self._notify()
        log.info("member %s left group %s with epoch %d", self._member_id, self._group_id, epoch)

    async def _send_leave(self, request: Any) -> Any:
        """Sends the leave until the coordinator takes it, retrying what a failover or an
        unreachable replica answers, while the member's session lives: a leave that is
        given up leaves the member in the group, holding its partitions for nobody, until
        its session times out. None when it was given up (the session timeout then
        removes the member)."""
        options = self._options
        deadline = self._clock() + options.request_timeout_ms / 1000
        if self._session_timeout_ms:
            deadline = max(deadline, self._session_expiry())
        failures = 0
        while True:
            remaining = deadline - self._clock()
            try:
                response = await self._group_call(self._wire.rpc, request, max(0.05, remaining))
            except grpc.aio.AioRpcError as err:
                if err.code() not in RETRIABLE_STATUSES:
                    log.warning("leave of %s failed (%s)", self._member_id, err.code().name)
                    return None
                outcome = err.code().name
            else:
                if response.error_code not in LEAVE_RETRIABLE_CODES:
                    return response
                outcome = error_name(response.error_code)
            failures += 1
            delay = backoff_s(failures, options.retry_backoff_ms, options.retry_backoff_max_ms)
            if self._clock() + delay >= deadline:
                log.warning("leave of %s given up (%s)", self._member_id, outcome)
                return None
            log.info("leave of %s not taken (%s), retrying", self._member_id, outcome)
            await asyncio.sleep(delay)

    async def _stop_tasks(self) -> None:
        """Stops heartbeating, then lets the reconciliation finish the callback it is in."""
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
        heartbeat, reconcile = self._tasks[:2]
        for extra in self._tasks[2:]:
            extra.cancel()
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
        self._resolve(self._flushes, False)
        self._flushes = []
        self._want_reconcile()
        if reconcile is not asyncio.current_task():
            await reconcile

    # -- client-side assignment ------------------------------------------------

    def _start_computation(self) -> None:
        """COMPUTE_ASSIGNMENT: run the group's assignor here (once at a time)."""
        if self._computing or self._closing or not self._assignors:
            return
        self._computing = True
        task = asyncio.create_task(self._compute(), name=f"regroup-compute-{self._member_id}")
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _compute(self) -> None:
        try:
            with span("regroup.compute_assignment", group_id=self._group_id):
                prep = await self._group_call(
                    "PrepareAssignment",
                    coordinator_pb2.PrepareAssignmentRequest(
                        group_id=self._group_id, member_id=self._member_id, member_epoch=self._epoch
                    ),
                )
                if prep.error_code != common_pb2.NONE:
                    log.info(
                        "PrepareAssignment refused (%s): %s", error_name(prep.error_code), prep.error_message
                    )
                    return
                assignor = self._assignors.get(prep.assignor_name)
                snapshot = self._wire.snapshot(self._group_id, prep)
                if assignor is None:
                    plan = AssignmentPlan({}, error=1, error_message=f"unknown assignor {prep.assignor_name}")
                else:
                    try:
                        # Pure CPU work: off the loop, so heartbeats go on for big groups.
                        plan = await asyncio.to_thread(assignor.assign, snapshot)
                    except Exception as e:
                        log.exception("client assignor %s failed", prep.assignor_name)
                        plan = AssignmentPlan({}, error=1, error_message=repr(e)[:500])
                request = coordinator_pb2.InstallAssignmentRequest(
                    group_id=self._group_id,
                    member_id=self._member_id,
                    member_epoch=self._epoch,
                    group_epoch=prep.group_epoch,
                    error=plan.error,
                    error_message=plan.error_message,
                    assignor_state=plan.state,
                )
                if not plan.error:
                    self._wire.fill_install(request, plan)
                installed = await self._group_call("InstallAssignment", request)
            if installed.error_code != common_pb2.NONE:
                log.warning(
                    "InstallAssignment refused (%s): %s",
                    error_name(installed.error_code),
                    installed.error_message,
                )
                return
            log.info("installed the target of group %s for epoch %d", self._group_id, prep.group_epoch)
            if plan.rebalance_at_ms is not None:
                self._schedule_rebalance(prep.assignor_name, plan.rebalance_at_ms - prep.coordinator_time_ms)
        except grpc.aio.AioRpcError as err:
            log.warning("client-side assignment of %s failed: %s", self._group_id, err.code().name)
        finally:
            self._computing = False

    def _schedule_rebalance(self, assignor: str, delay_ms: int) -> None:
        """A delayed rebalance: at that time, change the assignor's reason (which
        bumps the group epoch and asks for a new computation)."""
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()

        def bump() -> None:
            self._rebalance_timer = None
            if assignor in self._reasons:
                self._reasons[assignor] = (self._reasons[assignor] + 1) % 128
                log.info("asking group %s for a rebalance (assignor %s)", self._group_id, assignor)
                self._poke()

        self._rebalance_timer = asyncio.get_running_loop().call_later(max(0, delay_ms) / 1000, bump)

    # -- reconciliation --------------------------------------------------------

    def _want_reconcile(self) -> None:
        if self._reconcile_wanted is not None:
            self._reconcile_wanted.set()

    async def _reconcile_loop(self) -> None:
        assert self._reconcile_wanted is not None
        while not self._closing:
            await self._reconcile_wanted.wait()
            self._reconcile_wanted.clear()
            await self._reconcile()

    async def _reconcile(self) -> None:
        """Moves the owned partitions towards the target: revoke, acknowledge, then assign."""
        assert self._lost_done is not None
        while True:
            if self._lose_requested:
                lost = self._owned
                self._hold(frozenset(), {})
                if lost:
                    with span("regroup.lost", group_id=self._group_id, partitions=len(lost)):
                        await call_listener(self._listener, self._wire.callbacks[2], lost)
                self._lose_requested = False
                self._lost_done.set()
                continue
            target = self._target
            if target is None or target == self._owned or self._failure is not None or self._closing:
                return
            revoked = self._owned - target
            if revoked:
                with span("regroup.revoke", group_id=self._group_id, partitions=len(revoked)):
                    await call_listener(self._listener, self._wire.callbacks[0], revoked)
                epochs = {tp: e for tp, e in self._holding[1].items() if tp not in revoked}
                self._hold(self._owned - revoked, epochs)
                # Only once the coordinator knows that these are released may the
                # member take new ones (they may be waiting for someone else's).
                await self._heartbeat_now()
                continue
            added = target - self._owned
            epoch = self._epoch
            with span("regroup.assign", group_id=self._group_id, partitions=len(added)):
                await call_listener(self._listener, self._wire.callbacks[1], added)
            # Even when fenced or closing meanwhile, the callback handed these out:
            # they are held until on_partitions_lost or the revocation of close().
            self._hold(self._owned | added, {**self._holding[1], **dict.fromkeys(added, epoch)})
            self._poke()  # tell the coordinator early: the member may become Stable sooner


def _intercepts_streams(interceptor: object) -> bool:
    """Whether a grpc.aio channel applies `interceptor` to stream-stream calls: it files each
    interceptor under the first of these kinds it is an instance of."""
    aio = grpc.aio
    return isinstance(interceptor, aio.StreamStreamClientInterceptor) and not isinstance(
        interceptor,
        aio.UnaryUnaryClientInterceptor | aio.UnaryStreamClientInterceptor | aio.StreamUnaryClientInterceptor,
    )


class _Unsent:
    pass


_UNSENT = _Unsent()


def _set_field(request: Request, name: str, value: object) -> None:
    if value is None:
        return  # not used by this member: never sent
    if name == "subscription":
        assert isinstance(value, tuple)
        kind, spec = value
        # Both fields, so that switching between names and a regex clears the other.
        request.subscribed_topic_names.SetInParent()
        if kind == "topics":
            request.subscribed_topic_names.values.extend(spec)
            request.subscribed_topic_regex = ""
        else:
            request.subscribed_topic_regex = spec
    elif name == "client_assignors":
        assert isinstance(value, tuple)
        request.client_assignors.SetInParent()
        for a_name, lo, hi, reason, version, metadata in value:
            request.client_assignors.assignors.add(
                name=a_name,
                minimum_version=lo,
                maximum_version=hi,
                reason=reason,
                version=version,
                metadata=metadata,
            )
    else:
        setattr(request, name, value)
