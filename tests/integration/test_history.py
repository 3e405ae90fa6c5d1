"""Group history through the real server: ListGroupEvents and WatchGroup (issue 23).

A scripted sequence of joins, leaves, an expiry, topic changes and client-side
installs yields exactly the expected events, with their reasons, in order; they
survive a restart; retention drops the oldest by count and by age; a heartbeat
that changes nothing stores no event; WatchGroup sends the description, then
the events as they are stored.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from regroup.client import GroupAdmin, RegroupError, SyncGroupAdmin
from regroup.server.clock import ManualClock
from regroup.v1 import admin_pb2, common_pb2
from tests.support.client_side import ClientSideMember
from tests.support.service import Service, ServiceFactory
from tests.support.wire import Stubs, WireMember, converge

T = admin_pb2.GroupEventType


async def events(stubs: Stubs, group_id: str, **query: Any) -> list[admin_pb2.GroupEvent]:
    query.setdefault("oldest_first", True)
    query.setdefault("limit", 1000)
    response = await stubs.admin.ListGroupEvents(admin_pb2.ListGroupEventsRequest(group_id=group_id, **query))
    assert response.error_code == common_pb2.NONE, response.error_message
    return list(response.events)


def names(found: list[admin_pb2.GroupEvent]) -> list[tuple[str, str, str]]:
    """(type without its prefix, reason, member) of each event."""
    return [(T.Name(e.type).removeprefix("GROUP_EVENT_TYPE_"), e.reason, e.member_id) for e in found]


async def grow(stubs: Stubs, topic: str, count: int) -> None:
    response = await stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name=topic, count=count)]
        )
    )
    assert response.topics[0].error_code == common_pb2.NONE, response.topics[0].error_message


async def _script(service: Service) -> None:
    """Joins, a leave, an expiry, topic changes: each step settled before the next."""
    stubs, clock = service.stubs, service.clock
    await stubs.create_topic("orders", 4)
    a = WireMember(stubs.coordinator, "g", "a", ["orders"])
    b = WireMember(stubs.coordinator, "g", "b", ["orders"])
    await converge(stubs, "g", [a])
    await converge(stubs, "g", [a, b])
    await b.leave()
    await converge(stubs, "g", [a])
    c = WireMember(stubs.coordinator, "g", "c", ["orders"])
    await converge(stubs, "g", [a, c])
    clock.advance(600)
    await a.heartbeat()
    clock.advance(600)  # c: 1200 ms without a heartbeat
    await service.coordinator.expire_due()
    await converge(stubs, "g", [a])
    await grow(stubs, "orders", 6)
    await converge(stubs, "g", [a])


#: What `_script` does to group g, in order.
SCRIPTED = [
    ("GROUP_CREATED", "heartbeat", ""),
    ("MEMBER_JOINED", "joined", "a"),
    ("GROUP_EPOCH_BUMPED", "member_joined", ""),
    ("TARGET_COMPUTED", "", ""),
    ("MEMBER_RECONCILED", "", "a"),
    ("GROUP_STABLE", "", ""),
    ("MEMBER_JOINED", "joined", "b"),
    ("GROUP_EPOCH_BUMPED", "member_joined", ""),
    ("TARGET_COMPUTED", "", ""),
    ("MEMBER_RECONCILED", "", "a"),  # a revoked what b gets,
    ("MEMBER_RECONCILED", "", "b"),  # then b received it
    ("GROUP_STABLE", "", ""),
    ("MEMBER_LEFT", "left", "b"),
    ("GROUP_EPOCH_BUMPED", "member_left", ""),
    ("TARGET_COMPUTED", "", ""),
    ("MEMBER_RECONCILED", "", "a"),
    ("GROUP_STABLE", "", ""),
    ("MEMBER_JOINED", "joined", "c"),
    ("GROUP_EPOCH_BUMPED", "member_joined", ""),
    ("TARGET_COMPUTED", "", ""),
    ("MEMBER_RECONCILED", "", "a"),
    ("MEMBER_RECONCILED", "", "c"),
    ("GROUP_STABLE", "", ""),
    ("SESSION_EXPIRED", "session_expired", "c"),
    ("GROUP_EPOCH_BUMPED", "session_expired", ""),
    ("TARGET_COMPUTED", "", ""),
    ("MEMBER_RECONCILED", "", "a"),
    ("GROUP_STABLE", "", ""),
    ("TOPIC_GROWN", "grown", ""),
    ("GROUP_EPOCH_BUMPED", "topics_changed", ""),
    ("TARGET_COMPUTED", "", ""),
    ("MEMBER_RECONCILED", "", "a"),
    ("GROUP_STABLE", "", ""),
]


async def test_a_scripted_sequence_yields_exactly_its_events_and_they_survive_a_restart(
    start_service: ServiceFactory,
) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, session_timeout_ms=1_000, heartbeat_interval_ms=100)
    await _script(service)
    found = await events(service.stubs, "g")
    assert names(found) == SCRIPTED
    sequences = [e.sequence for e in found]
    assert sequences == sorted(set(sequences))
    stamps = [e.timestamp_ms for e in found]
    assert stamps == sorted(stamps) and stamps[0] == clock.wall_ms() - 1_200 and stamps[-1] == clock.wall_ms()
    by_type = {T.Name(e.type).removeprefix("GROUP_EVENT_TYPE_"): e for e in found}
    assert (by_type["MEMBER_JOINED"].member_id, by_type["MEMBER_JOINED"].group_epoch) == ("c", 4)
    bumps = [
        (e.previous_group_epoch, e.group_epoch)
        for e in found
        if e.type == T.GROUP_EVENT_TYPE_GROUP_EPOCH_BUMPED
    ]
    assert bumps == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    grown = by_type["TOPIC_GROWN"]
    assert (grown.topic_name, grown.partition_count, grown.group_epoch) == ("orders", 6, 6)
    targets = [e for e in found if e.type == T.GROUP_EVENT_TYPE_TARGET_COMPUTED]
    assert [t.partitions_moved for t in targets] == [4, 2, 2, 2, 2, 2]
    assert {t.assignor for t in targets} == {"uniform"}
    assert by_type["SESSION_EXPIRED"].member_epoch == 4

    newest = await events(service.stubs, "g", oldest_first=False, limit=3)
    assert [e.sequence for e in newest] == sequences[::-1][:3]
    page = await service.stubs.admin.ListGroupEvents(
        admin_pb2.ListGroupEventsRequest(
            group_id="g", limit=5, oldest_first=True, after_sequence=sequences[9]
        )
    )
    assert [e.sequence for e in page.events] == sequences[10:15] and page.more
    only = await events(service.stubs, "g", types=[T.GROUP_EVENT_TYPE_MEMBER_JOINED])
    assert [e.member_id for e in only] == ["a", "b", "c"]

    await service.server.stop()
    again = await start_service(clock=ManualClock(), session_timeout_ms=1_000)
    assert await events(again.stubs, "g") == found


async def test_retention_keeps_the_newest_events_by_count_and_drops_old_ones_by_age(
    start_service: ServiceFactory,
) -> None:
    clock = ManualClock()
    service = await start_service(
        clock=clock, history_max_events=10, history_max_age_ms=60_000, session_timeout_ms=600_000
    )
    stubs = service.stubs
    await stubs.create_topic("orders", 4)
    members = [WireMember(stubs.coordinator, "g", f"m{i}", ["orders"]) for i in range(4)]
    for i in range(1, 5):  # each join makes several events: far more than 10 in all
        await converge(stubs, "g", members[:i])
    kept = await events(stubs, "g")
    # Trimmed once per tenth of the limit, so in every write that has events: never more.
    assert len(kept) == 10
    assert names(kept)[-1] == ("GROUP_STABLE", "", "")
    assert [e.member_id for e in kept if e.type == T.GROUP_EVENT_TYPE_MEMBER_JOINED] == ["m3"]
    total = (await service.coordinator.store.fetch("SELECT count(*) AS n FROM group_events"))[0]["n"]
    assert total == 10

    clock.advance(60_001)
    await members[0].leave()  # fresh events, at the new time
    await service.coordinator.sweep()
    left = await events(stubs, "g")
    assert left and all(e.timestamp_ms == clock.wall_ms() for e in left)
    assert names(left)[0] == ("MEMBER_LEFT", "left", "m0")


async def test_a_heartbeat_that_changes_nothing_stores_no_event(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    member = WireMember(service.stubs.coordinator, "g", "m", ["orders"])
    await converge(service.stubs, "g", [member])
    before = await events(service.stubs, "g")
    commits = service.coordinator.store.commits
    for _ in range(5):
        await member.heartbeat()
    assert service.coordinator.store.commits == commits
    assert await events(service.stubs, "g") == before


async def test_client_side_installs_and_refusals_are_in_the_history(service: Service) -> None:
    topic = await service.stubs.create_topic("orders", 2)
    member = ClientSideMember(service.stubs, "g", "A", ["orders"])
    await member.heartbeat()
    await member.heartbeat()
    assert member.compute
    prepared = await member.prepare()
    refused = await member.install(prepared.group_epoch, {"A": {topic: [0]}})  # partition 1 missing
    assert refused.error_code == common_pb2.INVALID_ASSIGNMENT
    installed = await member.install(prepared.group_epoch, {"A": {topic: [0, 1]}})
    assert installed.error_code == common_pb2.NONE, installed.error_message
    found = await events(service.stubs, "g")
    refusal = [e for e in found if e.type == T.GROUP_EVENT_TYPE_ASSIGNMENT_REFUSED]
    assert [(e.reason, e.member_id) for e in refusal] == [("invalid_assignment", "A")]
    assert "neither assigned nor held back" in refusal[0].message
    install = [e for e in found if e.type == T.GROUP_EVENT_TYPE_ASSIGNMENT_INSTALLED]
    assert [(e.member_id, e.assignor, e.group_epoch) for e in install] == [("A", "x", prepared.group_epoch)]
    assert found.index(refusal[0]) < found.index(install[0])


async def test_bad_history_requests_get_precise_errors(service: Service) -> None:
    admin = service.stubs.admin
    Req = admin_pb2.ListGroupEventsRequest
    cases = {
        "limit": Req(group_id="g", limit=-1),
        "at most": Req(group_id="g", limit=10_001),
        "after_sequence": Req(group_id="g", after_sequence=-5),
        "types": Req(group_id="g", types=[99]),
    }
    for expected, request in cases.items():
        response = await admin.ListGroupEvents(request)
        assert response.error_code == common_pb2.INVALID_REQUEST, request
        assert expected in response.error_message
    bad_id = await admin.ListGroupEvents(Req(group_id=""))
    assert (bad_id.error_code, bad_id.error_message) == (
        common_pb2.INVALID_REQUEST,
        "GroupId can't be empty.",
    )
    stream = admin.WatchGroup(admin_pb2.WatchGroupRequest(group_id="g", history=5_000))
    only = [m async for m in stream]
    assert len(only) == 1 and only[0].description.error_code == common_pb2.INVALID_REQUEST
    # A group that never existed has no history (and no error: it may be created later).
    assert (await admin.ListGroupEvents(Req(group_id="never"))).events == []


async def test_watch_group_sends_the_description_then_each_change(service: Service) -> None:
    stubs = service.stubs
    await stubs.create_topic("orders", 4)
    a = WireMember(stubs.coordinator, "g", "a", ["orders"])
    await converge(stubs, "g", [a])
    stream = stubs.admin.WatchGroup(admin_pb2.WatchGroupRequest(group_id="g", history=2, descriptions=True))
    first = await asyncio.wait_for(stream.read(), 5)
    assert first.description.group_state == "Stable"
    assert [m.member_id for m in first.description.members] == ["a"]
    assert names(list(first.events)) == [("MEMBER_RECONCILED", "", "a"), ("GROUP_STABLE", "", "")]

    b = WireMember(stubs.coordinator, "g", "b", ["orders"])
    await converge(stubs, "g", [a, b])
    seen: list[admin_pb2.GroupEvent] = []
    last = first
    while not seen or names(seen)[-1] != ("GROUP_STABLE", "", ""):
        last = await asyncio.wait_for(stream.read(), 5)
        seen += last.events
    assert names(seen)[:2] == [("MEMBER_JOINED", "joined", "b"), ("GROUP_EPOCH_BUMPED", "member_joined", "")]
    assert [e.sequence for e in seen] == sorted({e.sequence for e in seen})
    assert seen[0].sequence > first.events[-1].sequence
    assert seen == (await events(stubs, "g", after_sequence=first.events[-1].sequence))
    assert last.description.group_state == "Stable"
    assert [m.member_id for m in last.description.members] == ["a", "b"]
    stream.cancel()
    for _ in range(50):
        if service.coordinator.history.count() == 0:
            break
        await asyncio.sleep(0.02)
    assert service.coordinator.history.count() == 0


async def test_watching_a_group_not_created_yet_reports_it_once_it_is(service: Service) -> None:
    stubs = service.stubs
    await stubs.create_topic("orders", 1)
    stream = stubs.admin.WatchGroup(admin_pb2.WatchGroupRequest(group_id="later"))
    first = await asyncio.wait_for(stream.read(), 5)
    assert first.description.error_code == common_pb2.GROUP_ID_NOT_FOUND
    await WireMember(stubs.coordinator, "later", "m", ["orders"]).heartbeat()
    created = await asyncio.wait_for(stream.read(), 5)
    assert names(list(created.events))[:2] == [
        ("GROUP_CREATED", "heartbeat", ""),
        ("MEMBER_JOINED", "joined", "m"),
    ]
    assert not created.HasField("description")  # descriptions were not asked for
    stream.cancel()


async def test_a_stopping_server_ends_its_watches(start_service: ServiceFactory) -> None:
    """It hands its shards over as it stops: its watchers are told to find the new owner."""
    service = await start_service()
    await service.stubs.create_topic("orders", 1)
    await WireMember(service.stubs.coordinator, "g", "m", ["orders"]).heartbeat()
    stream = service.stubs.admin.WatchGroup(admin_pb2.WatchGroupRequest(group_id="g"))
    await asyncio.wait_for(stream.read(), 5)
    await service.server.stop()
    last = await asyncio.wait_for(stream.read(), 5)
    assert last.description.error_code == common_pb2.NOT_COORDINATOR
    assert "no longer serves" in last.description.error_message


async def test_the_python_admin_client_reads_history_drains_and_resets(service: Service) -> None:
    """GroupAdmin.group_events / drain_member / reset_offsets, async and sync."""
    address = f"127.0.0.1:{service.server.port}"
    stubs = service.stubs
    await stubs.create_topic("orders", 2)
    a = WireMember(stubs.coordinator, "g", "a", ["orders"])
    b = WireMember(stubs.coordinator, "g", "b", ["orders"])
    await converge(stubs, "g", [a, b])
    async with GroupAdmin(address) as admin:
        newest = await admin.group_events("g", limit=2)
        assert [T.Name(e.type) for e in newest] == [
            "GROUP_EVENT_TYPE_GROUP_STABLE",
            "GROUP_EVENT_TYPE_MEMBER_RECONCILED",
        ]
        assert await admin.drain_member("g", member_id="b") == "DRAINING"
        await converge(stubs, "g", [a, b])
        assert await admin.drain_member("g", member_id="b") == "DRAINED"
        with pytest.raises(RegroupError) as refused:
            await admin.drain_member("g", member_id="nobody")
        assert refused.value.code == common_pb2.UNKNOWN_MEMBER_ID
        with pytest.raises(RegroupError) as busy:
            await admin.reset_offsets("g", ["orders"], to_offset=5)
        assert busy.value.code == common_pb2.NON_EMPTY_GROUP
    await a.leave()
    await b.leave()

    def sync_calls() -> None:
        with SyncGroupAdmin(address) as admin:
            plan = admin.reset_offsets("g", {"orders": [0]}, to_offset=7, dry_run=True)
            assert not plan.applied and [(p.partition, p.new_offset) for p in plan.partitions] == [(0, 7)]
            assert admin.fetch_offsets("g") == {}
            done = admin.reset_offsets("g", ["orders"], to_offset=7)
            assert done.applied and admin.fetch_offsets("g") == {("orders", 0): 7, ("orders", 1): 7}
            kinds = [T.Name(e.type) for e in admin.group_events("g", limit=1_000, oldest_first=True)]
            assert kinds.count("GROUP_EVENT_TYPE_MEMBER_DRAINED") == 1
            assert kinds[-1] == "GROUP_EVENT_TYPE_OFFSETS_RESET"

    await asyncio.to_thread(sync_calls)


async def test_topics_created_and_deleted_under_a_subscription_are_named(service: Service) -> None:
    stubs = service.stubs
    await stubs.create_topic("orders", 2)
    member = WireMember(stubs.coordinator, "g", "m", ["orders", "later"])  # "later" does not exist yet
    await converge(stubs, "g", [member])
    await stubs.create_topic("unrelated", 1)  # no subscriber: no event in g
    await stubs.create_topic("later", 3)
    await converge(stubs, "g", [member])
    gone = await stubs.admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["later"]))
    assert gone.topics[0].error_code == common_pb2.NONE
    await converge(stubs, "g", [member])
    found = await events(stubs, "g")
    topical = [
        (T.Name(e.type).removeprefix("GROUP_EVENT_TYPE_"), e.topic_name, e.partition_count)
        for e in found
        if e.topic_name
    ]
    assert topical == [("TOPIC_CREATED", "later", 3), ("TOPIC_DELETED", "later", 0)]
    bumps = [e.reason for e in found if e.type == T.GROUP_EVENT_TYPE_GROUP_EPOCH_BUMPED]
    assert bumps == ["member_joined", "topics_changed", "topics_changed"]
    assert len(member.partitions()) == 2
