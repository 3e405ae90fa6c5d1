"""Client-side assignment on the wire: choosing the assignor and the computing
member, COMPUTE_ASSIGNMENT, PrepareAssignment and InstallAssignment with every
invalid installation refused and nothing changed."""

from __future__ import annotations

import time

import pytest

from regroup.server.clock import ManualClock
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.client_side import COMPUTE, ClientSideMember, _setup, assignors
from tests.support.service import Service, ServiceFactory
from tests.support.wire import Request, WireMember, owned_pb

# Every test runs with heartbeats through the unary RPCs and again through a MemberStream
# (tests/integration/conftest.py): COMPUTE_ASSIGNMENT and the rest answered alike.
pytestmark = pytest.mark.heartbeat_transports

INVALID = common_pb2.INVALID_ASSIGNMENT


async def test_the_member_covering_every_version_range_computes(service: Service) -> None:
    # The seed's example: A[1-5], B[3-4], C[2-4] -> A.
    _, (a, b, c) = await _setup(service, ("C", (("x", 2, 4),)), ("B", (("x", 3, 4),)), ("A", (("x", 1, 5),)))
    for m in (a, b, c):
        await m.heartbeat()
    group = await service.stubs.describe("g")
    assert group.computing_member_id == "A"
    assert group.assignor_name == "x"
    assert group.group_state == "Assigning"
    assert [m.member_id for m in (a, b, c) if m.compute] == ["A"]
    # The response that asks for a computation still carries the epoch and interval.
    response = await c.stub.ConsumerGroupHeartbeat(c.heartbeat_request())
    assert response.error_code == COMPUTE and response.member_epoch == c.epoch
    assert response.heartbeat_interval_ms > 0


async def test_preference_order_and_refused_members(service: Service) -> None:
    _, (m1, _m2) = await _setup(
        service,
        ("m1", (("slow", 0, 1), ("fast", 0, 1))),
        ("m2", (("fast", 0, 1), ("slow", 0, 1), ("z", 0, 0))),
    )
    await m1.heartbeat()
    # Ranks: fast 1 + 0, slow 0 + 1: a tie broken by name.
    assert (await service.stubs.describe("g")).assignor_name == "fast"

    outsider = ClientSideMember(service.stubs, "g", "m3", ["orders"], ("other", 0, 9))
    refused = await outsider.heartbeat()
    assert refused.error_code == common_pb2.UNSUPPORTED_ASSIGNOR, refused.error_message
    server_side = WireMember(service.stubs.coordinator, "g", "m4", ["orders"])
    refused = await server_side.heartbeat()
    assert refused.error_code == common_pb2.UNSUPPORTED_ASSIGNOR
    both = m1.join_request()
    both.member_id, both.server_assignor = "m5", "uniform"
    refused = await service.stubs.coordinator.ConsumerGroupHeartbeat(both)
    assert refused.error_code == common_pb2.INVALID_REQUEST
    assert "cannot be used together" in refused.error_message
    bad = m1.join_request()
    bad.member_id = "m6"
    bad.client_assignors.assignors[0].version = 7
    refused = await service.stubs.coordinator.ConsumerGroupHeartbeat(bad)
    assert refused.error_code == common_pb2.INVALID_REQUEST and "outside" in refused.error_message
    assert sorted(m.member_id for m in (await service.stubs.describe("g")).members) == ["m1", "m2"]


async def test_no_covering_member_is_reported_not_silent(service: Service) -> None:
    _, (a, b) = await _setup(service, ("A", (("x", 1, 3),)), ("B", (("x", 2, 4),)))
    await a.heartbeat()
    group = await service.stubs.describe("g")
    assert group.computing_member_id == ""
    assert "A[1-3], B[2-4]" in group.assignment_error
    assert not a.compute and not b.compute


