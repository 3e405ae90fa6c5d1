"""Which clock is which (server/clock.py): wall-clock epoch milliseconds for what is
stored or sent, the monotonic clock for in-memory timers only.

A restart elsewhere is a new ManualClock whose monotonic reading is unrelated to the
first one's (another host's uptime) while its wall clock continues.
"""

from __future__ import annotations

import time

from regroup.client import GroupAdmin
from regroup.server.clock import MANUAL_WALL_START_MS, ManualClock
from regroup.v1 import coordinator_pb2
from tests.support.client_side import _setup
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, converge


async def fetched(
    service: Service, group_id: str
) -> dict[int, coordinator_pb2.OffsetFetchResponse.Partition]:
    resp = await service.stubs.coordinator.OffsetFetch(
        coordinator_pb2.OffsetFetchRequest(group_id=group_id, member_epoch=-1)
    )
    return {p.partition: p for t in resp.topics for p in t.partitions}


async def test_commit_timestamps_are_epoch_milliseconds(service: Service) -> None:
    await service.stubs.create_topic("orders", 1)
    async with GroupAdmin(f"127.0.0.1:{service.server.port}") as admin:
        before = time.time_ns() // 1_000_000
        await admin.commit_offsets("g", {("orders", 0): 5})
        after = time.time_ns() // 1_000_000
    (partition,) = (await fetched(service, "g")).values()
    assert before <= partition.commit_timestamp_ms <= after


async def test_offsets_keep_their_age_after_a_restart_on_another_host(start_service: ServiceFactory) -> None:
    # The first host has been up for a second, the next one for eleven days: their
    # monotonic clocks say nothing about each other, their wall clocks agree.
    first = await start_service(clock=ManualClock(start_ms=1_000), offsets_retention_ms=10_000)
    await first.stubs.create_topic("orders", 1)
    async with GroupAdmin(f"127.0.0.1:{first.server.port}") as admin:
        await admin.commit_offsets("g", {("orders", 0): 5})
    await first.server.stop()

    clock = ManualClock(start_ms=1_000_000_000, wall_start_ms=MANUAL_WALL_START_MS + 2_000)
    second = await start_service(clock=clock, offsets_retention_ms=10_000)
    assert (await fetched(second, "g"))[0].commit_timestamp_ms == MANUAL_WALL_START_MS
    assert await second.coordinator.expire_offsets() == 0
    clock.advance(8_001)  # ten seconds and a millisecond after the commit, by the wall clock
    assert await second.coordinator.expire_offsets() == 1


async def test_coordinator_time_continues_after_a_restart_on_another_host(
    start_service: ServiceFactory,
) -> None:
    # A client-side assignor keeps deadlines in assignor_state, read against the
    # coordinator_time_ms of the next PrepareAssignment, which may come from another host.
    first = await start_service(clock=ManualClock(start_ms=1_000_000_000))
    _, (a,) = await _setup(first, ("A", (("x", 0, 1),)))
    await a.heartbeat()
    assert a.compute
    before = (await a.prepare()).coordinator_time_ms
    assert before == MANUAL_WALL_START_MS
    await first.server.stop()

    second = await start_service(
        clock=ManualClock(start_ms=1_000, wall_start_ms=MANUAL_WALL_START_MS + 1_000)
    )
    a.stub = second.stubs.coordinator
    await a.heartbeat()
    assert a.compute
    assert (await a.prepare()).coordinator_time_ms == before + 1_000


async def test_a_step_of_the_wall_clock_fires_no_timer(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, run_timers=False, session_timeout_ms=1_000)
    await service.stubs.create_topic("orders", 1)
    member = WireMember(service.stubs.coordinator, "g", "m", ["orders"])
    await converge(service.stubs, "g", [member])

    clock.step_wall(60_000)  # NTP stepped the wall clock a minute ahead
    clock.advance(500)
    assert await service.coordinator.expire_due() == []
    await member.heartbeat()
    clock.step_wall(-120_000)  # and two minutes back
    clock.advance(999)
    assert await service.coordinator.expire_due() == []
    clock.advance(1)
    assert [k.member_id for k in await service.coordinator.expire_due()] == ["m"]
