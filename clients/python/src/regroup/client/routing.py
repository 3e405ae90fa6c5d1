"""Where a client sends each group's calls when the service runs as several replicas.

Groups are sharded, and each shard has one owner replica. Any replica accepts any call
and, by default, forwards a group's call to the owner, so a client that knows a single
address works. A replica that does not forward answers NOT_COORDINATOR, with the owner's
address when it knows it; FindCoordinator names the owner beforehand. A
`CoordinatorRouter` remembers, per group, the address to talk to (the bootstrap address
the user gave, until an answer names another) and one channel per address, opened like
the bootstrap one and closed with the client.

The router does no I/O: clients call, then tell it what came back (`not_coordinator`,
`unreachable`, `found`, `find_failed`). `routed` is the routing of one group call (follow,
back off, retry), written once for the asyncio and the blocking clients as a generator of
the steps to take (`Send`, `Sleep`, `Find`), which `drive_async` or `drive_blocking` run.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import grpc

from regroup.client._telemetry import trace_metadata
from regroup.client.errors import RegroupError
from regroup.v1 import admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("regroup.client")

C = TypeVar("C")
T = TypeVar("T")

#: What a followed address answers when its replica is gone (killed, or its host down):
#: the group goes back to the bootstrap address, which forwards or names the new owner.
UNREACHABLE_STATUSES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

#: What to do after a NOT_COORDINATOR answer: retry (at the address it named, or at the
#: bootstrap address), ask FindCoordinator first, or give up (the address cannot be followed).
NextStep = Literal["retry", "find", "stuck"]

Service = Literal["coordinator", "admin"]


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    """The `authorization` metadata for a bearer token (none without one)."""
    if token is None:
        return ()
    if not token or token != token.strip() or "\n" in token:
        raise ValueError("token must be a non-empty string without surrounding spaces or newlines")
    return (("authorization", f"Bearer {token}"),)


def backoff_s(failures: int, backoff_ms: int, backoff_max_ms: int) -> float:
    """The delay before retry number `failures` (from 1): exponential, capped, with jitter."""
    delay_ms = min(backoff_max_ms, backoff_ms << min(max(failures, 1) - 1, 30))
    return delay_ms / 1000 * random.uniform(0.8, 1.2)


class Endpoint(Generic[C]):
    """One address with its channel and stubs; `address` is None for the bootstrap one."""

    def __init__(self, address: str | None, channel: C) -> None:
        self.address = address
        self.channel = channel
        # The generated stubs take a blocking or an asyncio channel alike.
        self.coordinator: Any = coordinator_pb2_grpc.GroupCoordinatorStub(channel)  # type: ignore[call-overload]
        self.admin: Any = admin_pb2_grpc.GroupAdminStub(channel)  # type: ignore[call-overload]

    @property
    def followed(self) -> bool:
        return self.address is not None

    def stub(self, service: Service) -> Any:
        return self.coordinator if service == "coordinator" else self.admin

    def __repr__(self) -> str:
        return f"Endpoint({self.address or 'bootstrap'})"


class CoordinatorRouter(Generic[C]):
    """Maps a group id to the endpoint its calls go to.

    `bootstrap` is the channel the client was built with, `bootstrap_address` its target
    when the client knows it (an answer naming it means the bootstrap channel), and
    `connect` opens a channel to another address (None: the client cannot, and stays on
    the bootstrap channel, which forwards)."""

    def __init__(
        self,
        bootstrap: C,
        *,
        bootstrap_address: str | None = None,
        connect: Callable[[str], C] | None = None,
        token: str | None = None,
    ) -> None:
        self.bootstrap: Endpoint[C] = Endpoint(None, bootstrap)
        #: Sent with every call, to the bootstrap address and to the coordinators followed.
        self._credentials: tuple[tuple[str, str], ...] = bearer(token)
        self.bootstrap_address = bootstrap_address
        self._connect = connect
        self._endpoints: dict[str, Endpoint[C]] = {}
        self._routes: dict[str, str] = {}  # group id -> the address followed
        #: False once the service answered FindCoordinator with UNIMPLEMENTED (an older server).
        self.find_supported = True
        self._warned_no_connect = False
        #: The address of the last call that failed with a gRPC error (None: the bootstrap
        #: one), for the error the client raises to name it.
        self.failed_at: str | None = None

    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        """A call's metadata: the bearer token, if any, and the current trace context."""
        traced = trace_metadata()
        if not self._credentials:
            return traced
        return self._credentials + (traced or ())

    def route(self, group_id: str) -> Endpoint[C]:
        """Where the group's next call goes."""
        address = self._routes.get(group_id)
        return self.bootstrap if address is None else self._endpoints[address]

    def address(self, group_id: str) -> str | None:
        """The address the group follows; None for the bootstrap address."""
        return self._routes.get(group_id)

    def follow(self, group_id: str, address: str) -> bool:
        """Sends the group's next calls to `address` (host:port). False when the client
        cannot open channels of its own: the group stays on the bootstrap channel."""
        if not address or address == self.bootstrap_address:
            self.reset(group_id)
            return True
        if address not in self._endpoints:
            if self._connect is None:
                if not self._warned_no_connect:
                    self._warned_no_connect = True
                    log.warning(
                        "cannot follow group %s to its coordinator at %s: the client was given a "
                        "channel and no channel_factory; it keeps using that channel",
                        group_id,
                        address,
                    )
                self.reset(group_id)
                return False
            self._endpoints[address] = Endpoint(address, self._connect(address))
        if self._routes.get(group_id) != address:
            log.info("group %s: following its coordinator to %s", group_id, address)
            self._routes[group_id] = address
        return True

    def reset(self, group_id: str) -> None:
        """Sends the group's next calls to the bootstrap address again."""
        if self._routes.pop(group_id, None) is not None:
            log.info("group %s: back to the bootstrap address", group_id)

    def not_coordinator(self, group_id: str, address: str) -> NextStep:
        """Applies a NOT_COORDINATOR answer naming `address` (empty when unknown)."""
        if address:
            return "retry" if self.follow(group_id, address) else "stuck"
        self.reset(group_id)
        return "find" if self.find_supported else "retry"

    def unreachable(self, group_ids: Sequence[str], endpoint: Endpoint[C], code: grpc.StatusCode) -> bool:
        """`code` came from a call to `endpoint` about `group_ids`. True when that was a
        followed address that looks gone (its replica killed): the groups that still
        followed it go back to the bootstrap address, where a retry should go."""
        if endpoint.address is None or code not in UNREACHABLE_STATUSES:
            return False
        for group_id in group_ids:
            if self._routes.get(group_id) == endpoint.address:
                log.warning(
                    "group %s: its coordinator at %s is unreachable (%s)",
                    group_id,
                    endpoint.address,
                    code.name,
                )
                self.reset(group_id)
        return True

    def found(self, group_id: str, response: coordinator_pb2.FindCoordinatorResponse) -> None:
        """Applies a FindCoordinator answer (nothing changes when it names nobody)."""
        if response.error_code == common_pb2.NONE and response.address:
            self.follow(group_id, response.address)
        else:
            log.info(
                "FindCoordinator for group %s: %s",
                group_id,
                RegroupError(response.error_code, response.error_message),
            )

    def find_failed(self, group_id: str, code: grpc.StatusCode) -> None:
        """FindCoordinator failed with gRPC status `code`; the group stays where it is."""
        if code == grpc.StatusCode.UNIMPLEMENTED:
            if self.find_supported:
                log.info("the service has no FindCoordinator (an older server): using the bootstrap address")
            self.find_supported = False
        else:
            log.warning("FindCoordinator for group %s failed (%s)", group_id, code.name)

    def take_channels(self) -> list[C]:
        """The channels the router opened (not the bootstrap one), for the client to
        close; the router forgets them, and every group goes back to the bootstrap."""
        channels = [e.channel for e in self._endpoints.values()]
        self._endpoints.clear()
        self._routes.clear()
        return channels


