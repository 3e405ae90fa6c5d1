"""CoordinatorRouter and the routing of one group call, without I/O: fake channels,
and the `routed` generator driven by hand."""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import grpc
import pytest

from regroup.client import RegroupError
from regroup.client.routing import (
    CoordinatorRouter,
    Find,
    GroupCall,
    Send,
    Sleep,
    backoff_s,
    routed,
    single,
)
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2


class FakeChannel:
    """Enough of a channel for the generated stubs to be built on it."""

    def __init__(self, address: str) -> None:
        self.address = address

    def unary_unary(self, *args: Any, **kwargs: Any) -> None:
        return None

    def stream_stream(self, *args: Any, **kwargs: Any) -> None:
        return None

    def unary_stream(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"FakeChannel({self.address})"


class Opener:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, address: str) -> FakeChannel:
        self.opened.append(address)
        return FakeChannel(address)


def router(*, connect: bool = True) -> tuple[CoordinatorRouter[FakeChannel], Opener]:
    opener = Opener()
    bootstrap = FakeChannel("boot:1")
    routes = CoordinatorRouter(bootstrap, bootstrap_address="boot:1", connect=opener if connect else None)
    return routes, opener


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="test")


def test_a_group_goes_to_the_bootstrap_address_until_told_otherwise() -> None:
    r, opener = router()
    assert r.route("g") is r.bootstrap and r.address("g") is None
    assert r.follow("g", "owner:2")
    assert r.route("g").address == "owner:2" and r.route("g").channel.address == "owner:2"
    assert r.route("other") is r.bootstrap  # per group
    # One channel per address, shared by the groups there.
    r.follow("h", "owner:2")
    assert r.route("h") is r.route("g")
    assert opener.opened == ["owner:2"]
    # The bootstrap address named back means the bootstrap channel.
    r.follow("g", "boot:1")
    assert r.route("g") is r.bootstrap
    r.reset("h")
    assert r.route("h") is r.bootstrap
    channels = r.take_channels()
    assert [c.address for c in channels] == ["owner:2"]
    assert r.take_channels() == []


def test_not_coordinator_follows_the_address_or_asks_find_coordinator() -> None:
    r, _ = router()
    assert r.not_coordinator("g", "owner:2") == "retry"
    assert r.address("g") == "owner:2"
    # No address: back to the bootstrap address, and look the owner up there.
    assert r.not_coordinator("g", "") == "find"
    assert r.address("g") is None
    r.find_failed("g", grpc.StatusCode.UNIMPLEMENTED)
    assert not r.find_supported
    assert r.not_coordinator("g", "") == "retry"


def test_without_a_way_to_open_channels_the_group_stays_on_the_bootstrap_channel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r, _ = router(connect=False)
    with caplog.at_level(logging.WARNING, "regroup.client"):
        assert r.not_coordinator("g", "owner:2") == "stuck"
        assert r.not_coordinator("h", "owner:2") == "stuck"
    assert r.route("g") is r.bootstrap
    assert len([m for m in caplog.messages if "no channel_factory" in m]) == 1  # warned once


def test_an_unreachable_followed_address_sends_its_groups_back_to_the_bootstrap() -> None:
    r, _ = router()
    r.follow("g", "owner:2")
    r.follow("h", "owner:2")
    r.follow("k", "other:3")
    owner = r.route("g")
    assert r.unreachable(["g", "k"], owner, grpc.StatusCode.UNAVAILABLE)
    assert r.address("g") is None
    assert r.address("h") == "owner:2"  # not part of that call: it finds out by itself
    assert r.address("k") == "other:3"  # followed elsewhere meanwhile: kept
    r.follow("g", "owner:2")
    assert r.unreachable(["g"], owner, grpc.StatusCode.DEADLINE_EXCEEDED)
    r.follow("g", "owner:2")
    # Other statuses say nothing about the address; the bootstrap is never left.
    assert not r.unreachable(["g"], owner, grpc.StatusCode.INVALID_ARGUMENT)
    assert r.address("g") == "owner:2"
    assert not r.unreachable(["x"], r.bootstrap, grpc.StatusCode.UNAVAILABLE)


