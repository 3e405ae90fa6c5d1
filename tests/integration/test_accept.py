"""The widened accept pipeline serves calls exactly as grpc.aio's own loop does, and stops cleanly."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from regroup.server.accept import SUPPORTED
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.service import ServiceFactory
from tests.support.wire import WireMember, assert_disjoint, converge

pytestmark = [
    pytest.mark.skipif(not SUPPORTED, reason="this grpcio build lacks the internals the widener uses"),
]


def _accept_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("accept ")]


async def test_concurrent_heartbeats_are_served_through_the_extra_requests(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(accept_depth=4)
    widener = service.server.widener
    assert widener is not None
    # Three more outstanding requests for every registered method of every service.
    assert len(_accept_tasks()) == 3 * len(widener.methods)
    assert "/regroup.v1.GroupCoordinator/ConsumerGroupHeartbeat" in widener.methods
    await service.stubs.create_topic("orders", 60)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(30)]

    # Everyone at once, several rounds: calls land on the stock loop and on the extra ones alike.
    for _ in range(3):
        responses = await asyncio.gather(*(m.heartbeat() for m in members))
        assert [r.error_code for r in responses] == [common_pb2.NONE] * 30
    await converge(service.stubs, "g1", members)

    assert widener.accepted > 0
    assert_disjoint(members)
    assert sorted(len(m.partitions()) for m in members) == [2] * 30


async def test_errors_come_back_unchanged_through_the_extra_requests(start_service: ServiceFactory) -> None:
    service = await start_service(accept_depth=8)
    bad = coordinator_pb2.ConsumerGroupHeartbeatRequest(group_id="", member_id="m", member_epoch=0)

    heartbeat = service.stubs.coordinator.ConsumerGroupHeartbeat
    responses = await asyncio.gather(*(heartbeat(bad) for _ in range(40)))

    assert {(r.error_code, r.error_message) for r in responses} == {
        (common_pb2.INVALID_REQUEST, "GroupId can't be empty.")
    }
    widener = service.server.widener
    assert widener is not None and widener.accepted > 0


async def test_stop_ends_every_accept_loop(start_service: ServiceFactory) -> None:
    service = await start_service(accept_depth=4)
    await service.stubs.create_topic("orders", 4)
    member = WireMember(service.stubs.coordinator, "g1", "m1", ["orders"])
    await member.heartbeat()
    assert _accept_tasks()

    await service.server.stop()

    assert service.server.widener is None
    assert _accept_tasks() == []


async def test_depth_one_keeps_the_stock_single_pipeline(start_service: ServiceFactory) -> None:
    service = await start_service(accept_depth=1)
    await service.stubs.create_topic("orders", 4)
    member = WireMember(service.stubs.coordinator, "g1", "m1", ["orders"])

    assert (await member.heartbeat()).error_code == common_pb2.NONE

    assert _accept_tasks() == []
    widener = service.server.widener
    assert widener is not None and widener.accepted == 0


async def test_without_grpc_internals_the_server_keeps_the_stock_pipeline(
    start_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from regroup.server import accept

    # A grpcio release without the internals the widener uses must still serve.
    monkeypatch.setattr(accept, "SUPPORTED", False)
    service = await start_service(accept_depth=8)
    await service.stubs.create_topic("orders", 4)
    member = WireMember(service.stubs.coordinator, "g1", "m1", ["orders"])

    assert (await member.heartbeat()).error_code == common_pb2.NONE
    assert _accept_tasks() == []


async def test_an_accept_loop_that_core_refuses_ends_instead_of_spinning() -> None:
    import grpc

    from regroup.server.accept import AcceptWidener

    class RefusingServer:
        """Stands in for grpc's AioServer: running, but every request for a call fails at once."""

        def __init__(self) -> None:
            self.requests = 0

        def is_running(self) -> bool:
            return True

        async def _make_request_call_future(self, method: bytes) -> None:
            self.requests += 1
            raise RuntimeError("Error in grpc_server_request_registered_call: 7")

    widener = AcceptWidener(grpc.aio.server(), depth=2)
    refusing = RefusingServer()

    # Returns instead of spinning on a failure that would repeat forever.
    await asyncio.wait_for(widener._accept(refusing, "/svc/M", None, asyncio.get_running_loop()), timeout=5)

    assert refusing.requests == 1


class Recording(grpc.aio.ServerInterceptor):
    """A tracing-like interceptor: counts the calls it sees, by method."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        self.seen[details.method] += 1
        return await continuation(details)


async def _deny(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a token is required")


class Authenticating(grpc.aio.ServerInterceptor):
    """An authentication-like interceptor: refuses calls without the token."""

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        if ("authorization", "Bearer ok") in tuple(details.invocation_metadata or ()):
            return await continuation(details)
        return grpc.unary_unary_rpc_method_handler(_deny)


HEARTBEAT = "/regroup.v1.GroupCoordinator/ConsumerGroupHeartbeat"
DESCRIBE = "/regroup.v1.GroupAdmin/DescribeGroups"
HEALTH = "/grpc.health.v1.Health/Check"


@pytest.mark.parametrize("depth", [1, 2, 8])
async def test_an_interceptor_sees_every_call_at_every_depth(
    start_service: ServiceFactory, depth: int
) -> None:
    recording = Recording()
    service = await start_service(accept_depth=depth, interceptors=[recording])
    await service.stubs.create_topic("orders", 40)
    members = [WireMember(service.stubs.coordinator, "g", f"m{i}", ["orders"]) for i in range(40)]
    health = health_pb2_grpc.HealthStub(service.stubs.channel)
    rounds = 3
    for _ in range(rounds):
        await asyncio.gather(
            *(m.heartbeat() for m in members),
            *(service.stubs.describe("g") for _ in range(20)),
            *(health.Check(health_pb2.HealthCheckRequest()) for _ in range(10)),
        )

    assert recording.seen[HEARTBEAT] == rounds * 40
    assert recording.seen[DESCRIBE] == rounds * 20
    assert recording.seen[HEALTH] == rounds * 10
    widener = service.server.widener
    assert widener is not None
    # At depth 1 the stock loop takes every call; deeper, the extra loops take some.
    assert (widener.accepted > 0) is (depth > 1)


async def test_an_authenticating_interceptor_refuses_calls_taken_by_any_loop(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(accept_depth=8, interceptors=[Authenticating()])
    heartbeat = service.stubs.coordinator.ConsumerGroupHeartbeat
    request = coordinator_pb2.ConsumerGroupHeartbeatRequest(group_id="", member_id="m", member_epoch=0)

    refused = await asyncio.gather(*(heartbeat(request) for _ in range(40)), return_exceptions=True)
    assert {e.code() for e in refused if isinstance(e, grpc.aio.AioRpcError)} == {
        grpc.StatusCode.UNAUTHENTICATED
    }
    assert all(isinstance(e, grpc.aio.AioRpcError) for e in refused)

    token = (("authorization", "Bearer ok"),)
    answered = await asyncio.gather(*(heartbeat(request, metadata=token) for _ in range(40)))
    assert {r.error_code for r in answered} == {common_pb2.INVALID_REQUEST}
    widener = service.server.widener
    assert widener is not None and widener.accepted > 0
