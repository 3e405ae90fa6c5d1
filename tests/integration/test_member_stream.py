"""GroupCoordinator.MemberStream against a real server, through the raw stream client of
tests/support/streams.py: the limits it announces, answers equal to the unary RPC's,
batches of many groups' members, nudges (when, to whom, once, and at no write), the
items the stream refuses itself, a client that does not read, the ends of a stream
(half-close, server stop) and access control per item.

Heartbeat conformance (the unary tests run again through a stream) is in the modules
marked `heartbeat_transports` (tests/integration/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from regroup.server.clock import ManualClock
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.access import ADMIN, ALICE, EVE, auth, files
from tests.support.client_side import ClientSideMember
from tests.support.service import Service, ServiceFactory, _xmax
from tests.support.streams import MemberStreamClient, StreamCoordinatorStub, item, unwrap
from tests.support.wire import Request, Response, Stubs, WireMember, assert_disjoint, converge

Nudge = coordinator_pb2.Nudge
TARGET_CHANGED = coordinator_pb2.NUDGE_REASON_TARGET_CHANGED
PARTITIONS_RELEASED = coordinator_pb2.NUDGE_REASON_PARTITIONS_RELEASED
COMPUTE_ASSIGNMENT = coordinator_pb2.NUDGE_REASON_COMPUTE_ASSIGNMENT
MEMBER_REMOVED = coordinator_pb2.NUDGE_REASON_MEMBER_REMOVED
LIMIT = common_pb2.STREAM_LIMIT_REACHED


def join(group_id: str, member_id: str, topics: tuple[str, ...] = ("orders",)) -> Request:
    return Request(
        group_id=group_id,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=common_pb2.StringList(values=list(topics)),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )


async def barrier(client: MemberStreamClient) -> None:
    """Returns once every nudge the server queued on this stream before now has arrived:
    an answer queued after a nudge is never sent before it. The heartbeat is about a
    group that does not exist (GROUP_ID_NOT_FOUND): it changes nothing."""
    answer = await client.heartbeat(Request(group_id="no-such-group", member_id="barrier", member_epoch=1))
    assert answer.error_code == common_pb2.GROUP_ID_NOT_FOUND


async def streamed(service: Service) -> tuple[StreamCoordinatorStub, MemberStreamClient]:
    """A stub whose heartbeats go through one stream, and that stream."""
    stub = StreamCoordinatorStub(service.stubs.coordinator)
    return stub, await stub.stream()


def reasons(nudges: list[Nudge]) -> list[tuple[str, str, int]]:
    return [(n.group_id, n.member_id, n.reason) for n in nudges]


# -- the stream itself ----------------------------------------------------------------


async def test_the_first_message_carries_the_limits_of_the_settings(start_service: ServiceFactory) -> None:
    service = await start_service(stream_max_batch=7, stream_max_members=5, stream_max_pending=300)
    client = await MemberStreamClient.open(service.stubs.coordinator)  # asserts limits come first, alone
    try:
        assert (client.limits.max_batch, client.limits.max_members, client.limits.max_pending) == (7, 5, 300)
    finally:
        await client.close()


async def test_the_default_limits_are_the_documented_ones(service: Service) -> None:
    client = await MemberStreamClient.open(service.stubs.coordinator)
    try:
        settings = service.settings
        limits = (client.limits.max_batch, client.limits.max_members, client.limits.max_pending)
        assert limits == (settings.stream_max_batch, settings.stream_max_members, settings.stream_max_pending)
        assert limits == (1_000, 10_000, 20_000)
    finally:
        await client.close()


async def test_stream_answers_equal_unary_answers_to_the_same_heartbeats(service: Service) -> None:
    """Twin groups on one server: the same members (same ids, so the same assignor
    decisions) send the same heartbeats, one group's through the unary RPC, the other's
    through the stream. Every answer must be equal, field by field; so must the groups."""
    await service.stubs.create_topic("orders", 6)
    stream_stub, client = await streamed(service)
    stubs = {"unary": service.stubs.coordinator, "stream": stream_stub}
    twins: dict[str, dict[str, WireMember]] = {via: {} for via in stubs}

    def member(via: str, member_id: str, instance_id: str | None = None) -> WireMember:
        if member_id not in twins[via]:
            twins[via][member_id] = WireMember(stubs[via], f"g-{via}", member_id, ["orders"], instance_id)
        return twins[via][member_id]

    async def both(
        step: Callable[[str], Awaitable[Response]], modulo_member_id: bool = False
    ) -> tuple[Response, Response]:
        unary, stream = await step("unary"), await step("stream")
        compared = Response()
        compared.CopyFrom(stream)
        # Messages name the group: the twins' ids differ there and only there.
        compared.error_message = stream.error_message.replace("g-stream", "g-unary")
        expected = unary
        if modulo_member_id:
            expected = Response()
            expected.CopyFrom(unary)
            assert unary.member_id and stream.member_id
            expected.ClearField("member_id")
            compared.ClearField("member_id")
        assert compared == expected
        return unary, stream

    async def rounds(count: int, *member_ids: str) -> None:
        for _ in range(count):
            for member_id in member_ids:
                await both(lambda via, m=member_id: member(via, m).heartbeat())

    def raw(via: str, **fields: Any) -> Awaitable[Response]:
        return stubs[via].ConsumerGroupHeartbeat(Request(group_id=f"g-{via}", **fields))

    for member_id, instance in (("m0", None), ("m1", None), ("m2", "i2")):
        await both(lambda via, m=member_id, i=instance: member(via, m, i).heartbeat())
    await rounds(4, "m0", "m1", "m2")
    # Refusals: an epoch from the future (the member rejoins), an unknown member.
    fenced, _ = await both(lambda via: member(via, "m0").heartbeat(member_epoch=99))
    assert fenced.error_code == common_pb2.FENCED_MEMBER_EPOCH
    unknown, _ = await both(lambda via: raw(via, member_id="ghost", member_epoch=1))
    assert unknown.error_code == common_pb2.UNKNOWN_MEMBER_ID
    await rounds(3, "m0", "m1", "m2")
    left, _ = await both(lambda via: member(via, "m1").leave())
    assert left.member_epoch == -1
    await rounds(3, "m0", "m2")
    # A static member leaves for a restart and another member id takes its instance over.
    static_leave, _ = await both(lambda via: raw(via, member_id="m2", member_epoch=-2, instance_id="i2"))
    assert static_leave.member_epoch == -2
    await both(lambda via: member(via, "m3", "i2").heartbeat())
    replaced, _ = await both(lambda via: member(via, "m2").heartbeat())
    assert replaced.error_code == common_pb2.FENCED_INSTANCE_ID
    await rounds(3, "m0", "m3")
    # A join without a member id: the generated ids differ, the rest must not.
    await both(lambda via: stubs[via].ConsumerGroupHeartbeat(join(f"g-{via}", "")), modulo_member_id=True)

    described = {via: await service.stubs.describe(f"g-{via}") for via in stubs}
    for group in described.values():
        group.ClearField("group_id")
        for m in group.members:
            if m.member_id not in ("m0", "m3"):
                m.ClearField("member_id")  # the generated one
    assert described["stream"] == described["unary"]
    assert len(described["stream"].members) == 3  # m0, m3 and the one without an id
    await client.close()


async def test_a_batch_of_members_of_several_groups_is_answered_item_by_item(service: Service) -> None:
    await service.stubs.create_topic("orders", 8)
    client = await MemberStreamClient.open(service.stubs.coordinator)
    members = [
        WireMember(service.stubs.coordinator, f"g{g}", f"m{m}", ["orders"])
        for g in range(3)
        for m in range(4)
    ]
    for _ in range(10):
        ids = [client.next_id() for _ in members]
        client.send_items([item(i, m.heartbeat_request()) for i, m in zip(ids, members, strict=True)])
        sent = set(ids)
        await client.wait_until(lambda sent=sent: {a.correlation_id for a in client.answers} >= sent)
        answers = [a for a in client.answers if a.correlation_id in sent]
        assert len(answers) == len(members)  # one answer per item, none twice
        by_id = {a.correlation_id: a for a in answers}
        for correlation_id, wire in zip(ids, members, strict=True):
            response = unwrap(by_id[correlation_id])
            assert response.error_code == common_pb2.NONE, response.error_message
            assert response.member_id == wire.member_id  # the answer of this item, not another's
            wire.handle(response)
        states = {(await service.stubs.describe(f"g{g}")).group_state for g in range(3)}
        if states == {"Stable"}:
            break
    assert states == {"Stable"}
    for g in range(3):
        group = [m for m in members if m.group_id == f"g{g}"]
        assert_disjoint(group)
        assert sorted(len(m.partitions()) for m in group) == [2, 2, 2, 2]
    await client.close()


# -- nudges ---------------------------------------------------------------------------


async def test_a_join_through_the_unary_rpc_nudges_a_stream_member_whose_target_moved(
    service: Service,
) -> None:
    await service.stubs.create_topic("orders", 4)
    stub, client = await streamed(service)
    a = WireMember(stub, "g", "a", ["orders"])  # heartbeats through the stream
    await converge(service.stubs, "g", [a])
    assert len(a.partitions()) == 4
    assert client.nudges == []  # nothing changed for it but by its own heartbeats

    b = WireMember(service.stubs.coordinator, "g", "b", ["orders"])  # through the unary RPC
    await b.heartbeat()

    nudge = await client.nudge_for("a")
    epoch = (await service.stubs.describe("g")).group_epoch
    assert (nudge.group_id, nudge.member_id, nudge.reason, nudge.group_epoch) == (
        "g",
        "a",
        TARGET_CHANGED,
        epoch,
    )
    answer = await a.heartbeat()  # the member learns what changed from the answer
    assert answer.HasField("assignment") and len(a.partitions()) == 2
    await barrier(client)
    assert reasons(client.nudges) == [("g", "a", TARGET_CHANGED)]  # b heartbeats unary: no nudge to it
    await client.close()


async def test_a_member_waiting_for_partitions_is_nudged_when_their_owner_releases_them(
    service: Service,
) -> None:
    await service.stubs.create_topic("orders", 4)
    stub, client = await streamed(service)
    a = WireMember(service.stubs.coordinator, "g", "a", ["orders"])  # unary: owns everything
    await converge(service.stubs, "g", [a])
    b = WireMember(stub, "g", "b", ["orders"])  # through the stream
    await b.heartbeat()
    assert b.partitions() == set()  # its two partitions are a's still
    await a.heartbeat()  # a learns it must revoke two: nothing released yet
    assert len(a.partitions()) == 2
    await barrier(client)
    assert client.nudges == []
    states = {m.member_id: m.member_state for m in (await service.stubs.describe("g")).members}
    assert states == {"a": "UNREVOKED_PARTITIONS", "b": "UNRELEASED_PARTITIONS"}

    await a.heartbeat()  # acknowledges: the partitions are free

    nudge = await client.nudge_for("b")
    assert (nudge.member_id, nudge.reason) == ("b", PARTITIONS_RELEASED)
    await b.heartbeat()
    assert len(b.partitions()) == 2
    assert_disjoint([a, b])
    await client.close()


async def test_a_member_chosen_to_compute_a_client_side_assignment_is_nudged(service: Service) -> None:
    topic = await service.stubs.create_topic("orders", 4)
    stub, client = await streamed(service)
    a = ClientSideMember(Stubs(service.stubs.channel, stub, service.stubs.admin), "g", "A", ["orders"])  # type: ignore[arg-type]
    await a.heartbeat()
    assert a.compute
    prepared = await a.prepare()
    installed = await a.install(prepared.group_epoch, {"A": {topic: [0, 1, 2, 3]}})
    assert installed.error_code == common_pb2.NONE, installed.error_message
    await a.heartbeat()
    assert len(a.partitions()) == 4 and not a.compute
    await barrier(client)
    seen = len(client.nudges)

    b = ClientSideMember(service.stubs, "g", "B", ["orders"])  # unary; A still covers every version
    joined = await b.heartbeat()
    assert joined.error_code == common_pb2.NONE and not b.compute

    nudge = await client.nudge_for("A", since=seen)
    assert nudge.reason == COMPUTE_ASSIGNMENT
    await a.heartbeat()
    assert a.compute  # the answer says so: COMPUTE_ASSIGNMENT
    assert (await service.stubs.describe("g")).computing_member_id == "A"
    await client.close()


async def test_a_member_whose_session_expires_is_nudged_once_that_it_was_removed(
    start_service: ServiceFactory,
) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, session_timeout_ms=1_000, heartbeat_interval_ms=100)
    await service.stubs.create_topic("orders", 4)
    stub, client = await streamed(service)
    silent = WireMember(stub, "g", "silent", ["orders"])
    alive = WireMember(service.stubs.coordinator, "g", "alive", ["orders"])
    await converge(service.stubs, "g", [silent, alive])
    await barrier(client)
    seen = len(client.nudges)

    clock.advance(600)
    await alive.heartbeat()
    clock.advance(600)  # silent: 1200 ms without a heartbeat
    await service.coordinator.expire_due()

    nudge = await client.nudge_for("silent", since=seen)
    epoch = (await service.stubs.describe("g")).group_epoch
    assert (nudge.reason, nudge.group_epoch) == (MEMBER_REMOVED, epoch)
    # The group moves on (alive takes everything): the member removed hears no more of it.
    await converge(service.stubs, "g", [alive])
    assert len(alive.partitions()) == 4
    await barrier(client)
    assert reasons(client.nudges[seen:]) == [("g", "silent", MEMBER_REMOVED)]
    refused = await silent.heartbeat()
    assert refused.error_code == common_pb2.UNKNOWN_MEMBER_ID
    await client.close()


async def test_a_topic_growth_nudges_stream_members_when_the_timer_computes_their_target(
    service: Service,
) -> None:
    """No heartbeat causes this change: CreatePartitions bumps the group epoch and the
    assignment timer computes the target; the members hear of it at once."""
    await service.stubs.create_topic("orders", 2)
    stub, client = await streamed(service)
    members = [WireMember(stub, "g", f"m{i}", ["orders"]) for i in range(2)]
    await converge(service.stubs, "g", members)
    await barrier(client)
    seen = len(client.nudges)

    grown = await service.stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name="orders", count=6)]
        )
    )
    assert grown.topics[0].error_code == common_pb2.NONE

    for member in members:
        assert (await client.nudge_for(member.member_id, since=seen)).reason == TARGET_CHANGED
    for member in members:
        assert (await member.heartbeat()).HasField("assignment")
    assert sorted(len(m.partitions()) for m in members) == [3, 3]
    await client.close()


async def test_a_connectors_change_nudges_the_connect_workers_of_the_stream(service: Service) -> None:
    put = await service.stubs.admin.PutConnectors(
        admin_pb2.PutConnectorsRequest(
            group_id="c", connectors=[admin_pb2.ConnectorConfig(name="A", tasks=1)]
        )
    )
    assert put.error_code == common_pb2.NONE
    client = await MemberStreamClient.open(service.stubs.coordinator)
    worker = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="c",
        member_id="w1",
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        url="http://w1",
        owned=common_pb2.ConnectorsAndTasks(),
    )
    joined = await client.heartbeat(worker)
    assert joined.error_code == common_pb2.NONE, joined.error_message
    assert (list(joined.assignment.connectors), len(joined.assignment.tasks)) == (["A"], 1)
    owned = common_pb2.ConnectorsAndTasks()
    owned.CopyFrom(joined.assignment)
    settled = await client.heartbeat(
        coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id="c", member_id="w1", member_epoch=joined.member_epoch, owned=owned
        )
    )
    assert settled.error_code == common_pb2.NONE
    await barrier(client)
    assert client.nudges == []

    put = await service.stubs.admin.PutConnectors(
        admin_pb2.PutConnectorsRequest(
            group_id="c", connectors=[admin_pb2.ConnectorConfig(name="A", tasks=2)]
        )
    )
    assert put.error_code == common_pb2.NONE

    nudge = await client.nudge_for("w1")
    assert (nudge.group_id, nudge.reason, nudge.group_epoch) == ("c", TARGET_CHANGED, put.group_epoch)
    moved = await client.heartbeat(
        coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id="c", member_id="w1", member_epoch=settled.member_epoch, owned=owned
        )
    )
    assert len(moved.assignment.tasks) == 2
    await client.close()


async def test_nudges_go_to_the_stream_of_the_members_last_heartbeat(service: Service) -> None:
    """A member may switch between the unary RPC and streams at any time: it is nudged on
    the stream its last heartbeat came through, and on no other."""
    await service.stubs.create_topic("orders", 4)
    first = await MemberStreamClient.open(service.stubs.coordinator)
    second = await MemberStreamClient.open(service.stubs.coordinator)
    a = WireMember(service.stubs.coordinator, "g", "a", ["orders"])
    await converge(service.stubs, "g", [a])  # joined and settled through the unary RPC
    a.handle(await first.heartbeat(a.heartbeat_request()))  # answered inline: nothing to write
    a.handle(await second.heartbeat(a.heartbeat_request()))

    await WireMember(service.stubs.coordinator, "g", "b", ["orders"]).heartbeat()

    assert (await second.nudge_for("a")).reason == TARGET_CHANGED
    await barrier(first)
    assert first.nudges == []
    await first.close()
    await second.close()


async def test_a_nudge_is_not_repeated_before_the_member_heartbeats_again(service: Service) -> None:
    await service.stubs.create_topic("orders", 12)
    stub, client = await streamed(service)
    a = WireMember(stub, "g", "a", ["orders"])
    await converge(service.stubs, "g", [a])
    others = [WireMember(service.stubs.coordinator, "g", name, ["orders"]) for name in ("b", "c", "d")]

    await others[0].heartbeat()
    await client.nudge_for("a")
    await others[1].heartbeat()  # the target moves again: a has not heartbeated since its nudge
    await barrier(client)
    assert reasons(client.nudges) == [("g", "a", TARGET_CHANGED)]

    await converge(service.stubs, "g", [a, *others[:2]])  # a heartbeats: nudges may come again
    await barrier(client)
    seen = len(client.nudges)
    await others[2].heartbeat()
    nudge = await client.nudge_for("a", since=seen)
    assert nudge.reason == TARGET_CHANGED
    await client.close()


async def test_a_member_that_left_gets_no_nudges(service: Service) -> None:
    await service.stubs.create_topic("orders", 4)
    stub, client = await streamed(service)
    stays = WireMember(stub, "g", "stays", ["orders"])
    leaves = WireMember(stub, "g", "leaves", ["orders"])
    await converge(service.stubs, "g", [stays, leaves])
    await barrier(client)
    seen = len(client.nudges)

    left = await leaves.leave()  # through the stream
    assert (left.error_code, left.member_epoch) == (common_pb2.NONE, -1)
    newcomer = WireMember(service.stubs.coordinator, "g", "newcomer", ["orders"])
    await newcomer.heartbeat()  # moves the target of the members still in the group
    await client.nudge_for("stays", since=seen)
    await converge(service.stubs, "g", [stays, newcomer])
    await stays.leave()
    await newcomer.leave()
    deleted = await service.stubs.admin.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=["g"]))
    assert [r.error_code for r in deleted.results] == [common_pb2.NONE]
    await barrier(client)

    assert client.nudges_to("leaves", since=seen) == []
    # Nor the members that left before the group was deleted: GROUP_DELETED can reach a
    # stream only for a member in the group, and DeleteGroups refuses a group with members.
    assert [n for n in client.nudges[seen:] if n.reason == coordinator_pb2.NUDGE_REASON_GROUP_DELETED] == []
    await client.close()


async def test_nudges_write_nothing(service: Service) -> None:
    await service.stubs.create_topic("orders", 6)
    stub, client = await streamed(service)
    members = [WireMember(stub, "g", f"m{i}", ["orders"]) for i in range(2)]
    await converge(service.stubs, "g", members)
    await barrier(client)
    store = service.coordinator.store
    before, seen = store.commits, len(client.nudges)

    await WireMember(service.stubs.coordinator, "g", "joiner", ["orders"]).heartbeat()
    caused, xmax = store.commits, await _xmax(service)  # the join and its target: one write
    assert caused == before + 1
    for member in members:
        await client.nudge_for(member.member_id, since=seen)
    await barrier(client)

    assert sorted(reasons(client.nudges[seen:])) == [("g", "m0", TARGET_CHANGED), ("g", "m1", TARGET_CHANGED)]
    assert store.commits == caused
    assert await _xmax(service) == xmax
    await client.close()


# -- items the stream refuses itself --------------------------------------------------


async def test_an_item_without_a_heartbeat_is_refused_invalid_request(service: Service) -> None:
    client = await MemberStreamClient.open(service.stubs.coordinator)
    client.send_items([item(41, None)])
    await client.wait_until(lambda: len(client.answers) == 1)

    (answer,) = client.answers
    assert (answer.correlation_id, answer.error_code) == (41, common_pb2.INVALID_REQUEST)
    assert "carries no heartbeat" in answer.error_message
    assert answer.WhichOneof("response") is None
    assert await client.finish() == grpc.StatusCode.OK  # the stream goes on; it ends cleanly
    assert service.coordinator.store.commits == 0


async def test_a_correlation_id_in_use_is_refused_and_that_item_not_served(service: Service) -> None:
    """Two items with one id in a batch: the first (a join, which writes) is in flight
    when the second is read, so the second is refused and nothing is done for it."""
    await service.stubs.create_topic("orders", 2)
    client = await MemberStreamClient.open(service.stubs.coordinator)
    client.send_items([item(7, join("g", "first")), item(7, join("g", "second"))])
    await client.wait_until(lambda: len(client.answers) == 2)

    refused = [a for a in client.answers if a.error_code]
    served = [a for a in client.answers if a.WhichOneof("response")]
    assert [(a.correlation_id, a.error_code) for a in refused] == [(7, common_pb2.INVALID_REQUEST)]
    assert "already in use" in refused[0].error_message
    assert [(a.correlation_id, a.consumer.error_code, a.consumer.member_id) for a in served] == [
        (7, common_pb2.NONE, "first")
    ]
    assert [m.member_id for m in (await service.stubs.describe("g")).members] == ["first"]
    await client.close()


async def test_a_batch_over_the_batch_limit_is_refused_item_by_item_and_nothing_is_done(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(stream_max_batch=3)
    await service.stubs.create_topic("orders", 4)
    commits = service.coordinator.store.commits
    client = await MemberStreamClient.open(service.stubs.coordinator)

    answers = await client.batch([join("g", f"m{i}") for i in range(4)])

    assert [a.error_code for a in answers] == [LIMIT] * 4
    assert all(
        "at most 3 heartbeats" in a.error_message and "REGROUP_STREAM_MAX_BATCH" in a.error_message
        for a in answers
    )
    assert all(a.WhichOneof("response") is None for a in answers)
    assert (await service.stubs.describe("g")).error_code == common_pb2.GROUP_ID_NOT_FOUND
    assert service.coordinator.store.commits == commits
    # A batch within the limit is served on the same stream.
    served = [unwrap(a) for a in await client.batch([join("g", f"m{i}") for i in range(3)])]
    assert [r.error_code for r in served] == [common_pb2.NONE] * 3
    await client.close()


async def test_a_member_beyond_the_member_limit_is_refused_alone(start_service: ServiceFactory) -> None:
    service = await start_service(stream_max_members=2)
    await service.stubs.create_topic("orders", 4)
    client = await MemberStreamClient.open(service.stubs.coordinator)
    first, second = (WireMember(service.stubs.coordinator, "g", f"m{i}", ["orders"]) for i in range(2))
    for member in (first, second):
        member.handle(await client.heartbeat(member.heartbeat_request()))

    (extra,) = await client.batch([join("g", "m2")])

    assert extra.error_code == LIMIT and extra.WhichOneof("response") is None
    assert "REGROUP_STREAM_MAX_MEMBERS" in extra.error_message
    assert sorted(m.member_id for m in (await service.stubs.describe("g")).members) == ["m0", "m1"]
    # The members it carries are served as before; the extra one goes unary.
    for member in (first, second):
        assert member.handle(await client.heartbeat(member.heartbeat_request())).error_code == common_pb2.NONE
    unary = await service.stubs.coordinator.ConsumerGroupHeartbeat(join("g", "m2"))
    assert unary.error_code == common_pb2.NONE
    # A member that left frees its place on the stream.
    left = await client.heartbeat(Request(group_id="g", member_id="m0", member_epoch=-1))
    assert left.member_epoch == -1
    assert unwrap((await client.batch([join("g", "m3")]))[0]).error_code == common_pb2.NONE
    await client.close()


async def test_joins_in_one_batch_beyond_the_member_limit_refuse_the_extra_members(
    start_service: ServiceFactory,
) -> None:
    """Joins write, so they are served in tasks: the limit must count the members whose
    first heartbeat is being served, not only those already answered."""
    service = await start_service(stream_max_members=2)
    await service.stubs.create_topic("orders", 4)
    client = await MemberStreamClient.open(service.stubs.coordinator)

    answers = await client.batch([join("g", f"m{i}") for i in range(4)])

    assert [a.error_code for a in answers] == [common_pb2.NONE, common_pb2.NONE, LIMIT, LIMIT]
    assert [unwrap(a).member_id for a in answers[:2]] == ["m0", "m1"]
    assert sorted(m.member_id for m in (await service.stubs.describe("g")).members) == ["m0", "m1"]
    await client.close()


async def test_a_member_removed_after_its_nudge_no_longer_counts_against_the_member_limit(
    start_service: ServiceFactory,
) -> None:
    """A member nudged and then removed (its session expired before it heartbeated) is
    not carried any more: its place on the stream goes to a new member."""
    clock = ManualClock()
    service = await start_service(
        clock=clock, session_timeout_ms=1_000, heartbeat_interval_ms=100, stream_max_members=1
    )
    await service.stubs.create_topic("orders", 4)
    stub, client = await streamed(service)
    gone = WireMember(stub, "g", "gone", ["orders"])
    await converge(service.stubs, "g", [gone])
    other = WireMember(service.stubs.coordinator, "g", "other", ["orders"])
    await other.heartbeat()
    await client.nudge_for("gone")  # ... and it never heartbeats again (its process hung)
    clock.advance(600)
    await other.heartbeat()
    clock.advance(600)
    await service.coordinator.expire_due()
    assert [m.member_id for m in (await service.stubs.describe("g")).members] == ["other"]

    newcomer = await client.heartbeat(join("g", "newcomer"))

    assert newcomer.error_code == common_pb2.NONE
    await client.close()


# -- a client that does not read; the ends of a stream --------------------------------


async def test_a_client_that_does_not_read_has_its_stream_closed_resource_exhausted(
    start_service: ServiceFactory,
) -> None:
    """Answers pile up for a client that sends but never reads: past max_pending the
    server drops the stream, stops reading it and ends it RESOURCE_EXHAUSTED, which the
    client sees after the answers already handed to gRPC (HTTP/2 sends a stream's status
    after its data). The server serves everyone else meanwhile."""
    service = await start_service(stream_max_pending=50)
    # Full heartbeats are answered with the whole assignment: 10,000 partitions make each
    # answer ~20 kB, so the transport's buffers fill after a few hundred answers.
    await service.stubs.create_topic("orders", 10_000)
    hog = WireMember(service.stubs.coordinator, "g", "hog", ["orders"])
    await converge(service.stubs, "g", [hog])
    full = hog.heartbeat_request()
    full.rebalance_timeout_ms = hog.rebalance_timeout_ms
    full.subscribed_topic_names.values.extend(hog.topics)
    hub = service.server.streams
    assert hub is not None

    call = service.stubs.coordinator.MemberStream()
    sent = 0

    async def send_without_reading() -> None:
        nonlocal sent
        while True:
            await call.write(
                coordinator_pb2.MemberStreamRequest(heartbeats=[item(sent + i, full) for i in range(10)])
            )
            sent += 10

    sender = asyncio.create_task(send_without_reading())
    try:
        async with asyncio.timeout(20):
            while not hub.sessions:
                await asyncio.sleep(0.01)
            while hub.sessions:  # the server gave up on the stream (its writes went on)
                await asyncio.sleep(0.01)
        assert not sender.done()  # blocked: the server reads no more of this stream

        # Meanwhile the server serves others: a unary heartbeat, and a new stream.
        other = WireMember(service.stubs.coordinator, "g", "other", ["orders"])
        assert (await other.heartbeat()).error_code == common_pb2.NONE
        fresh = await MemberStreamClient.open(service.stubs.coordinator)
        assert (await fresh.heartbeat(hog.heartbeat_request())).error_code == common_pb2.NONE
        await fresh.close()

        answered = 0
        with pytest.raises(grpc.aio.AioRpcError) as closed:
            async with asyncio.timeout(20):
                async for message in call:
                    answered += len(message.responses)
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError, grpc.aio.UsageError):
            await sender
    assert closed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "REGROUP_STREAM_MAX_PENDING" in str(closed.value.details())
    assert 0 < answered < sent  # the heartbeats not answered are the client's to send again


async def test_a_client_that_reads_is_never_closed_whatever_it_sends(start_service: ServiceFactory) -> None:
    """The control of the test above: the same heartbeats, the same limit, but read."""
    service = await start_service(stream_max_pending=50)
    await service.stubs.create_topic("orders", 10_000)
    hog = WireMember(service.stubs.coordinator, "g", "hog", ["orders"])
    await converge(service.stubs, "g", [hog])
    full = hog.heartbeat_request()
    full.rebalance_timeout_ms = hog.rebalance_timeout_ms
    full.subscribed_topic_names.values.extend(hog.topics)
    client = await MemberStreamClient.open(service.stubs.coordinator)

    for _ in range(60):  # 600 answers of ~20 kB: more than the test above needed
        answers = await client.batch([full] * 10)
        assert all(unwrap(a).HasField("assignment") for a in answers)

    assert await client.finish() == grpc.StatusCode.OK


async def test_a_half_closed_stream_answers_everything_in_flight_then_ends_ok(service: Service) -> None:
    await service.stubs.create_topic("orders", 4)
    client = await MemberStreamClient.open(service.stubs.coordinator)
    # Joins write: they are served in tasks, still in flight when the client half-closes.
    futures = client.send([join("g", f"m{i}") for i in range(5)])

    assert await client.finish() == grpc.StatusCode.OK

    responses = [unwrap(f.result()) for f in futures]  # all resolved before the end
    assert [(r.error_code, r.member_id) for r in responses] == [(common_pb2.NONE, f"m{i}") for i in range(5)]
    assert len((await service.stubs.describe("g")).members) == 5


async def test_an_open_stream_ends_unavailable_when_the_server_stops(start_service: ServiceFactory) -> None:
    service = await start_service()
    await service.stubs.create_topic("orders", 4)
    stub, client = await streamed(service)
    member = WireMember(stub, "g", "m", ["orders"])
    await converge(service.stubs, "g", [member])

    await service.server.stop()

    assert await client.ended_with() == grpc.StatusCode.UNAVAILABLE
    assert client.error is not None and "stopping" in str(client.error.details())


# -- access control -------------------------------------------------------------------


async def test_stream_items_are_refused_exactly_as_the_unary_rpcs_refuse_them(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    """The principal is the stream's (its call metadata); each item is checked with its
    unary RPC's rule and answered with the unary RPC's refusal, also a heartbeat that
    would otherwise be answered inline (a member's no-change heartbeat)."""
    service = await start_service(**files(tmp_path))
    admin, unary = service.stubs.admin, service.stubs.coordinator
    for name in ("orders", "secret"):
        created = await admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name=name, num_partitions=2)]),
            metadata=ADMIN,
        )
        assert created.topics[0].error_code == common_pb2.NONE
    joined = await unary.ConsumerGroupHeartbeat(join("team-1", "m1"), metadata=ALICE)
    assert joined.error_code == common_pb2.NONE
    no_change = Request(group_id="team-1", member_id="m1", member_epoch=joined.member_epoch)
    streams = {
        "eve": await MemberStreamClient.open(unary, metadata=EVE),
        "alice": await MemberStreamClient.open(unary, metadata=ALICE),
    }
    cases: list[tuple[str, Any, int]] = [
        ("eve", join("team-1", "m2"), common_pb2.GROUP_AUTHORIZATION_FAILED),
        ("eve", no_change, common_pb2.GROUP_AUTHORIZATION_FAILED),
        (
            "eve",
            coordinator_pb2.ConnectGroupHeartbeatRequest(
                group_id="team-c", member_epoch=0, rebalance_timeout_ms=60_000
            ),
            common_pb2.GROUP_AUTHORIZATION_FAILED,
        ),
        ("alice", join("other", "m2"), common_pb2.GROUP_AUTHORIZATION_FAILED),
        ("alice", join("team-2", "m2", ("orders", "secret")), common_pb2.TOPIC_AUTHORIZATION_FAILED),
        ("alice", no_change, common_pb2.NONE),
    ]
    metadata = {"eve": EVE, "alice": ALICE}
    for who, request, code in cases:
        rpc = (
            unary.ConnectGroupHeartbeat
            if isinstance(request, coordinator_pb2.ConnectGroupHeartbeatRequest)
            else unary.ConsumerGroupHeartbeat
        )
        through_stream = await streams[who].heartbeat(request)
        through_rpc = await rpc(request, metadata=metadata[who])
        assert through_stream.error_code == code, (who, request, through_stream)
        assert through_stream == through_rpc, (who, request)
    described = await admin.DescribeGroups(
        admin_pb2.DescribeGroupsRequest(group_ids=["team-1", "team-2", "other"]), metadata=ADMIN
    )
    assert [(g.group_id, len(g.members)) for g in described.groups if g.error_code == common_pb2.NONE] == [
        ("team-1", 1)
    ]
    for stream in streams.values():
        await stream.close()

    # An unknown token: the stream itself is refused, as any call is.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await MemberStreamClient.open(unary, metadata=auth("guess"))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