def test_find_coordinator_answers() -> None:
    r, _ = router()
    r.found("g", coordinator_pb2.FindCoordinatorResponse(address="owner:2", replica_id="r2", shard=3))
    assert r.address("g") == "owner:2"
    # Nobody holds the shard right now: the group stays where it is.
    r.found("g", coordinator_pb2.FindCoordinatorResponse(error_code=common_pb2.COORDINATOR_NOT_AVAILABLE))
    assert r.address("g") == "owner:2"
    r.find_failed("g", grpc.StatusCode.UNAVAILABLE)
    assert r.find_supported and r.address("g") == "owner:2"


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    for failures, base in [(1, 0.1), (2, 0.2), (3, 0.4), (10, 1.0), (100, 1.0)]:
        assert base * 0.8 <= backoff_s(failures, 100, 1_000) <= base * 1.2


# -- routed ------------------------------------------------------------------------


def describe(*group_ids: str) -> GroupCall:
    return GroupCall(
        "admin",
        "DescribeGroups",
        group_ids,
        lambda ids: admin_pb2.DescribeGroupsRequest(group_ids=ids),
        lambda r: r.groups,
        lambda groups: admin_pb2.DescribeGroupsResponse(groups=groups),
    )


def group(group_id: str, code: int = common_pb2.NONE, address: str = "") -> admin_pb2.DescribedGroup:
    return admin_pb2.DescribedGroup(
        group_id=group_id, group_state="Stable", error_code=code, coordinator_address=address
    )


def start(steps: Generator[Any, Any, Any]) -> Any:
    return next(steps)


def finish(steps: Generator[Any, Any, Any], value: Any) -> Any:
    with pytest.raises(StopIteration) as done:
        steps.send(value)
    return done.value.value


def test_routed_sends_each_group_to_its_coordinator_and_puts_the_answers_back_in_order() -> None:
    r, _ = router()
    r.follow("b", "owner:2")
    steps = routed(r, describe("a", "b", "c"), timeout=5, backoff_ms=1, backoff_max_ms=1)
    first = start(steps)
    assert isinstance(first, Send) and first.endpoint is r.bootstrap
    assert list(first.request.group_ids) == ["a", "c"]
    second = steps.send(admin_pb2.DescribeGroupsResponse(groups=[group("a"), group("c")]))
    assert isinstance(second, Send) and second.endpoint.address == "owner:2"
    assert list(second.request.group_ids) == ["b"]
    response = finish(steps, admin_pb2.DescribeGroupsResponse(groups=[group("b")]))
    assert [g.group_id for g in response.groups] == ["a", "b", "c"]


def test_routed_follows_not_coordinator_after_a_backoff() -> None:
    r, _ = router()
    steps = routed(r, describe("a", "b"), timeout=5, backoff_ms=10, backoff_max_ms=10)
    start(steps)
    refused = admin_pb2.DescribeGroupsResponse(
        groups=[group("a"), group("b", common_pb2.NOT_COORDINATOR, "owner:2")]
    )
    sleep = steps.send(refused)
    assert isinstance(sleep, Sleep) and 0.008 <= sleep.seconds <= 0.012
    again = steps.send(None)
    assert isinstance(again, Send) and again.endpoint.address == "owner:2"
    assert list(again.request.group_ids) == ["b"]
    response = finish(steps, admin_pb2.DescribeGroupsResponse(groups=[group("b")]))
    assert [(g.group_id, g.error_code) for g in response.groups] == [("a", 0), ("b", 0)]