def _find_request(group_id: str) -> coordinator_pb2.FindCoordinatorRequest:
    return coordinator_pb2.FindCoordinatorRequest(group_id=group_id)


async def find_async(router: CoordinatorRouter[Any], group_id: str, seconds: float) -> None:
    """Asks the bootstrap address where the group is coordinated (waiting at most
    `seconds`), and follows the answer."""
    if not router.find_supported:
        return
    stub = router.bootstrap.coordinator
    try:
        response = await stub.FindCoordinator(
            _find_request(group_id), timeout=seconds, metadata=router.metadata()
        )
    except grpc.RpcError as err:
        router.find_failed(group_id, err.code())
        return
    router.found(group_id, response)


def find_blocking(router: CoordinatorRouter[Any], group_id: str, seconds: float) -> None:
    """`find_async` on a blocking channel."""
    if not router.find_supported:
        return
    stub = router.bootstrap.coordinator
    try:
        response = stub.FindCoordinator(_find_request(group_id), timeout=seconds, metadata=router.metadata())
    except grpc.RpcError as err:
        router.find_failed(group_id, err.code())
        return
    router.found(group_id, response)


# -- one group call, routed -------------------------------------------------------


@dataclass(frozen=True)
class GroupCall:
    """A call about one or more groups (DescribeGroups takes many), and how to send it
    for a subset of them and put the per-group results back together. Each result has
    `error_code` and `coordinator_address`."""

    service: Service
    rpc: str
    group_ids: tuple[str, ...]
    request_for: Callable[[Sequence[str]], Any]
    results: Callable[[Any], Sequence[Any]]
    response_from: Callable[[list[Any]], Any]


