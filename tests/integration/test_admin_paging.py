"""ListGroups and DescribeTopics page their results (AIP-158) instead of failing past the size limit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from regroup.client import GroupAdmin, SyncGroupAdmin
from regroup.v1 import admin_pb2, common_pb2
from tests.support.service import Service, ServiceFactory
from tests.support.wire import Stubs, WireMember

#: The smallest limit a test server runs with; every response must stay under it.
SMALL_LIMIT = 4 * 1024


async def _empty_groups(stubs: Stubs, group_ids: list[str]) -> None:
    """Consumer groups that a member joined and left: Empty, and so deletable."""
    for group_id in group_ids:
        member = WireMember(stubs.coordinator, group_id, "m", ["orders"])
        await member.heartbeat()
        await member.leave()


async def _busy_groups(stubs: Stubs, group_ids: list[str]) -> None:
    """Consumer groups with a member in them: not Empty."""
    for group_id in group_ids:
        await WireMember(stubs.coordinator, group_id, "m", ["orders"]).heartbeat()


async def _pages(call: Callable[[Any], Awaitable[Any]], request: Any) -> list[Any]:
    """Every page of a listing from `request` on, following next_page_token."""
    pages = []
    while True:
        page = await call(request)
        assert page.error_code == common_pb2.NONE, page.error_message
        pages.append(page)
        if not page.next_page_token:
            return pages
        request.page_token = page.next_page_token


async def _list_pages(stubs: Stubs, **fields: Any) -> list[admin_pb2.ListGroupsResponse]:
    return await _pages(stubs.admin.ListGroups, admin_pb2.ListGroupsRequest(**fields))


async def _describe_pages(stubs: Stubs, **fields: Any) -> list[admin_pb2.DescribeTopicsResponse]:
    return await _pages(stubs.admin.DescribeTopics, admin_pb2.DescribeTopicsRequest(**fields))


async def test_groups_page_in_id_order_each_exactly_once_with_filters(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    ids = [f"g{i:02d}" for i in range(11)]
    await _empty_groups(service.stubs, ids[::2])
    await _busy_groups(service.stubs, ids[1::2])

    pages = await _list_pages(service.stubs, page_size=3)
    assert [len(p.groups) for p in pages] == [3, 3, 3, 2]
    assert [g.group_id for p in pages for g in p.groups] == ids
    # Filters apply before paging: full pages of matching groups only.
    empty = await _list_pages(service.stubs, page_size=2, states_filter=["EMPTY"])
    assert [len(p.groups) for p in empty] == [2, 2, 2]
    assert [g.group_id for p in empty for g in p.groups] == ids[::2]
    # Without page_size, the default page holds all eleven.
    (everything,) = await _list_pages(service.stubs)
    assert [g.group_id for g in everything.groups] == ids


async def test_groups_created_or_deleted_between_pages_neither_repeat_nor_hide_others(
    service: Service,
) -> None:
    await service.stubs.create_topic("orders", 1)
    await _empty_groups(service.stubs, ["b", "d", "f", "h", "j"])
    first = await service.stubs.admin.ListGroups(admin_pb2.ListGroupsRequest(page_size=2))
    assert [g.group_id for g in first.groups] == ["b", "d"]

    # Between pages: delete one already listed and one still ahead; create one behind
    # the cursor, one ahead of it, and one right after the cursor's key.
    deleted = await service.stubs.admin.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=["b", "h"]))
    assert [r.error_code for r in deleted.results] == [common_pb2.NONE, common_pb2.NONE]
    await _empty_groups(service.stubs, ["a", "d0", "g"])

    rest = await _list_pages(service.stubs, page_size=2, page_token=first.next_page_token)
    assert [g.group_id for p in rest for g in p.groups] == ["d0", "f", "g", "j"]


async def test_bad_page_size_and_tokens_answer_invalid_request(service: Service) -> None:
    await service.stubs.create_topic("orders", 1)
    await _empty_groups(service.stubs, ["a", "b", "c"])
    admin = service.stubs.admin

    negative = await admin.ListGroups(admin_pb2.ListGroupsRequest(page_size=-1))
    assert (negative.error_code, negative.error_message) == (
        common_pb2.INVALID_REQUEST,
        "page_size must not be negative (got -1).",
    )
    assert list(negative.groups) == []
    for token in ("garbage", "eyJ2IjoxfQ", "x" * 10_000):
        malformed = await admin.ListGroups(admin_pb2.ListGroupsRequest(page_token=token))
        assert malformed.error_code == common_pb2.INVALID_REQUEST
        assert "page_token is not a page token of ListGroups" in malformed.error_message

    first = await admin.ListGroups(admin_pb2.ListGroupsRequest(page_size=1, states_filter=["empty"]))
    assert first.next_page_token
    # The same filters in another spelling are the same listing.
    same = await admin.ListGroups(
        admin_pb2.ListGroupsRequest(states_filter=["EMPTY"], page_token=first.next_page_token)
    )
    assert [g.group_id for g in same.groups] == ["b", "c"]
    other = await admin.ListGroups(admin_pb2.ListGroupsRequest(page_token=first.next_page_token))
    assert other.error_code == common_pb2.INVALID_REQUEST
    assert "other states_filter or types_filter" in other.error_message
    # A token of one method is refused by the other.
    topics = await admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(page_token=first.next_page_token))
    assert topics.error_code == common_pb2.INVALID_REQUEST
    assert "not a page token of DescribeTopics" in topics.error_message
    negative_topics = await admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(names=["a"], page_size=-5))
    assert (negative_topics.error_code, list(negative_topics.topics)) == (common_pb2.INVALID_REQUEST, [])

    named = await admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(names=["orders", "x"], page_size=1))
    assert named.next_page_token
    other_names = await admin.DescribeTopics(
        admin_pb2.DescribeTopicsRequest(names=["orders", "y"], page_token=named.next_page_token)
    )
    assert other_names.error_code == common_pb2.INVALID_REQUEST
    assert "other names" in other_names.error_message


async def test_topics_page_by_name_and_named_topics_page_in_request_order(service: Service) -> None:
    names = [f"t{i:02d}" for i in range(7)]
    for name in reversed(names):
        await service.stubs.create_topic(name, 2)

    pages = await _describe_pages(service.stubs, page_size=3)
    assert [len(p.topics) for p in pages] == [3, 3, 1]
    assert [t.name for p in pages for t in p.topics] == names

    asked = ["t05", "nope", "t01", "t05", "t" * 300]
    named = await _describe_pages(service.stubs, names=asked, page_size=2)
    assert [len(p.topics) for p in named] == [2, 2, 1]
    results = [t for p in named for t in p.topics]
    assert [(t.name[:5], t.error_code) for t in results] == [
        ("t05", common_pb2.NONE),
        ("nope", common_pb2.UNKNOWN_TOPIC_OR_PARTITION),
        ("t01", common_pb2.NONE),
        ("t05", common_pb2.NONE),
        ("ttttt", common_pb2.INVALID_TOPIC_EXCEPTION),
    ]
    # Without page_size, named topics come in one response, as before paging.
    (one,) = await _describe_pages(service.stubs, names=asked)
    assert list(one.topics) == results


async def test_a_small_size_limit_pages_every_listing_within_it(start_service: ServiceFactory) -> None:
    service = await start_service(max_message_bytes=SMALL_LIMIT)
    stubs = service.stubs
    await stubs.create_topic("orders", 1)
    ids = [f"group-with-a-rather-long-identifier-{i:03d}" for i in range(120)]
    await _empty_groups(stubs, ids)
    racks = [f"rack-{p:02d}" for p in range(24)]
    names = [f"topic-{i:02d}" for i in range(30)]
    for name in names:
        created = await stubs.admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name=name, num_partitions=len(racks), partition_racks=racks)]
            )
        )
        assert created.topics[0].error_code == common_pb2.NONE

    groups = await _list_pages(stubs, page_size=10_000)
    assert [g.group_id for p in groups for g in p.groups] == ids
    assert len(groups) > 1 and all(p.ByteSize() <= SMALL_LIMIT for p in groups)
    # All at once the listing would not fit.
    whole = admin_pb2.ListGroupsResponse(groups=[g for p in groups for g in p.groups])
    assert whole.ByteSize() > SMALL_LIMIT

    topics = await _describe_pages(stubs)
    assert [t.name for p in topics for t in p.topics] == ["orders", *names]
    assert all(list(t.partition_racks) == racks for p in topics for t in p.topics[1:])
    assert len(topics) > 1 and all(p.ByteSize() <= SMALL_LIMIT for p in topics)
    assert (
        admin_pb2.DescribeTopicsResponse(topics=[t for p in topics for t in p.topics]).ByteSize()
        > SMALL_LIMIT
    )
    named = await _describe_pages(stubs, names=names[::-1])
    assert [t.name for p in named for t in p.topics] == names[::-1]
    assert len(named) > 1 and all(p.ByteSize() <= SMALL_LIMIT for p in named)

    target = f"127.0.0.1:{service.server.port}"
    async with GroupAdmin(target) as admin:
        assert [g.group_id for g in await admin.list_groups()] == ids
        assert [g.group_id for g in await admin.list_groups(page_size=7, types=["consumer"])] == ids
        assert [t.name for t in await admin.describe_topics()] == ["orders", *names]
        assert [t.name for t in await admin.describe_topics(names[::-1], page_size=4)] == names[::-1]

    def sync_listings() -> tuple[list[str], list[str]]:
        with SyncGroupAdmin(target) as admin:
            return [g.group_id for g in admin.list_groups(page_size=9)], [
                t.name for t in admin.describe_topics()
            ]

    assert await asyncio.to_thread(sync_listings) == (ids, ["orders", *names])


async def test_a_topic_too_large_for_any_response_is_described_without_its_racks(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(max_message_bytes=SMALL_LIMIT)
    admin = service.stubs.admin
    await service.stubs.create_topic("a-small", 1)
    created = await admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name="huge", num_partitions=1, partition_racks=["r" * 255])]
        )
    )
    assert created.topics[0].error_code == common_pb2.NONE
    # Each call fits in a request; together their racks do not fit in a response.
    for count in (13, 25, 37):
        grown = await admin.CreatePartitions(
            admin_pb2.CreatePartitionsRequest(
                topics=[
                    admin_pb2.CreatePartitionsRequest.Topic(
                        name="huge", count=count, new_partition_racks=["r" * 255] * 12
                    )
                ]
            )
        )
        assert grown.topics[0].error_code == common_pb2.NONE, grown.topics[0].error_message
    await service.stubs.create_topic("z-small", 1)

    pages = await _describe_pages(service.stubs)
    results = [t for p in pages for t in p.topics]
    assert [(t.name, t.error_code, t.num_partitions) for t in results] == [
        ("a-small", common_pb2.NONE, 1),
        ("huge", common_pb2.MESSAGE_TOO_LARGE, 37),
        ("z-small", common_pb2.NONE, 1),
    ]
    huge = results[1]
    assert huge.topic_id and list(huge.partition_racks) == []
    assert "partition_racks left out" in huge.error_message
    assert all(p.ByteSize() <= SMALL_LIMIT for p in pages)

    (named,) = await _describe_pages(service.stubs, names=["huge", "a-small"])
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("huge", common_pb2.MESSAGE_TOO_LARGE),
        ("a-small", common_pb2.NONE),
    ]
