"""The Python client on member streams: one stream per process and coordinator shared by
its members, nudges that make a rebalance take milliseconds instead of heartbeat
intervals, and the fall back to unary heartbeats when there is no stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from regroup.client import GroupMember, MemberOptions, SyncGroupMember, streaming
from regroup.server.streams import StreamClosed
from regroup.v1 import coordinator_pb2
from tests.support.ownership import OwnershipRegistry
from tests.support.service import Service, ServiceFactory

#: A heartbeat interval no rebalance here may wait for: only nudges make it fast.
SLOW = {"heartbeat_interval_ms": 20_000, "session_timeout_ms": 45_000}


class Members:
    def __init__(self, service: Service, registry: OwnershipRegistry, **options: Any) -> None:
        self.target = f"127.0.0.1:{service.server.port}"
        self.service = service
        self.registry = registry
        self.options = MemberOptions(**options)
        self.members: dict[str, GroupMember] = {}

    async def add(self, name: str, group: str = "g", topic: str = "orders") -> GroupMember:
        member = GroupMember(self.target, listener=self.registry.listener(name), options=self.options)
        await member.join(group, topics=[topic])
        self.members[name] = member
        return member

    async def settled(self, partitions: int, group: str = "g", timeout: float = 10) -> dict[str, Any]:
        """Waits until the group is Stable and every partition is held once, balanced."""
        async with asyncio.timeout(timeout):
            while True:
                self.registry.assert_safe()
                held = {n: m.assignment().partitions for n, m in self.members.items() if m.group_id == group}
                sizes = sorted(len(p) for p in held.values())
                union = frozenset().union(*held.values()) if held else frozenset()
                described = await self.service.stubs.describe(group)
                if (
                    described.group_state == "Stable"
                    and len(union) == partitions == sum(sizes)
                    and sizes[-1] - sizes[0] <= 1
                ):
                    return held
                await asyncio.sleep(0.01)


@pytest.fixture
async def slow(start_service: ServiceFactory) -> Service:
    service = await start_service(**SLOW)
    await service.stubs.create_topic("orders", 12)
    return service


@pytest.fixture
async def members(slow: Service) -> AsyncIterator[Members]:
    fleet = Members(slow, OwnershipRegistry())
    yield fleet
    for member in fleet.members.values():
        await member.close()
    assert not streaming.open_muxes(), "the last member closed the shared stream"


async def test_members_of_a_process_share_one_stream_and_rebalance_in_milliseconds(
    members: Members,
) -> None:
    await members.add("m0")
    await members.settled(12)
    (mux,) = streaming.open_muxes()
    assert mux.is_open and mux.answered > 0

    # The heartbeat interval is 20 s: without nudges, m0 would learn of m1 only then.
    started = time.monotonic()
    await members.add("m1")
    held = await members.settled(12)
    elapsed = time.monotonic() - started
    assert sorted(len(p) for p in held.values()) == [6, 6]
    assert elapsed < 2.0, f"a join took {elapsed:.2f}s to settle"
    assert streaming.open_muxes() == [mux], "the second member uses the same stream"
    assert mux.nudges >= 1 and mux.fallbacks == 0

    # A leave: m0 takes m1's partitions back at once, nudged.
    started = time.monotonic()
    await members.members.pop("m1").close()
    held = await members.settled(12)
    assert len(held["m0"]) == 12
    assert time.monotonic() - started < 2.0
    members.registry.assert_safe()


async def test_callbacks_come_in_the_same_order_as_with_unary_heartbeats(
    start_service: ServiceFactory,
) -> None:
    """The same scenario with and without streams: each member's listener sees the same
    partitions in the same order of revocations and assignments."""

    async def scenario(group: str, stream: bool) -> dict[str, list[tuple[str, frozenset[int]]]]:
        registry = OwnershipRegistry()
        options = MemberOptions(member_stream=stream)
        target = f"127.0.0.1:{slow.server.port}"
        made = []
        for name in ("a", "b", "c"):
            # Fixed ids: the assignor then decides alike in both runs.
            member = GroupMember(target, listener=registry.listener(name), options=options, member_id=name)
            await member.join(group, topics=["orders"])
            made.append(member)
            await _stable(slow, group, len(made), timeout=20)
        await made[0].close()
        await _stable(slow, group, 2, timeout=20)
        for member in made[1:]:
            await member.close()
        registry.assert_safe()
        # Each member's own sequence (how members interleave is timing, not protocol), with
        # consecutive callbacks of one kind merged: a member waiting for partitions from
        # several others gets each as soon as it is released when nudged, and several at
        # once at its next interval otherwise; which partitions, and in which order of
        # revocations and assignments, is the protocol's.
        sequences: dict[str, list[tuple[str, frozenset[int]]]] = {}
        for e in registry.events:
            mine = sequences.setdefault(e.member, [])
            partitions = frozenset(tp.partition for tp in e.partitions)
            if mine and mine[-1][0] == e.kind:
                mine[-1] = (e.kind, mine[-1][1] | partitions)
            else:
                mine.append((e.kind, partitions))
        return sequences

    # Short intervals: the unary run waits for them.
    slow = await start_service(heartbeat_interval_ms=200, session_timeout_ms=5_000)
    await slow.stubs.create_topic("orders", 12)
    unary = await scenario("unary", stream=False)
    streamed = await scenario("streamed", stream=True)
    assert streamed == unary


async def _stable(service: Service, group: str, size: int, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while True:
            described = await service.stubs.describe(group)
            if described.group_state == "Stable" and len(described.members) == size:
                held = [
                    sum(len(tp.partitions) for tp in m.assignment.topic_partitions) for m in described.members
                ]
                if sum(held) == 12:
                    return
            await asyncio.sleep(0.01)


class WithoutStreams(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Makes the server look like one from before MemberStream: no handler, UNIMPLEMENTED."""

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.endswith("/MemberStream"):
            return None
        return await continuation(details)