async def test_prepare_and_install_checks_in_order(service: Service) -> None:
    topic, (a, b) = await _setup(service, ("A", (("x", 0, 1),)), ("B", (("x", 0, 1),)))
    await a.heartbeat()
    assert a.compute
    stub = service.stubs.coordinator
    Prep = coordinator_pb2.PrepareAssignmentRequest
    assert (await stub.PrepareAssignment(Prep(group_id="nope", member_id="A"))).error_code == (
        common_pb2.GROUP_ID_NOT_FOUND
    )
    assert (await stub.PrepareAssignment(Prep(group_id="g", member_id="Z"))).error_code == (
        common_pb2.UNKNOWN_MEMBER_ID
    )
    assert (
        await stub.PrepareAssignment(Prep(group_id="g", member_id="A", member_epoch=a.epoch + 1))
    ).error_code == (common_pb2.STALE_MEMBER_EPOCH)
    assert (await b.prepare()).error_code == common_pb2.UNKNOWN_MEMBER_ID
    assert (
        await stub.PrepareAssignment(Prep(group_id="", member_id="A"))
    ).error_code == common_pb2.INVALID_REQUEST

    # Installing before preparing is refused too.
    assert (await a.install(2, {"A": {topic: [0, 1, 2, 3]}})).error_code == INVALID

    prepared = await a.prepare()
    assert prepared.error_code == common_pb2.NONE, prepared.error_message
    assert prepared.assignor_name == "x" and prepared.group_type == "consumer"
    assert [(t.name, t.num_partitions) for t in prepared.topics] == [("orders", 4)]
    assert [m.member_id for m in prepared.members] == ["A", "B"]
    assert list(prepared.members[0].subscribed_topic_names) == ["orders"]
    assert abs(prepared.coordinator_time_ms - time.time_ns() // 1_000_000) < 60_000  # epoch ms
    epoch = prepared.group_epoch

    before = await service.stubs.describe("g")
    invalid = {
        "missing partition": {"A": {topic: [0, 1]}, "B": {topic: [2]}},
        "assigned twice": {"A": {topic: [0, 1, 2]}, "B": {topic: [2, 3]}},
        "unknown member": {"A": {topic: [0, 1]}, "Z": {topic: [2, 3]}},
        "no such partition": {"A": {topic: [0, 1]}, "B": {topic: [2, 3, 4]}},
    }
    for case, plan in invalid.items():
        response = await a.install(epoch, plan)
        assert response.error_code == INVALID, case
        assert response.error_message, case
    stale = await a.install(epoch - 1, {"A": {topic: [0, 1]}, "B": {topic: [2, 3]}})
    assert stale.error_code == INVALID and "Stale group epoch" in stale.error_message
    assert await service.stubs.describe("g") == before

    ok = await a.install(epoch, {"A": {topic: [0, 1]}, "B": {topic: [2, 3]}}, assignor_state=b"s1")
    assert ok.error_code == common_pb2.NONE, ok.error_message
    for _ in range(3):
        for m in (a, b):
            await m.heartbeat()
    group = await service.stubs.describe("g")
    assert group.group_state == "Stable" and group.assignment_epoch == epoch
    assert a.partitions() == {(topic, 0), (topic, 1)} and b.partitions() == {(topic, 2), (topic, 3)}
    assert group.computing_member_id == "" and group.assignment_error == ""
    # The state left by this installation comes back with the next preparation.
    c = ClientSideMember(service.stubs, "g", "C", ["orders"], ("x", 0, 1))
    await c.heartbeat()
    await a.heartbeat()
    assert a.compute
    assert (await a.prepare()).assignor_state == b"s1"


async def test_install_for_an_epoch_the_group_moved_past_then_recompute(service: Service) -> None:
    topic, (a, _b) = await _setup(service, ("A", (("x", 0, 1),)), ("B", (("x", 0, 1),)))
    await a.heartbeat()
    prepared = await a.prepare()
    late = ClientSideMember(service.stubs, "g", "C", ["orders"], ("x", 0, 1))
    await late.heartbeat()  # the group epoch moves on during the computation
    ok = await a.install(prepared.group_epoch, {"A": {topic: [0, 1]}, "B": {topic: [2, 3]}})
    assert ok.error_code == common_pb2.NONE, ok.error_message
    group = await service.stubs.describe("g")
    assert group.assignment_epoch == prepared.group_epoch < group.group_epoch
    await a.heartbeat()
    assert a.compute  # a new computation, for the new member
    again = await a.prepare()
    assert again.group_epoch == group.group_epoch
    assert [m.member_id for m in again.members] == ["A", "B", "C"]


async def test_assignor_error_keeps_the_current_target(service: Service) -> None:
    topic, (a, b) = await _setup(service, ("A", (("x", 0, 1),)), ("B", (("x", 0, 1),)))
    await a.heartbeat()
    prepared = await a.prepare()
    await a.install(prepared.group_epoch, {"A": {topic: [0, 1, 2, 3]}, "B": {}})
    for m in (a, b, a):
        await m.heartbeat()
    c = ClientSideMember(service.stubs, "g", "C", ["orders"], ("x", 0, 1))
    await c.heartbeat()
    await a.heartbeat()
    prepared = await a.prepare()
    failed = await a.install(prepared.group_epoch, {}, error=3, error_message="cannot balance")
    assert failed.error_code == common_pb2.NONE
    group = await service.stubs.describe("g")
    assert group.assignment_epoch == prepared.group_epoch
    assert "cannot balance" in group.assignment_error
    targets = {m.member_id: m.target_assignment for m in group.members}
    assert [list(t.partitions) for t in targets["A"].topic_partitions] == [[0, 1, 2, 3]]


async def test_a_chosen_member_that_does_not_install_in_time_is_replaced_not_fenced(
    start_service: ServiceFactory,
) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, session_timeout_ms=60_000, heartbeat_interval_ms=100)
    topic, (a, b) = await _setup(service, ("A", (("x", 0, 1),)), ("B", (("x", 0, 1),)))
    await a.heartbeat()
    assert a.compute
    await a.prepare()
    clock.advance(501)  # past A's rebalance timeout (500 ms)
    await b.heartbeat()
    assert b.compute
    group = await service.stubs.describe("g")
    assert group.computing_member_id == "B"
    assert sorted(m.member_id for m in group.members) == ["A", "B"]
    late = await a.install(group.group_epoch, {"A": {topic: [0, 1]}, "B": {topic: [2, 3]}})
    assert late.error_code == common_pb2.UNKNOWN_MEMBER_ID
    prepared = await b.prepare()
    ok = await b.install(prepared.group_epoch, {"A": {topic: [0, 1]}, "B": {topic: [2, 3]}})
    assert ok.error_code == common_pb2.NONE


