"""Client-side assignment with the real client: the seed's Connect case studies
with the incremental cooperative assignor, and a consumer group run entirely on
the client-side uniform assignor."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from regroup.client import ConnectorTaskId, ConnectWorker, GroupAdmin, GroupMember, MemberOptions
from regroup.client.assignors import IncrementalCooperativeAssignor, UniformAssignor
from regroup.client.assignors.base import AssignmentPlan, GroupSnapshot
from tests.support.ownership import OwnershipRegistry
from tests.support.service import Service, ServiceFactory

DELAY_MS = 2_000
FAST = {"heartbeat_interval_ms": 100, "session_timeout_ms": 1000}
A = {"A", ConnectorTaskId("A", 0), ConnectorTaskId("A", 1)}
B = {"B", ConnectorTaskId("B", 0)}
ALL = frozenset(A | B)


class Cluster:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.target = f"127.0.0.1:{service.server.port}"
        self.registry = OwnershipRegistry()
        self.workers: dict[str, ConnectWorker] = {}

    async def start(self, name: str, url: str | None = None) -> ConnectWorker:
        worker = ConnectWorker(
            self.target,
            listener=self.registry.listener(name),
            options=MemberOptions(client_id=name, session_safety_margin_ms=300, rebalance_timeout_ms=5_000),
        )
        await worker.join(
            "cluster",
            url=url or f"http://{name}:8083",
            client_assignors=[IncrementalCooperativeAssignor(scheduled_rebalance_max_delay_ms=DELAY_MS)],
        )
        self.workers[name] = worker
        return worker

    async def crash(self, name: str) -> None:
        await self.workers.pop(name).abort()
        self.registry.crashed(name)

    def held(self) -> dict[str, frozenset[Any]]:
        return {n: w.assignment().partitions for n, w in self.workers.items()}

    async def until(self, check: Any, timeout: float = 15) -> None:
        async with asyncio.timeout(timeout):
            while True:
                self.registry.assert_safe()
                group = await self.service.stubs.describe("cluster")
                if group.group_state == "Stable" and check(self.held(), group):
                    return
                await asyncio.sleep(0.05)


@pytest.fixture
async def cluster(start_service: ServiceFactory) -> AsyncIterator[Cluster]:
    service = await start_service(**FAST)
    async with GroupAdmin(f"127.0.0.1:{service.server.port}") as admin:
        await admin.put_connectors("cluster", {"A": 2, "B": 1})  # AC0 AT1 AT2 BC0 BT1
    c = Cluster(service)
    yield c
    for worker in c.workers.values():
        await worker.abort()


async def test_w1_joins_an_empty_group_then_w2_waits_for_w1s_revocation(cluster: Cluster) -> None:
    await cluster.start("W1")
    await cluster.until(lambda held, g: held["W1"] == ALL)
    group = await cluster.service.stubs.describe("cluster")
    # The seed: group epoch 1, target epoch 1, W1 at epoch 1 with everything.
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)
    assert [m.member_epoch for m in group.members] == [1]

    await cluster.start("W2")
    await cluster.until(lambda held, g: held.get("W2") == B and held["W1"] == A)
    group = await cluster.service.stubs.describe("cluster")
    assert (group.group_epoch, group.assignment_epoch) == (2, 2)
    assert sorted(m.member_epoch for m in group.members) == [2, 2]
    # W2 got B and BT1 only after W1 revoked them.
    events = cluster.registry.events
    revoked = next(e.at for e in events if e.member == "W1" and e.kind == "revoked")
    assigned = next(e.at for e in events if e.member == "W2" and e.kind == "assigned")
    assert revoked < assigned


async def _three_workers(cluster: Cluster) -> dict[str, frozenset[Any]]:
    for name in ("W1", "W2", "W3"):
        await cluster.start(name)
    await cluster.until(
        lambda held, g: frozenset().union(*held.values()) == ALL and all(held.values()) and len(held) == 3
    )
    return cluster.held()


async def test_a_worker_leaves_its_work_is_held_back_then_reassigned(cluster: Cluster) -> None:
    before = await _three_workers(cluster)
    gone = before["W2"]
    await cluster.crash("W2")
    # After W2's session timeout its work is held back: owned by nobody, group Stable.
    await cluster.until(
        lambda held, g: len(g.members) == 2 and not (gone & frozenset().union(*held.values()))
    )
    held = cluster.held()
    assert held["W1"] == before["W1"] and held["W3"] == before["W3"]
    # Then, after the delay, the computing worker asks for a rebalance and the work is spread.
    await cluster.until(
        lambda held, g: frozenset().union(*held.values()) == ALL, timeout=DELAY_MS / 1000 + 10
    )
    cluster.registry.assert_safe()


async def test_a_bouncing_worker_gets_its_work_back(cluster: Cluster) -> None:
    before = await _three_workers(cluster)
    await cluster.crash("W2")
    await cluster.until(lambda held, g: len(g.members) == 2)
    await cluster.start("W2-again", url="http://W2:8083")  # the same worker, restarted
    await cluster.until(lambda held, g: held.get("W2-again") == before["W2"])
    held = cluster.held()
    assert held["W1"] == before["W1"] and held["W3"] == before["W3"]


async def test_a_consumer_group_on_the_client_side_uniform_assignor(start_service: ServiceFactory) -> None:
    service = await start_service(**FAST)
    await service.stubs.create_topic("orders", 12)
    registry = OwnershipRegistry()
    target = f"127.0.0.1:{service.server.port}"
    members: dict[str, GroupMember] = {}

    async def converged(count: int) -> dict[str, frozenset[Any]]:
        async with asyncio.timeout(15):
            while True:
                registry.assert_safe()
                held = {n: m.assignment().partitions for n, m in members.items()}
                sizes = sorted(len(h) for h in held.values())
                group = await service.stubs.describe("g")
                if group.group_state == "Stable" and sum(sizes) == 12 and sizes[-1] - sizes[0] <= 1:
                    assert len(held) == count
                    return held
                await asyncio.sleep(0.05)

    try:
        for i in range(4):
            member = GroupMember(target, listener=registry.listener(f"m{i}"))
            await member.join("g", topics=["orders"], client_assignors=[UniformAssignor()])
            members[f"m{i}"] = member
            held = await converged(i + 1)
        assert sorted(len(h) for h in held.values()) == [3, 3, 3, 3]
        group = await service.stubs.describe("g")
        assert group.assignor_name == "uniform" and group.assignment_error == ""
        # Sticky like the server-side one: a leaving member's partitions are the only ones that move.
        before = {n: h for n, h in held.items() if n != "m3"}
        await members.pop("m3").close()
        held = await converged(3)
        assert all(before[n] <= held[n] for n in held)
    finally:
        for member in members.values():
            await member.abort()


async def test_a_client_side_assignor_sees_capacities_and_partition_racks(
    start_service: ServiceFactory,
) -> None:
    """PrepareAssignment carries what the server-side assignors weigh (issue 24), so a custom
    client-side assignor can weigh it too, as the built-in ones do."""
    service = await start_service(**FAST)
    target = f"127.0.0.1:{service.server.port}"
    async with GroupAdmin(target) as admin:
        await admin.create_topic("racked", 4, racks=["r1", "r2", "r1", "r2"])
    seen: list[GroupSnapshot] = []

    class Recording(UniformAssignor):
        def assign(self, group: GroupSnapshot) -> AssignmentPlan:
            seen.append(group)
            return super().assign(group)

    async with GroupMember(target) as member:
        await member.join(
            "weighed", topics=["racked"], client_assignors=[Recording()], capacity=3, rack_id="r1"
        )
        await member.wait_for_assignment(lambda a: len(a) == 4)
    (snapshot, *_) = seen
    (m,) = snapshot.members
    assert (m.capacity, m.rack_id) == (3, "r1")
    assert [(t.name, t.partition_racks) for t in snapshot.topics] == [("racked", ("r1", "r2", "r1", "r2"))]


@pytest.mark.parametrize("side", ["server", "client"])
async def test_uniform_weighs_racks_and_capacities_alike_on_either_side(
    start_service: ServiceFactory, side: str
) -> None:
    """One meaning per assignor name, racks and capacities included, through real
    heartbeats: a (rack r1, capacity 2) and b (rack r2) share six partitions
    alternating r1, r2 four and two; a's four are its rack's three and one more,
    b's two are of its rack. Whether b joins before or after a's first target,
    a keeps (or takes) r1's three, b takes r2's first two, and a the last."""
    service = await start_service(**FAST)
    target = f"127.0.0.1:{service.server.port}"
    async with GroupAdmin(target) as admin:
        await admin.create_topic("racked", 6, racks=["r1", "r2"] * 3)
    chosen: dict[str, Any] = (
        {"assignor": "uniform"} if side == "server" else {"client_assignors": [UniformAssignor()]}
    )
    async with GroupMember(target) as a, GroupMember(target) as b:
        await a.join("g", topics=["racked"], rack_id="r1", capacity=2, **chosen)
        await a.wait_for_assignment(lambda got: len(got) == 6)
        await b.join("g", topics=["racked"], rack_id="r2", **chosen)
        async with asyncio.timeout(15):
            while True:
                held = [sorted(p.partition for p in m.assignment().partitions) for m in (a, b)]
                if held == [[0, 2, 4, 5], [1, 3]]:
                    break
                assert sum(map(len, held)) <= 6
                await asyncio.sleep(0.05)
        group = await service.stubs.describe("g")
        assert group.assignor_name == "uniform" and group.assignment_error == ""