def single(service: Service, rpc: str, group_id: str, request: Any) -> GroupCall:
    """A call about one group whose response is its result."""
    return GroupCall(service, rpc, (group_id,), lambda _: request, lambda r: [r], lambda results: results[0])


@dataclass(frozen=True)
class Send:
    endpoint: Endpoint[Any]
    service: Service
    rpc: str
    request: Any
    timeout: float


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Find:
    group_id: str
    timeout: float


Step = Send | Sleep | Find

#: How many times one call follows NOT_COORDINATOR or leaves an unreachable address.
MAX_ROUNDS = 5


def routed(
    router: CoordinatorRouter[Any],
    call: GroupCall,
    *,
    timeout: float,
    backoff_ms: int,
    backoff_max_ms: int,
    max_rounds: int = MAX_ROUNDS,
) -> Generator[Step, Any, Any]:
    """Sends `call` to the endpoint of each of its groups; for the groups answered
    NOT_COORDINATOR, follows the address named (or asks FindCoordinator), and for those
    whose followed address is unreachable, goes back to the bootstrap address; then, after
    a backoff, sends again what is left, for at most `max_rounds` rounds and `timeout`
    seconds in all. Returns the response with every group's last result; raises the gRPC
    error of a group that got no answer at all, and RegroupError when an answer does not
    hold one result per group."""
    deadline = time.monotonic() + timeout
    results: list[Any] = [None] * len(call.group_ids)
    pending = list(range(len(call.group_ids)))
    rounds = 0
    while True:
        again: list[int] = []
        lookups: dict[str, None] = {}
        failure: grpc.RpcError | None = None
        by_endpoint: dict[int, tuple[Endpoint[Any], list[int]]] = {}
        for i in pending:
            endpoint = router.route(call.group_ids[i])
            by_endpoint.setdefault(id(endpoint), (endpoint, []))[1].append(i)
        for endpoint, positions in by_endpoint.values():
            ids = [call.group_ids[i] for i in positions]
            remaining = max(0.001, deadline - time.monotonic())
            try:
                response = yield Send(endpoint, call.service, call.rpc, call.request_for(ids), remaining)
            except grpc.RpcError as err:
                if not router.unreachable(ids, endpoint, err.code()):
                    raise
                failure = err
                again += positions
                continue
            items = call.results(response)
            if len(items) != len(positions):
                raise RegroupError(
                    common_pb2.UNKNOWN_SERVER_ERROR,
                    f"{call.rpc} answered {len(items)} results for {len(positions)} groups",
                )
            for i, item in zip(positions, items, strict=True):
                results[i] = item
                if item.error_code != common_pb2.NOT_COORDINATOR:
                    continue
                step = router.not_coordinator(call.group_ids[i], item.coordinator_address)
                if step != "stuck":
                    again.append(i)
                if step == "find":
                    lookups[call.group_ids[i]] = None
        if not again:
            return call.response_from(results)
        rounds += 1
        delay = backoff_s(rounds, backoff_ms, backoff_max_ms)
        if rounds > max_rounds or time.monotonic() + delay >= deadline:
            if failure is not None and any(results[i] is None for i in again):
                raise failure
            return call.response_from(results)
        yield Sleep(delay)
        for group_id in lookups:
            yield Find(group_id, max(0.001, deadline - time.monotonic()))
        pending = sorted(again)


async def drive_async(router: CoordinatorRouter[Any], steps: Generator[Step, Any, T]) -> T:
    """Runs `routed` steps on asyncio channels."""
    value: Any = None
    error: grpc.RpcError | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            result: T = stop.value
            return result
        value, error = None, None
        if isinstance(step, Send):
            try:
                rpc = getattr(step.endpoint.stub(step.service), step.rpc)
                value = await rpc(step.request, timeout=step.timeout, metadata=router.metadata())
            except grpc.RpcError as err:
                router.failed_at = step.endpoint.address
                error = err
        elif isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
        else:
            await find_async(router, step.group_id, step.timeout)


def drive_blocking(router: CoordinatorRouter[Any], steps: Generator[Step, Any, T]) -> T:
    """Runs `routed` steps on blocking channels."""
    value: Any = None
    error: grpc.RpcError | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            result: T = stop.value
            return result
        value, error = None, None
        if isinstance(step, Send):
            try:
                rpc = getattr(step.endpoint.stub(step.service), step.rpc)
                value = rpc(step.request, timeout=step.timeout, metadata=router.metadata())
            except grpc.RpcError as err:
                router.failed_at = step.endpoint.address
                error = err
        elif isinstance(step, Sleep):
            time.sleep(step.seconds)
        else:
            find_blocking(router, step.group_id, step.timeout)