async def test_the_chosen_member_crashing_during_the_computation(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, session_timeout_ms=1_000, heartbeat_interval_ms=100)
    topic, (a, b) = await _setup(service, ("A", (("x", 0, 1),)), ("B", (("x", 0, 1),)))
    await a.heartbeat()
    await a.prepare()  # ... and A dies here
    clock.advance(600)
    await b.heartbeat()
    clock.advance(600)
    await service.coordinator.expire_due()
    await b.heartbeat()
    assert b.compute
    prepared = await b.prepare()
    assert [m.member_id for m in prepared.members] == ["B"]
    ok = await b.install(prepared.group_epoch, {"B": {topic: [0, 1, 2, 3]}})
    assert ok.error_code == common_pb2.NONE
    await b.heartbeat()
    assert len(b.partitions()) == 4


async def test_reason_change_bumps_the_group_epoch(service: Service) -> None:
    topic, (a,) = await _setup(service, ("A", (("x", 0, 1),)))
    await a.heartbeat()
    prepared = await a.prepare()
    await a.install(prepared.group_epoch, {"A": {topic: [0, 1, 2, 3]}})
    await a.heartbeat()
    epoch = (await service.stubs.describe("g")).group_epoch
    req = Request(group_id="g", member_id="A", member_epoch=a.epoch, topic_partitions=owned_pb(a.owned))
    req.client_assignors.CopyFrom(assignors(("x", 0, 1)))
    req.client_assignors.assignors[0].reason = 1
    response = await service.stubs.coordinator.ConsumerGroupHeartbeat(req)
    assert response.error_code == COMPUTE
    assert (await service.stubs.describe("g")).group_epoch == epoch + 1
