"""Reads follow the lease rule (docs/ha.md, "The safety rule"): a replica whose lease is
no longer trusted (paused past it: SIGSTOP, a long GC, a suspended VM) refuses every call
that would answer from memory, until a lease round renews it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from regroup.server.clock import ManualClock
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, converge

LEASE_MS = 10_000
NOT_AVAILABLE = common_pb2.COORDINATOR_NOT_AVAILABLE


def _http(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def _web(service: Service, path: str) -> tuple[int, dict[str, Any]]:
    return await asyncio.to_thread(_http, f"http://127.0.0.1:{service.server.metrics_port}{path}")


async def _reads(service: Service, member: WireMember) -> dict[str, Any]:
    """The error code of every read of group g (NONE when it was answered)."""
    stubs = service.stubs
    described = await stubs.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["g"]))
    listed = await stubs.admin.ListGroups(admin_pb2.ListGroupsRequest())
    fetched = await stubs.coordinator.OffsetFetch(
        coordinator_pb2.OffsetFetchRequest(
            group_id="g", member_id=member.member_id, member_epoch=member.epoch
        )
    )
    found = await stubs.coordinator.FindCoordinator(coordinator_pb2.FindCoordinatorRequest(group_id="g"))
    watch = stubs.admin.WatchGroup(admin_pb2.WatchGroupRequest(group_id="g"))
    first = await watch.read()
    watch.cancel()
    events = await stubs.admin.ListGroupEvents(admin_pb2.ListGroupEventsRequest(group_id="g"))
    web_list, web_group = await _web(service, "/api/groups"), await _web(service, "/api/groups/g")
    return {
        "DescribeGroups": described.groups[0].error_code,
        "ListGroups": listed.error_code,
        "OffsetFetch": fetched.error_code,
        "FindCoordinator": found.error_code,
        "WatchGroup": first.description.error_code,
        "ListGroupEvents": events.error_code,
        "web /api/groups": (web_list[0], web_list[1].get("error")),
        "web /api/groups/g": (web_group[0], web_group[1].get("error")),
    }


async def test_a_replica_past_its_lease_answers_no_read_from_memory(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(
        clock=clock,
        run_timers=False,  # no lease round but the ones the test runs: a paused process
        lease_ms=LEASE_MS,
        lease_renew_ms=3_000,
        metrics_listen="127.0.0.1:0",
    )
    await service.stubs.create_topic("orders", 4)
    member = WireMember(service.stubs.coordinator, "g", "m1", ["orders"])
    await converge(service.stubs, "g", [member])

    served = await _reads(service, member)
    assert served == {
        "DescribeGroups": common_pb2.NONE,
        "ListGroups": common_pb2.NONE,
        "OffsetFetch": common_pb2.NONE,
        "FindCoordinator": common_pb2.NONE,
        "WatchGroup": common_pb2.NONE,
        "ListGroupEvents": common_pb2.NONE,
        "web /api/groups": (200, None),
        "web /api/groups/g": (200, None),
    }

    clock.advance(LEASE_MS)  # the process was stopped past its lease and has just woken
    refused = await _reads(service, member)
    assert refused == {
        "DescribeGroups": NOT_AVAILABLE,
        "ListGroups": NOT_AVAILABLE,
        "OffsetFetch": NOT_AVAILABLE,
        "FindCoordinator": NOT_AVAILABLE,
        "WatchGroup": NOT_AVAILABLE,
        # Read from the store, which any replica may answer from (docs/history.md).
        "ListGroupEvents": common_pb2.NONE,
        "web /api/groups": (503, "COORDINATOR_NOT_AVAILABLE"),
        "web /api/groups/g": (503, "COORDINATOR_NOT_AVAILABLE"),
    }

    assert await service.coordinator.keeper.round() is False  # its first round since waking
    assert await _reads(service, member) == served


async def test_a_woken_owner_never_describes_a_group_another_replica_changed(
    start_service: ServiceFactory,
) -> None:
    """As seen with SIGSTOP: the owner paused past its lease, another replica took its
    shards over and a member left there; the woken owner described the group from memory,
    at its old epoch and with the member that had left. It refuses until its first lease
    round, which tells it the shard is lost; then the call is forwarded to the new owner."""
    short = {"lease_ms": 500, "lease_renew_ms": 150}
    clock = ManualClock()
    paused = await start_service(clock=clock, run_timers=False, **short)
    await paused.stubs.create_topic("orders", 4)
    members = [WireMember(paused.stubs.coordinator, "g", m, ["orders"]) for m in ("m1", "m2")]
    await converge(paused.stubs, "g", members)
    before = (
        await paused.stubs.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["g"]))
    ).groups[0]
    assert sorted(m.member_id for m in before.members) == ["m1", "m2"]

    other = await start_service(**short)  # renews nothing of the paused one's: takes them as they expire
    shard = other.coordinator.shards.shard("g")
    deadline = asyncio.get_running_loop().time() + 15
    while not other.coordinator.shards.serves("g", other.coordinator.clock.monotonic_ms()):
        assert asyncio.get_running_loop().time() < deadline, f"shard {shard} was not taken over"
        await asyncio.sleep(0.05)
    leaving = WireMember(other.stubs.coordinator, "g", "m2", ["orders"], epoch=members[1].epoch)
    assert (await leaving.leave()).error_code == common_pb2.NONE

    clock.advance(500)  # woken: before its first lease round
    woken = (
        await paused.stubs.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["g"]))
    ).groups[0]
    assert woken.error_code == NOT_AVAILABLE, woken
    assert not woken.members

    await paused.coordinator.keeper.round()  # learns that the shard is lost
    forwarded = (
        await paused.stubs.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["g"]))
    ).groups[0]
    assert forwarded.error_code == common_pb2.NONE
    assert [m.member_id for m in forwarded.members] == ["m1"]
    assert forwarded.group_epoch > before.group_epoch