def test_routed_asks_find_coordinator_when_the_refusal_names_nobody() -> None:
    r, _ = router()
    call = single("coordinator", "OffsetFetch", "g", coordinator_pb2.OffsetFetchRequest(group_id="g"))
    steps = routed(r, call, timeout=5, backoff_ms=1, backoff_max_ms=1)
    start(steps)
    refused = coordinator_pb2.OffsetFetchResponse(error_code=common_pb2.NOT_COORDINATOR)
    assert isinstance(steps.send(refused), Sleep)
    find = steps.send(None)
    assert isinstance(find, Find) and find.group_id == "g" and 0 < find.timeout <= 5
    r.follow("g", "owner:2")  # what the driver does with FindCoordinator's answer
    again = steps.send(None)
    assert isinstance(again, Send) and again.endpoint.address == "owner:2"
    response = finish(steps, coordinator_pb2.OffsetFetchResponse())
    assert response.error_code == common_pb2.NONE


def test_routed_goes_back_to_the_bootstrap_when_a_followed_address_is_unreachable() -> None:
    r, _ = router()
    r.follow("g", "owner:2")
    call = single("coordinator", "OffsetFetch", "g", coordinator_pb2.OffsetFetchRequest(group_id="g"))
    steps = routed(r, call, timeout=5, backoff_ms=1, backoff_max_ms=1)
    assert start(steps).endpoint.address == "owner:2"
    assert isinstance(steps.throw(rpc_error(grpc.StatusCode.UNAVAILABLE)), Sleep)
    again = steps.send(None)
    assert isinstance(again, Send) and again.endpoint is r.bootstrap
    assert finish(steps, coordinator_pb2.OffsetFetchResponse()).error_code == common_pb2.NONE


def test_routed_raises_what_is_not_about_routing() -> None:
    r, _ = router()
    r.follow("g", "owner:2")
    call = single("coordinator", "OffsetFetch", "g", coordinator_pb2.OffsetFetchRequest(group_id="g"))
    steps = routed(r, call, timeout=5, backoff_ms=1, backoff_max_ms=1)
    start(steps)
    with pytest.raises(grpc.aio.AioRpcError):
        steps.throw(rpc_error(grpc.StatusCode.PERMISSION_DENIED))
    # Nor is the bootstrap address ever given up.
    steps = routed(r, describe("x"), timeout=5, backoff_ms=1, backoff_max_ms=1)
    start(steps)
    with pytest.raises(grpc.aio.AioRpcError):
        steps.throw(rpc_error(grpc.StatusCode.UNAVAILABLE))


def test_routed_gives_up_after_its_rounds_with_the_last_answer() -> None:
    r, _ = router()
    steps = routed(r, describe("g"), timeout=5, backoff_ms=1, backoff_max_ms=1, max_rounds=2)
    step = start(steps)
    sends = 0
    while isinstance(step, Send | Sleep):
        if isinstance(step, Sleep):
            step = steps.send(None)
            continue
        sends += 1
        # Two replicas that each name the other (a stale view during a takeover).
        other = "owner:3" if step.endpoint.address == "owner:2" else "owner:2"
        refused = admin_pb2.DescribeGroupsResponse(groups=[group("g", common_pb2.NOT_COORDINATOR, other)])
        try:
            step = steps.send(refused)
        except StopIteration as done:
            response = done.value
            break
    assert sends == 3
    assert response.groups[0].error_code == common_pb2.NOT_COORDINATOR


def test_routed_does_not_retry_what_it_cannot_follow() -> None:
    r, _ = router(connect=False)
    steps = routed(r, describe("g"), timeout=5, backoff_ms=1, backoff_max_ms=1)
    start(steps)
    refused = admin_pb2.DescribeGroupsResponse(groups=[group("g", common_pb2.NOT_COORDINATOR, "owner:2")])
    response = finish(steps, refused)
    assert response.groups[0].error_code == common_pb2.NOT_COORDINATOR


def test_routed_refuses_an_answer_without_one_result_per_group() -> None:
    r, _ = router()
    steps = routed(r, describe("a", "b"), timeout=5, backoff_ms=1, backoff_max_ms=1)
    start(steps)
    with pytest.raises(RegroupError, match="1 results for 2 groups"):
        steps.send(admin_pb2.DescribeGroupsResponse(groups=[group("a")]))