async def test_a_server_without_streams_gets_unary_heartbeats(start_service: ServiceFactory) -> None:
    service = await start_service(
        interceptors=[WithoutStreams()], heartbeat_interval_ms=300, session_timeout_ms=5_000
    )
    await service.stubs.create_topic("orders", 12)
    fleet = Members(service, OwnershipRegistry(), retry_backoff_ms=10)
    try:
        await fleet.add("m0")
        await fleet.add("m1")
        (mux,) = streaming.open_muxes()
        assert not mux.supported and mux.answered == 0
        await fleet.settled(12)  # at heartbeat intervals: no nudges
        assert all(m.failure is None for m in fleet.members.values())
    finally:
        for member in fleet.members.values():
            await member.close()


async def test_a_broken_stream_falls_back_to_unary_and_reopens(members: Members) -> None:
    await members.add("m0")
    await members.add("m1")
    await members.settled(12)
    (mux,) = streaming.open_muxes()
    hub = members.service.server.streams
    assert hub is not None and len(hub.sessions) == 1

    # The server ends the stream (as it does when a client does not read its answers).
    hub.close_all(StreamClosed(grpc.StatusCode.RESOURCE_EXHAUSTED, "test: closed"))
    async with asyncio.timeout(10):
        while mux.broken == 0:
            await asyncio.sleep(0.01)
    # The members go on (unary meanwhile), and a new stream opens after the backoff.
    await members.add("m2")
    held = await members.settled(12)
    assert sorted(len(p) for p in held.values()) == [4, 4, 4]
    async with asyncio.timeout(10):
        while not (mux.is_open and mux.opened >= 2):
            await asyncio.sleep(0.01)
    assert len(hub.sessions) == 1
    assert all(m.failure is None for m in members.members.values())
    members.registry.assert_safe()


async def test_sync_members_share_the_stream_of_one_process(slow: Service) -> None:
    registry = OwnershipRegistry()
    target = f"127.0.0.1:{slow.server.port}"

    def run() -> float:
        """In a plain thread, as a Spark task would (the server runs on this test's loop)."""
        with SyncGroupMember(target, listener=registry.listener("a")) as a:
            a.join("sync", topics=["orders"])
            a.wait_for_assignment(timeout=10)
            with SyncGroupMember(target, listener=registry.listener("b")) as b:
                started = time.monotonic()
                b.join("sync", topics=["orders"])
                b.wait_for_assignment(lambda x: len(x.partitions) == 6, timeout=10)
                a.wait_for_assignment(lambda x: len(x.partitions) == 6, timeout=10)
                elapsed = time.monotonic() - started
                hub = slow.server.streams
                assert hub is not None and len(hub.sessions) == 1, "one stream for both sync members"
        return elapsed

    elapsed = await asyncio.to_thread(run)
    assert elapsed < 2.0, f"the join took {elapsed:.2f}s to settle with a 20 s heartbeat interval"
    registry.assert_safe()
    assert registry.held_by("a") == registry.held_by("b") == frozenset()


class SeesUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.heartbeats = 0

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if isinstance(request, coordinator_pb2.ConsumerGroupHeartbeatRequest):
            self.heartbeats += 1
        return await continuation(details, request)


class SeesStreams(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    """Counts the heartbeat answers it sees on member streams."""

    def __init__(self) -> None:
        self.heartbeats = 0

    async def intercept_stream_stream(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        call = await continuation(details, request_iterator)

        async def responses() -> AsyncIterator[Any]:
            async for message in call:
                self.heartbeats += len(message.responses)
                yield message

        return responses()


async def test_interceptors_see_every_heartbeat_whichever_way_it_goes(slow: Service) -> None:
    target = f"127.0.0.1:{slow.server.port}"
    unary, streams = SeesUnary(), SeesStreams()
    watched = GroupMember(target, interceptors=[unary, streams])
    await watched.join("watched", topics=["orders"])
    await watched.wait_for_assignment()
    assert streams.heartbeats >= 1 and unary.heartbeats == 0, "on the stream, and seen there"

    only_unary = SeesUnary()
    plain = GroupMember(target, interceptors=[only_unary])
    await plain.join("plain", topics=["orders"])
    await plain.wait_for_assignment(lambda a: len(a.partitions) == 12)
    assert only_unary.heartbeats >= 1, "a unary-only interceptor keeps the member unary, so it sees it"
    await watched.close()
    await plain.close()
