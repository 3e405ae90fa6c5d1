"""Connect groups: connectors and tasks shared by workers, with the same epochs,
fencing and revoke-then-assign reconciliation as consumer groups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from regroup.client import ConnectorTaskId, ConnectWorker, GroupAdmin, MemberOptions, RegroupError
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.ownership import OwnershipRegistry
from tests.support.service import Service, ServiceFactory

# The tests that send ConnectGroupHeartbeat on service.stubs.coordinator also run with it
# going through a MemberStream (heartbeat_transports, conftest.py); the others drive workers
# of the client library, which opens its own stream, so a second run would add nothing.

FAST = {"heartbeat_interval_ms": 100, "session_timeout_ms": 1500}
CONNECTORS = {"A": 2, "B": 1}  # AC0, AT1, AT2, BC0, BT1 in the seed's notation
ALL = frozenset({"A", ConnectorTaskId("A", 0), ConnectorTaskId("A", 1), "B", ConnectorTaskId("B", 0)})


@pytest.fixture
async def fast(start_service: ServiceFactory) -> Service:
    return await start_service(**FAST)


class Workers:
    def __init__(self, service: Service, group: str = "connect-cluster") -> None:
        self.target = f"127.0.0.1:{service.server.port}"
        self.service = service
        self.group = group
        self.registry = OwnershipRegistry()
        self.workers: dict[str, ConnectWorker] = {}

    async def add(self, name: str, **join: Any) -> ConnectWorker:
        worker = ConnectWorker(
            self.target,
            listener=self.registry.listener(name),
            options=MemberOptions(client_id=name, session_safety_margin_ms=300),
        )
        join.setdefault("assignor", "uniform")
        await worker.join(self.group, url=f"http://{name}:8083", **join)
        self.workers[name] = worker
        return worker

    async def converged(
        self, expected: frozenset[Any] = ALL, timeout: float = 15
    ) -> dict[str, frozenset[Any]]:
        async with asyncio.timeout(timeout):
            while True:
                self.registry.assert_safe()
                held = {n: w.assignment().partitions for n, w in self.workers.items()}
                union = frozenset().union(*held.values()) if held else frozenset()
                group = await self.service.stubs.describe(self.group)
                if (
                    group.group_state == "Stable"
                    and union == expected
                    and sum(len(h) for h in held.values()) == len(expected)
                    and all(self.registry.held_by(n) == h for n, h in held.items())
                ):
                    return held
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        for worker in self.workers.values():
            await worker.abort()


@pytest.fixture
async def workers(fast: Service) -> AsyncIterator[Workers]:
    async with GroupAdmin(f"127.0.0.1:{fast.server.port}") as admin:
        assert await admin.put_connectors("connect-cluster", CONNECTORS) == 0  # no worker yet
    w = Workers(fast)
    yield w
    await w.close()


async def test_workers_share_connectors_and_tasks(workers: Workers) -> None:
    await workers.add("w1")
    held = await workers.converged()
    assert held["w1"] == ALL
    await workers.add("w2")
    held = await workers.converged()
    assert sorted(len(h) for h in held.values()) == [2, 3]
    group = await workers.service.stubs.describe("connect-cluster")
    assert group.group_type == "connect"
    assert [(c.name, c.tasks) for c in group.connectors] == [("A", 2), ("B", 1)]
    described = {m.url: m for m in group.members}
    assert set(described) == {"http://w1:8083", "http://w2:8083"}
    owned = described["http://w1:8083"].connect_assignment
    assert len(owned.connectors) + len(owned.tasks) in (2, 3)
    workers.registry.assert_safe()


async def test_put_connectors_bumps_the_epoch_and_reassigns(workers: Workers) -> None:
    await workers.add("w1")
    await workers.add("w2")
    await workers.converged()
    epoch = (await workers.service.stubs.describe("connect-cluster")).group_epoch
    async with GroupAdmin(workers.target) as admin:
        assert await admin.put_connectors("connect-cluster", {"A": 3, "C": 0}) == epoch + 1
        # Unchanged connectors: no bump.
        assert await admin.put_connectors("connect-cluster", {"C": 0, "A": 3}) == epoch + 1
    expected = frozenset({"A", "C", *(ConnectorTaskId("A", t) for t in range(3))})
    held = await workers.converged(expected)
    assert all("B" not in h and ConnectorTaskId("B", 0) not in h for h in held.values())


@pytest.mark.heartbeat_transports  # the same answers through a MemberStream (conftest.py)
async def test_put_connectors_refusals(fast: Service) -> None:
    async with GroupAdmin(f"127.0.0.1:{fast.server.port}") as admin:
        for bad in ({"": 1}, {"A": -1}, {"A": 10_001}, {"bad\nname": 1}):
            with pytest.raises(RegroupError) as refused:
                await admin.put_connectors("c", bad)
            assert refused.value.code == common_pb2.INVALID_REQUEST
        duplicate = admin_pb2.PutConnectorsRequest(
            group_id="c", connectors=[admin_pb2.ConnectorConfig(name="A", tasks=1)] * 2
        )
        response = await fast.stubs.admin.PutConnectors(duplicate)
        assert response.error_code == common_pb2.INVALID_REQUEST and "twice" in response.error_message
        await fast.stubs.create_topic("t", 1)
        consumer = coordinator_pb2.ConsumerGroupHeartbeatRequest(
            group_id="consumers",
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=common_pb2.StringList(values=["t"]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
        assert (await fast.stubs.coordinator.ConsumerGroupHeartbeat(consumer)).error_code == common_pb2.NONE
        with pytest.raises(RegroupError) as wrong_type:
            await admin.put_connectors("consumers", {"A": 1})
        assert wrong_type.value.code == common_pb2.GROUP_ID_NOT_FOUND
        connect = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id="consumers",
            member_id="w",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            url="u",
            owned=common_pb2.ConnectorsAndTasks(),
        )
        response = await fast.stubs.coordinator.ConnectGroupHeartbeat(connect)
        assert response.error_code == common_pb2.GROUP_ID_NOT_FOUND


async def test_connectors_and_assignments_survive_a_restart(start_service: ServiceFactory) -> None:
    first = await start_service(**FAST)
    w = Workers(first)
    async with GroupAdmin(w.target) as admin:
        await admin.put_connectors("connect-cluster", CONNECTORS)
    await w.add("w1")
    held = await w.converged()
    before = await first.stubs.describe("connect-cluster")
    await w.close()
    await first.server.stop()
    second = await start_service(**FAST)
    after = await second.stubs.describe("connect-cluster")
    assert after == before
    assert held["w1"] == ALL


@pytest.mark.heartbeat_transports  # the same answers through a MemberStream (conftest.py)
async def test_connect_installations_are_validated_by_connector_and_task(fast: Service) -> None:
    """A missing task, a duplicate, an unknown worker and a stale epoch: refused, nothing changed."""
    async with GroupAdmin(f"127.0.0.1:{fast.server.port}") as admin:
        await admin.put_connectors("c", {"A": 2})
    stub = fast.stubs.coordinator
    join = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="c",
        member_id="w1",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        url="http://w1",
        owned=common_pb2.ConnectorsAndTasks(),
        client_assignors=common_pb2.ClientAssignorList(
            assignors=[common_pb2.ClientAssignor(name="eager", minimum_version=0, maximum_version=0)]
        ),
    )
    joined = await stub.ConnectGroupHeartbeat(join)
    assert joined.error_code == common_pb2.COMPUTE_ASSIGNMENT, joined.error_message
    prepared = await stub.PrepareAssignment(
        coordinator_pb2.PrepareAssignmentRequest(
            group_id="c", member_id="w1", member_epoch=joined.member_epoch
        )
    )
    assert prepared.group_type == "connect"
    assert [(c.name, c.tasks) for c in prepared.connectors] == [("A", 2)]

    def install(members: dict[str, tuple[list[str], list[int]]], epoch: int) -> Any:
        request = coordinator_pb2.InstallAssignmentRequest(
            group_id="c", member_id="w1", member_epoch=joined.member_epoch, group_epoch=epoch
        )
        for member_id, (connectors, tasks) in members.items():
            request.members.add(member_id=member_id).connect_assignment.CopyFrom(
                common_pb2.ConnectorsAndTasks(
                    connectors=connectors,
                    tasks=[common_pb2.ConnectorTaskId(connector="A", task=t) for t in tasks],
                )
            )
        return stub.InstallAssignment(request)

    before = await fast.stubs.describe("c")
    epoch = prepared.group_epoch
    for case, members, at in [
        ("missing task", {"w1": (["A"], [0])}, epoch),
        ("duplicate task", {"w1": (["A"], [0, 1, 1])}, epoch),
        ("no such task", {"w1": (["A"], [0, 1, 2])}, epoch),
        ("unknown worker", {"w1": (["A"], [0]), "w9": ([], [1])}, epoch),
        ("stale group epoch", {"w1": (["A"], [0, 1])}, epoch - 1),
    ]:
        response = await install(members, at)
        assert response.error_code == common_pb2.INVALID_ASSIGNMENT, case
    assert await fast.stubs.describe("c") == before
    ok = await install({"w1": (["A"], [0, 1])}, epoch)
    assert ok.error_code == common_pb2.NONE, ok.error_message


async def test_sync_connect_workers_from_threads(workers: Workers) -> None:
    from regroup.client import SyncConnectWorker
    from regroup.client.assignors import EagerAssignor

    def scenario() -> list[frozenset[Any]]:
        registry = workers.registry
        with (
            SyncConnectWorker(workers.target, listener=registry.listener("s1")) as s1,
            SyncConnectWorker(workers.target, listener=registry.listener("s2")) as s2,
        ):
            s1.join("eager-cluster", url="http://s1", client_assignors=[EagerAssignor()])
            s2.join("eager-cluster", url="http://s2", client_assignors=[EagerAssignor()])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                held = [s.assignment().partitions for s in (s1, s2)]
                if held[0] | held[1] == ALL and held[0] and held[1]:
                    return held
                time.sleep(0.05)
            raise AssertionError(f"no convergence: {[s.assignment() for s in (s1, s2)]}")

    async with GroupAdmin(workers.target) as admin:
        await admin.put_connectors("eager-cluster", CONNECTORS)
    held = await asyncio.to_thread(scenario)
    assert held[0] | held[1] == ALL
    # Safety from the callbacks' own timeline: two snapshots taken in turn may straddle a handover.
    workers.registry.assert_safe()


async def test_put_connectors_creates_the_group_and_deleting_it_removes_them(fast: Service) -> None:
    async with GroupAdmin(f"127.0.0.1:{fast.server.port}") as admin:
        assert await admin.put_connectors("fresh", CONNECTORS) == 0
        group = await fast.stubs.describe("fresh")
        assert group.error_code == common_pb2.NONE, group.error_message
        assert (group.group_type, group.group_state, group.group_epoch) == ("connect", "Empty", 0)
        assert [(c.name, c.tasks) for c in group.connectors] == [("A", 2), ("B", 1)]
        assert [(g.group_id, g.group_state) for g in await admin.list_groups(types=["connect"])] == [
            ("fresh", "Empty")
        ]

        await admin.delete_group("fresh")
        assert (await fast.stubs.describe("fresh")).error_code == common_pb2.GROUP_ID_NOT_FOUND
        rows = await fast.coordinator.store.fetch("SELECT * FROM connectors WHERE group_id = 'fresh'")
        assert rows == []
        # A group created again under the id starts without the deleted group's connectors.
        assert await admin.put_connectors("fresh", {}) == 0
        assert list((await fast.stubs.describe("fresh")).connectors) == []


async def test_connectors_set_before_any_worker_survive_a_restart(start_service: ServiceFactory) -> None:
    first = await start_service(**FAST)
    async with GroupAdmin(f"127.0.0.1:{first.server.port}") as admin:
        await admin.put_connectors("early", CONNECTORS)
    await first.server.stop()
    second = await start_service(**FAST)
    group = await second.stubs.describe("early")
    assert (group.group_state, [(c.name, c.tasks) for c in group.connectors]) == (
        "Empty",
        [("A", 2), ("B", 1)],
    )
    w = Workers(second, group="early")
    try:
        await w.add("w1")
        assert (await w.converged())["w1"] == ALL
    finally:
        await w.close()
