"""No silent forever (issue 38): a member's join() and wait_for_assignment() take a
timeout, say why nothing arrives in their logs (once, then rarely) and in their
TimedOut, and commit() retries a coordinator that is moving or cannot answer now.
Against a real server, the embedded Postgres, and a dead address."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from regroup.client import (
    CommitFailed,
    GroupMember,
    MemberOptions,
    RegroupError,
    SyncGroupMember,
    TimedOut,
    TopicPartition,
    Unavailable,
)
from regroup.v1 import common_pb2
from tests.support.service import Service, ServiceFactory

FAST = {"heartbeat_interval_ms": 100, "session_timeout_ms": 1500}


def options(**overrides: Any) -> MemberOptions:
    """Small backoffs and a report of why a wait lasts at once, then every 100 ms."""
    settings: dict[str, Any] = {
        "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 50,
        "wait_log_after_ms": 0,
        "wait_log_interval_ms": 100,
    }
    return MemberOptions(**(settings | overrides))


@pytest.fixture
def dead_address() -> Iterator[str]:
    """A port bound (no one else takes it) but not listening: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
async def fast(start_service: ServiceFactory) -> Service:
    return await start_service(**FAST)


def messages(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "regroup.client" and r.levelno == level and text in r.getMessage()
    ]


async def test_join_against_a_dead_address_times_out_saying_why(
    dead_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="regroup.client")
    # Reports at most every 30 s: one warning, whatever the number of retries.
    async with GroupMember(dead_address, options=options(wait_log_interval_ms=30_000)) as member:
        started = time.monotonic()
        with pytest.raises(TimedOut) as timed_out:
            await member.join("g", topics=["orders"], timeout=0.5)
        elapsed = time.monotonic() - started
    error = timed_out.value
    assert isinstance(error, TimeoutError) and isinstance(error, RegroupError)
    assert f"member {member.member_id} of group g: not joined within 0.5 s" in str(error)
    assert f"cannot reach {dead_address}" in str(error) and "Connection refused" in str(error)
    assert error.code == common_pb2.COORDINATOR_NOT_AVAILABLE
    assert isinstance(error.__cause__, Unavailable) and error.__cause__.address == dead_address
    assert isinstance(error.__cause__.__cause__, grpc.aio.AioRpcError)
    assert 0.5 - 0.1 <= elapsed < 0.5 + 5
    warnings = messages(caplog, logging.WARNING, "cannot join yet")
    assert len(warnings) == 1 and f"cannot reach {dead_address}" in warnings[0]
    assert len(messages(caplog, logging.DEBUG, "failed")) >= 2  # the retries, quietly


async def test_a_lasting_trouble_is_logged_again_rarely(
    dead_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="regroup.client")
    async with GroupMember(dead_address, options=options(wait_log_interval_ms=200)) as member:
        with pytest.raises(TimedOut):
            await member.join("g", topics=["orders"], timeout=0.7)
    warnings = messages(caplog, logging.WARNING, "cannot join yet")
    # At once, then at most every 0.2 s: at most 4 in 0.7 s, however many retries.
    assert 2 <= len(warnings) <= 4, warnings
    assert "more failures since the last report" in warnings[1]


async def test_wait_for_assignment_says_the_topic_does_not_exist(
    fast: Service, caplog: pytest.LogCaptureFixture
) -> None:
    """The README example without create_topics: it used to wait for ever, silently."""
    caplog.set_level(logging.INFO, logger="regroup.client")
    target = f"127.0.0.1:{fast.server.port}"
    async with GroupMember(target, options=options()) as member:
        await member.join("orders-processors", topics=["orders"], timeout=10)
        started = time.monotonic()
        with pytest.raises(TimedOut) as timed_out:
            await member.wait_for_assignment(timeout=0.5)
        elapsed = time.monotonic() - started
        error = timed_out.value
        assert "not assigned within 0.5 s: no such topic: orders" in str(error)
        assert "GroupAdmin.create_topics" in str(error)
        assert error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION and isinstance(error, TimeoutError)
        assert elapsed >= 0.5
        reports = messages(caplog, logging.WARNING, "waits for its assignment: no such topic: orders")
        # At once, then every 0.1 s at most (a slower machine reports less often).
        assert 1 <= len(reports) <= 7, reports

        # Created, the topic is assigned: the same wait returns.
        await fast.stubs.create_topic("orders", 2)
        owned = await member.wait_for_assignment(timeout=10)
        assert {tp.partition for tp in owned.partitions} == {0, 1}


