"""The client's errors against a real server and a dead address: the admin retries what
is retriable within its timeout and raises RegroupErrors of their class, with the
address and the gRPC error as the cause."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from regroup.client import (
    GroupAdmin,
    GroupError,
    RegroupError,
    SyncGroupAdmin,
    Unavailable,
)
from regroup.v1 import common_pb2
from tests.support.service import Service

#: Small backoffs: the tests wait for them, and nothing else.
QUICK = {"retry_backoff_ms": 20, "retry_backoff_max_ms": 100}


@pytest.fixture
def dead_address() -> Iterator[str]:
    """An address where nothing listens: a port bound (so no one else takes it) but not
    listening, which refuses connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum("retrying in" in r.getMessage() for r in caplog.records if r.name == "regroup.client")


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class Refusals(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Fails the next calls as planned, then lets them through: "unavailable" fails the
    call before it leaves (a transport failure); an error code is written into the
    real server's answer (by `rewrite`), as a coordinator that cannot answer now would."""

    def __init__(self, rewrite: Callable[[Any, int], None]) -> None:
        self.plan: list[str | int] = []
        self.calls: list[str] = []
        self._rewrite = rewrite

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        self.calls.append(method.rsplit("/", 1)[-1])
        step = self.plan.pop(0) if self.plan else None
        if step == "unavailable":
            raise _rpc_error(grpc.StatusCode.UNAVAILABLE, "refusals: unavailable")
        response = await (await continuation(details, request))
        if isinstance(step, int):
            response = type(response).FromString(response.SerializeToString())
            self._rewrite(response, step)
        return response


def _group_refused(response: Any, code: int) -> None:
    for group in getattr(response, "groups", ()):
        group.error_code = code


async def test_an_admin_call_to_a_dead_address_is_retried_then_raised_as_unavailable(
    dead_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="regroup.client")
    async with GroupAdmin(dead_address, timeout=0.5, **QUICK) as admin:
        calls = {
            "list_groups": admin.list_groups,
            "describe_group": lambda: admin.describe_group("g"),
            "create_topic": lambda: admin.create_topic("t", 1),
        }
        for name, call in calls.items():
            caplog.clear()
            started = time.monotonic()
            with pytest.raises(Unavailable) as error:
                await call()
            elapsed = time.monotonic() - started
            assert error.value.address == dead_address, name
            assert f"cannot reach {dead_address}" in str(error.value)
            assert error.value.status == grpc.StatusCode.UNAVAILABLE and error.value.retriable
            assert isinstance(error.value.__cause__, grpc.aio.AioRpcError)
            assert error.value.__cause__.code() == grpc.StatusCode.UNAVAILABLE
            # Retried until the next backoff (at most 0.1 s, +20% jitter) would pass the deadline.
            assert retries(caplog) >= 2, name
            assert 0.5 - 0.12 <= elapsed < 0.5 + 5, name


def test_the_blocking_admin_retries_and_raises_alike(
    dead_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="regroup.client")
    with SyncGroupAdmin(dead_address, timeout=0.3, **QUICK) as admin:
        for call in (admin.list_groups, lambda: admin.describe_group("g")):
            caplog.clear()
            with pytest.raises(Unavailable) as error:
                call()
            assert error.value.address == dead_address
            assert isinstance(error.value.__cause__, grpc.RpcError)
            assert retries(caplog) >= 1


async def test_admin_calls_retry_transport_failures_and_coordinators_not_ready(service: Service) -> None:
    target = f"127.0.0.1:{service.server.port}"
    tap = Refusals(_group_refused)
    factory = lambda address: grpc.aio.insecure_channel(address, interceptors=[tap])  # noqa: E731
    async with GroupAdmin(target, timeout=10, channel_factory=factory, **QUICK) as admin:
        tap.plan = [
            "unavailable",
            common_pb2.COORDINATOR_NOT_AVAILABLE,
            common_pb2.COORDINATOR_LOAD_IN_PROGRESS,
        ]
        with pytest.raises(GroupError) as missing:  # the real answer, once the refusals are over
            await admin.describe_group("nobody")
        assert missing.value.code == common_pb2.GROUP_ID_NOT_FOUND
        assert tap.calls == ["DescribeGroups"] * 4 and not tap.plan

        tap.calls, tap.plan = [], ["unavailable", "unavailable"]
        assert await admin.create_topic("orders", 2)
        assert tap.calls == ["CreateTopics"] * 3

        # What is not retriable is raised at once.
        tap.calls = []
        with pytest.raises(RegroupError) as exists:
            await admin.create_topic("orders", 2)
        assert exists.value.name == "TOPIC_ALREADY_EXISTS" and tap.calls == ["CreateTopics"]


async def test_a_retriable_refusal_that_lasts_is_raised_at_the_deadline(service: Service) -> None:
    target = f"127.0.0.1:{service.server.port}"
    tap = Refusals(_group_refused)
    factory = lambda address: grpc.aio.insecure_channel(address, interceptors=[tap])  # noqa: E731
    async with GroupAdmin(target, timeout=0.3, channel_factory=factory, **QUICK) as admin:
        tap.plan = [common_pb2.COORDINATOR_NOT_AVAILABLE] * 1000
        with pytest.raises(Unavailable) as busy:
            await admin.describe_group("g")
    assert busy.value.code == common_pb2.COORDINATOR_NOT_AVAILABLE and busy.value.address == target
    assert 2 <= len(tap.calls) < 1000
