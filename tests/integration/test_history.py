"""Group history through the real server: ListGroupEvents and WatchGroup (issue 23).

A scripted sequence of joins, leaves, an expiry, topic changes and client-side
installs yields exactly the expected events, with their reasons, in order; they
survive a restart; retention drops the oldest by count and by age; a heartbeat
that changes nothing stores no event; WatchGroup sends the description, then
the events as they are stored.
"""

from __future__ import annotations

from typing import Any

from regroup.server.clock import ManualClock
from regroup.v1 import admin_pb2, common_pb2
from tests.integration.conftest import Service, ServiceFactory
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