async def test_wait_for_assignment_says_when_others_hold_every_partition(fast: Service) -> None:
    target = f"127.0.0.1:{fast.server.port}"
    await fast.stubs.create_topic("orders", 1)
    async with (
        GroupMember(target, options=options()) as first,
        GroupMember(target, options=options()) as second,
    ):
        await first.join("g", topics=["orders"], timeout=10)
        await first.wait_for_assignment(timeout=10)
        await second.join("g", topics=["orders"], timeout=10)
        await second.wait_for_assignment(lambda a: second.member_epoch > 0, timeout=10)
        with pytest.raises(TimedOut) as timed_out:
            await second.wait_for_assignment(timeout=0.3)
    assert "nothing assigned yet: other members hold the partitions of orders" in str(timed_out.value)
    assert timed_out.value.code == common_pb2.NONE


def test_the_blocking_twin_times_out_alike(dead_address: str) -> None:
    with SyncGroupMember(dead_address, options=options()) as member:
        with pytest.raises(TimedOut) as joining:
            member.join("g", topics=["orders"], timeout=0.3)
        assert f"cannot reach {dead_address}" in str(joining.value)
        with pytest.raises(TimeoutError) as waiting:  # the builtin, as before, and a TimedOut
            member.wait_for_assignment(timeout=0.2)
        assert isinstance(waiting.value, TimedOut)
        assert f"it has not joined (COORDINATOR_NOT_AVAILABLE: cannot reach {dead_address}" in str(
            waiting.value
        )


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class CommitRefusals(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Answers the member's next OffsetCommits as planned ("unavailable": the call fails
    before leaving; an error code: written in the real server's answer), then lets
    them through."""

    def __init__(self) -> None:
        self.plan: list[str | int] = []
        self.commits = 0

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if not method.endswith("/OffsetCommit"):
            return await continuation(details, request)
        self.commits += 1
        step = self.plan.pop(0) if self.plan else None
        if step == "unavailable":
            raise _rpc_error(grpc.StatusCode.UNAVAILABLE, "refusals: unavailable")
        response = await (await continuation(details, request))
        if isinstance(step, int):
            response = type(response).FromString(response.SerializeToString())
            response.error_code = step
            response.error_message = "refusals: moving"
        return response


async def test_commit_retries_a_coordinator_that_is_moving_or_not_available(fast: Service) -> None:
    target = f"127.0.0.1:{fast.server.port}"
    await fast.stubs.create_topic("orders", 2)
    tap = CommitRefusals()
    async with GroupMember(target, options=options(), interceptors=[tap]) as member:
        await member.join("g", topics=["orders"], timeout=10)
        owned = await member.wait_for_assignment(timeout=10)
        tp = min(owned.partitions)
        tap.plan = [
            common_pb2.COORDINATOR_NOT_AVAILABLE,
            "unavailable",
            common_pb2.COORDINATOR_LOAD_IN_PROGRESS,
            common_pb2.NOT_COORDINATOR,
        ]
        await member.commit({tp: 7})  # used to raise COORDINATOR_NOT_AVAILABLE
        assert tap.commits >= 5 and not tap.plan
        assert await member.committed([tp]) == {tp: 7}

        # A refusal that lasts is raised once the deadline is near.
        tap.plan, tap.commits = [common_pb2.COORDINATOR_NOT_AVAILABLE] * 1000, 0
        with pytest.raises(Unavailable) as busy:
            await member.commit({tp: 8}, timeout=0.3)
        assert busy.value.code == common_pb2.COORDINATOR_NOT_AVAILABLE and busy.value.address == target
        assert 2 <= tap.commits < 1000
        # What is not retriable is raised at once: there is no such partition.
        tap.plan, tap.commits = [], 0
        with pytest.raises(CommitFailed) as refused:
            await member.commit({TopicPartition("orders", 5, tp.topic_id): 1})
        assert tap.commits == 1 and refused.value.name == "UNKNOWN_TOPIC_OR_PARTITION"


async def test_no_report_while_the_assignment_comes(fast: Service, caplog: pytest.LogCaptureFixture) -> None:
    """The first report comes after wait_log_after_ms: a wait that ends sooner logs nothing."""
    caplog.set_level(logging.INFO, logger="regroup.client")
    await fast.stubs.create_topic("orders", 2)
    target = f"127.0.0.1:{fast.server.port}"
    async with GroupMember(target, options=options(wait_log_after_ms=60_000)) as member:
        await member.join("g", topics=["orders"], timeout=10)
        await member.wait_for_assignment(timeout=10)
    assert messages(caplog, logging.INFO, "waits for its assignment") == []
    assert messages(caplog, logging.WARNING, "waits for its assignment") == []


async def test_a_member_that_never_joined_says_so(fast: Service) -> None:
    async with GroupMember(f"127.0.0.1:{fast.server.port}", options=options()) as member:
        with pytest.raises(TimedOut, match="it has not joined: call join"):
            await asyncio.wait_for(member.wait_for_assignment(timeout=0.1), 10)
