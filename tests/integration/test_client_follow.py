"""The Python client against several replicas: fake GroupCoordinator/GroupAdmin servicers
on loopback ports share one in-memory group, so that a member can move between them as
it would between real replicas after a failover. Each replica refuses, redirects, lacks
FindCoordinator or is stopped as a test says, and records the calls it got.

What is checked: members, Connect workers, their synchronous twins and the admin clients
follow NOT_COORDINATOR to the address named (or to FindCoordinator's answer), retry
COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS after the backoff, go back to
the bootstrap address when a followed replica is gone, and never lose their member id,
epoch or partitions on the way."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from regroup.client import (
    ConnectWorker,
    GroupAdmin,
    GroupMember,
    MemberOptions,
    SyncGroupAdmin,
    SyncGroupMember,
    TopicPartition,
)
from regroup.client.types import partitions_to_pb
from regroup.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc

GROUP = "g"
PARTITIONS = frozenset(TopicPartition("t", p, "tid") for p in range(4))
CONNECT = frozenset({"c1", "c2"})
INTERVAL_MS = 400
SESSION_MS = 2_000
# Short backoffs: a retry after one is well within a heartbeat interval.
FAST = MemberOptions(retry_backoff_ms=20, retry_backoff_max_ms=80, session_safety_margin_ms=300)


@dataclass
class Call:
    rpc: str
    request: Any
    at: float


@dataclass
class Group:
    """The state every replica shares: what survives a failover."""

    epochs: dict[str, int] = field(default_factory=dict)  # member id -> epoch
    #: Joins (epoch 0) of members already in the group: a member that lost its epoch.
    rejoins: list[str] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    connectors: dict[str, int] = field(default_factory=dict)


class Replica(coordinator_pb2_grpc.GroupCoordinatorServicer, admin_pb2_grpc.GroupAdminServicer):
    """One fake replica. A group call is served when `owns` says this replica owns the
    group (or `forwards`: serving stands for forwarding, the state being shared);
    otherwise it is answered NOT_COORDINATOR naming the owner (empty when
    `names_owner` is False). `refusals` are error codes answered first, one per call."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.address = ""
        self.server: grpc.aio.Server | None = None
        self.calls: list[Call] = []
        self.forwards = False
        self.names_owner = True
        self.has_find_coordinator = True
        self.refusals: list[int] = []

    def rpcs(self, rpc: str) -> list[Call]:
        return [c for c in self.calls if c.rpc == rpc]

    def _refusal(self, group_id: str) -> tuple[int, str]:
        """The error code and coordinator address to answer, (NONE, "") to serve."""
        if self.refusals:
            return self.refusals.pop(0), ""
        owner = self.cluster.owner(group_id)
        if owner is self or self.forwards:
            return common_pb2.NONE, ""
        return common_pb2.NOT_COORDINATOR, owner.address if self.names_owner else ""

    def _record(self, rpc: str, request: Any) -> None:
        self.calls.append(Call(rpc, request, time.monotonic()))

    # -- GroupCoordinator -----------------------------------------------------------

    async def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        self._record("ConsumerGroupHeartbeat", request)
        return self._heartbeat(request, coordinator_pb2.ConsumerGroupHeartbeatResponse, _assign_partitions)

    async def ConnectGroupHeartbeat(self, request: Any, context: Any) -> Any:
        self._record("ConnectGroupHeartbeat", request)
        return self._heartbeat(request, coordinator_pb2.ConnectGroupHeartbeatResponse, _assign_connectors)

    def _heartbeat(self, request: Any, response_type: Any, assign: Callable[[Any], None]) -> Any:
        code, address = self._refusal(request.group_id)
        if code != common_pb2.NONE:
            return response_type(error_code=code, coordinator_address=address, member_id=request.member_id)
        epochs = self.cluster.group.epochs
        member_id = request.member_id
        if request.member_epoch < 0:
            epochs.pop(member_id, None)
            return response_type(member_id=member_id, member_epoch=request.member_epoch)
        if request.member_epoch == 0:
            if member_id in epochs:
                self.cluster.group.rejoins.append(member_id)
            epochs[member_id] = epochs.get(member_id, 0) + 1
        elif epochs.get(member_id) != request.member_epoch:
            return response_type(error_code=common_pb2.FENCED_MEMBER_EPOCH, member_id=member_id)
        response = response_type(
            member_id=member_id,
            member_epoch=epochs[member_id],
            heartbeat_interval_ms=INTERVAL_MS,
            session_timeout_ms=SESSION_MS,
        )
        assign(response)
        return response

    async def OffsetCommit(self, request: Any, context: Any) -> Any:
        self._record("OffsetCommit", request)
        code, address = self._refusal(request.group_id)
        if code == common_pb2.NONE:
            for t in request.topics:
                for p in t.partitions:
                    self.cluster.group.offsets[(t.name, p.partition)] = p.offset
        return coordinator_pb2.OffsetCommitResponse(error_code=code, coordinator_address=address)

    async def OffsetFetch(self, request: Any, context: Any) -> Any:
        self._record("OffsetFetch", request)
        code, address = self._refusal(request.group_id)
        if code != common_pb2.NONE:
            return coordinator_pb2.OffsetFetchResponse(error_code=code, coordinator_address=address)
        response = coordinator_pb2.OffsetFetchResponse()
        for (topic, partition), offset in sorted(self.cluster.group.offsets.items()):
            response.topics.add(name=topic, topic_id="tid").partitions.add(partition=partition, offset=offset)
        return response

    async def FindCoordinator(self, request: Any, context: Any) -> Any:
        self._record("FindCoordinator", request)
        if not self.has_find_coordinator:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        owner = self.cluster.owner(request.group_id)
        return coordinator_pb2.FindCoordinatorResponse(address=owner.address, replica_id=owner.name)

    # -- GroupAdmin ----------------------------------------------------------------

    async def DescribeGroups(self, request: Any, context: Any) -> Any:
        self._record("DescribeGroups", request)
        groups = []
        for group_id in request.group_ids:
            code, address = self._refusal(group_id)
            state = "Stable" if code == common_pb2.NONE else ""
            groups.append(
                admin_pb2.DescribedGroup(
                    group_id=group_id,
                    group_state=state,
                    error_code=code,
                    coordinator_address=address,
                    assignor_name=self.name,  # who answered, for the test
                )
            )
        return admin_pb2.DescribeGroupsResponse(groups=groups)

    async def DeleteGroups(self, request: Any, context: Any) -> Any:
        self._record("DeleteGroups", request)
        results = []
        for group_id in request.group_ids:
            code, address = self._refusal(group_id)
            results.append(
                admin_pb2.DeleteGroupsResponse.Result(
                    group_id=group_id, error_code=code, coordinator_address=address
                )
            )
        return admin_pb2.DeleteGroupsResponse(results=results)

    async def PutConnectors(self, request: Any, context: Any) -> Any:
        self._record("PutConnectors", request)
        code, address = self._refusal(request.group_id)
        if code != common_pb2.NONE:
            return admin_pb2.PutConnectorsResponse(error_code=code, coordinator_address=address)
        self.cluster.group.connectors = {c.name: c.tasks for c in request.connectors}
        return admin_pb2.PutConnectorsResponse(group_epoch=7)


def _assign_partitions(response: Any) -> None:
    response.assignment.topic_partitions.extend(partitions_to_pb(PARTITIONS).topics)


def _assign_connectors(response: Any) -> None:
    response.assignment.connectors.extend(sorted(CONNECT))


class Cluster:
    """Replicas sharing one in-memory group state; each group has one owner."""

    def __init__(self) -> None:
        self.group = Group()
        self.replicas: list[Replica] = []
        self.owners: dict[str, Replica] = {}  # group id -> owner; default: the first replica

    def owner(self, group_id: str) -> Replica:
        return self.owners.get(group_id, self.replicas[0])

    def own(self, replica: Replica, *group_ids: str) -> None:
        for group_id in group_ids or (GROUP,):
            self.owners[group_id] = replica

    async def start(self, name: str) -> Replica:
        replica = Replica(self, name)
        server = grpc.aio.server()
        coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server(replica, server)
        admin_pb2_grpc.add_GroupAdminServicer_to_server(replica, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        replica.server, replica.address = server, f"127.0.0.1:{port}"
        self.replicas.append(replica)
        return replica

    async def kill(self, replica: Replica) -> None:
        assert replica.server is not None
        await replica.server.stop(0)

    async def stop(self) -> None:
        for replica in self.replicas:
            assert replica.server is not None
            await replica.server.stop(0)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster()
    yield c
    await c.stop()


class Events:
    """A listener that records its callbacks."""

    def __init__(self) -> None:
        self.log: list[tuple[str, frozenset[Any]]] = []

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("assigned", partitions))

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("revoked", partitions))

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append(("lost", partitions))

    on_assigned = on_partitions_assigned
    on_revoked = on_partitions_revoked
    on_lost = on_partitions_lost

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.log]


async def eventually(check: Callable[[], bool], within: float = 1.5) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def heartbeats(replica: Replica) -> list[Call]:
    return replica.rpcs("ConsumerGroupHeartbeat")


# -- GroupMember ---------------------------------------------------------------------


async def test_a_member_follows_not_coordinator_to_the_owner(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    cluster.own(b)
    events = Events()
    async with GroupMember(a.address, listener=events, options=FAST) as member:
        await member.join(GROUP, topics=["t"])
        (refused,) = heartbeats(a)
        joined = heartbeats(b)[0]
        # After the backoff (20 ms less the jitter), not after a heartbeat interval.
        assert 0.015 <= joined.at - refused.at < INTERVAL_MS / 1000
        assert joined.request.member_epoch == 0 and joined.request.member_id == member.member_id
        await member.wait_for_assignment()
        await member.commit({TopicPartition("t", 0, "tid"): 5})
        assert await member.committed() == {TopicPartition("t", 0, "tid"): 5}
        await eventually(lambda: len(heartbeats(b)) >= 3)
    assert [c.rpc for c in a.calls] == ["ConsumerGroupHeartbeat"]  # everything else went to b
    assert {c.rpc for c in b.calls} >= {"OffsetCommit", "OffsetFetch"}
    assert heartbeats(b)[-1].request.member_epoch == -1  # left where the group is
    assert events.kinds() == ["assigned", "revoked"]
    assert cluster.group.rejoins == []


async def test_not_coordinator_without_an_address_asks_find_coordinator(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    cluster.own(b)
    a.names_owner = False
    async with GroupMember(a.address, options=FAST) as member:
        await member.join(GROUP, topics=["t"])
        await member.wait_for_assignment()
    assert [c.rpc for c in a.calls] == ["ConsumerGroupHeartbeat", "FindCoordinator"]
    assert a.calls[1].request.group_id == GROUP
    assert heartbeats(b)[0].request.member_epoch == 0


async def test_coordinator_not_available_and_load_in_progress_are_retried_keeping_everything(
    cluster: Cluster,
) -> None:
    a = await cluster.start("a")
    events = Events()
    async with GroupMember(a.address, listener=events, options=FAST) as member:
        await member.join(GROUP, topics=["t"])
        owned = await member.wait_for_assignment()
        epoch = member.member_epoch
        # A takeover: the new owner is loading the group, then has it.
        unavailable, loading = common_pb2.COORDINATOR_NOT_AVAILABLE, common_pb2.COORDINATOR_LOAD_IN_PROGRESS
        a.refusals = [unavailable, unavailable, loading, loading]
        before = len(heartbeats(a))
        member.subscribe(topics=["t"])  # a heartbeat now rather than after the interval
        await eventually(lambda: len(heartbeats(a)) >= before + 5 and not a.refusals)
        await asyncio.sleep(0.05)
        retries = heartbeats(a)[before : before + 5]
        # Each retry right after its backoff (20, 40, 80, 80 ms, with jitter), none after an interval.
        gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(retries)]
        assert all(0.015 <= gap < 0.2 for gap in gaps), gaps
        assert [c.request.member_epoch for c in retries] == [epoch] * 5
        assert all(c.request.HasField("topic_partitions") for c in retries[1:])  # full requests
        assert member.member_epoch == epoch and member.assignment().partitions == owned.partitions
    assert "lost" not in events.kinds()
    assert cluster.group.rejoins == []


async def test_a_killed_owner_sends_the_member_back_to_the_bootstrap_address(cluster: Cluster) -> None:
    a = await cluster.start("a")  # the bootstrap address, never the owner here
    b = await cluster.start("b")
    c = await cluster.start("c")
    cluster.own(b)
    events = Events()
    async with GroupMember(a.address, listener=events, options=FAST) as member:
        await member.join(GROUP, topics=["t"])
        owned = await member.wait_for_assignment()
        epoch = member.member_epoch
        await cluster.kill(b)
        cluster.own(c)  # c takes b's shards over, keeping the members and their epochs
        killed_at = time.monotonic()
        member.subscribe(topics=["t"])
        await eventually(lambda: len(heartbeats(c)) >= 1)
        # b unreachable -> a (after a backoff) -> NOT_COORDINATOR naming c -> c (after another).
        assert [call.rpc for call in a.calls] == ["ConsumerGroupHeartbeat"] * 2
        assert heartbeats(c)[0].at - killed_at < 0.5
        assert heartbeats(c)[0].request.member_epoch == epoch
        await eventually(lambda: len(heartbeats(c)) >= 2)
        assert member.member_epoch == epoch and member.assignment().partitions == owned.partitions
    assert "lost" not in events.kinds()
    assert cluster.group.rejoins == []


async def test_channels_come_from_the_channel_factory(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    cluster.own(b)
    opened: list[str] = []

    def factory(address: str) -> grpc.aio.Channel:
        opened.append(address)  # a real one would make a secure channel, or set options
        return grpc.aio.insecure_channel(address)

    async with GroupMember(a.address, options=FAST, channel_factory=factory) as member:
        await member.join(GROUP, topics=["t"])
    # Every channel came from the factory: the member's own ones, and the member
    # stream's (one per address, shared by the process's members, which this fake
    # cluster does not serve: the heartbeats went unary).
    assert opened[0] == a.address
    assert set(opened) == {a.address, b.address}
    with pytest.raises(ValueError, match="interceptors"):
        GroupMember(a.address, channel_factory=factory, interceptors=[object()])  # type: ignore[list-item]


async def test_a_member_given_a_channel_and_no_factory_stays_on_it(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    cluster.own(b)
    async with grpc.aio.insecure_channel(a.address) as channel:
        member = GroupMember(channel, options=FAST)
        join = asyncio.create_task(member.join(GROUP, topics=["t"]))
        await eventually(lambda: len(heartbeats(a)) >= 2)  # retried there
        a.forwards = True  # as a real replica does by default
        await join
        await member.close()
    assert b.calls == []


async def test_commit_follows_a_moved_group(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    async with GroupMember(a.address, options=FAST) as member:
        await member.join(GROUP, topics=["t"])
        await member.wait_for_assignment()
        # The heartbeat that reports the assigned partitions; the next one is an interval away.
        await eventually(lambda: len(heartbeats(a)) >= 2)
        cluster.own(b)
        await member.commit({TopicPartition("t", 1, "tid"): 9})
        assert [c.rpc for c in b.calls][:1] == ["OffsetCommit"]
        assert cluster.group.offsets == {("t", 1): 9}
        assert [c.request.group_id for c in a.rpcs("OffsetCommit")] == [GROUP]  # refused once


async def test_find_coordinator_option_talks_to_the_owner_from_the_first_call(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    cluster.own(b)
    options = MemberOptions(find_coordinator=True, retry_backoff_ms=20)
    async with GroupMember(a.address, options=options) as member:
        await member.join(GROUP, topics=["t"])
        await member.wait_for_assignment()
    assert [c.rpc for c in a.calls] == ["FindCoordinator"]
    assert heartbeats(b)[0].request.member_epoch == 0


async def test_find_coordinator_option_falls_back_on_an_older_server(cluster: Cluster) -> None:
    a = await cluster.start("a")
    a.has_find_coordinator = False
    options = MemberOptions(find_coordinator=True, retry_backoff_ms=20)
    async with GroupMember(a.address, options=options) as member:
        await member.join(GROUP, topics=["t"])
        await member.wait_for_assignment()
        assert member.failure is None
        # A NOT_COORDINATOR naming nobody is then retried there, without asking again.
        a.refusals = [common_pb2.NOT_COORDINATOR]
        member.subscribe(topics=["t"])
        await eventually(lambda: not a.refusals and len(heartbeats(a)) >= 3)
    assert [c.rpc for c in a.calls].count("FindCoordinator") == 1


async def test_a_connect_worker_follows_too(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    cluster.own(b)
    events = Events()
    async with ConnectWorker(a.address, listener=events, options=FAST) as worker:
        await worker.join(GROUP, url="http://w1")
        assert (await worker.wait_for_assignment()).partitions == CONNECT
    assert [c.rpc for c in a.calls] == ["ConnectGroupHeartbeat"]
    assert len(b.rpcs("ConnectGroupHeartbeat")) >= 2
    assert events.kinds() == ["assigned", "revoked"]


async def test_the_synchronous_twin_follows_and_survives_a_killed_owner(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    c = await cluster.start("c")
    cluster.own(b)
    events = Events()
    member = await asyncio.to_thread(SyncGroupMember, a.address, listener=events, options=FAST)
    try:
        await asyncio.to_thread(member.join, GROUP, topics=["t"])
        owned = await asyncio.to_thread(member.wait_for_assignment, None, 1.5)
        epoch = member.member_epoch
        await cluster.kill(b)
        cluster.own(c)
        member.subscribe(topics=["t"])
        await eventually(lambda: len(heartbeats(c)) >= 2)
        await asyncio.to_thread(member.commit, {TopicPartition("t", 2, "tid"): 3})
        assert member.member_epoch == epoch and member.assignment().partitions == owned.partitions
    finally:
        await asyncio.to_thread(member.close)
    assert c.rpcs("OffsetCommit") and cluster.group.offsets == {("t", 2): 3}
    assert "lost" not in events.kinds()
    assert cluster.group.rejoins == []


# -- GroupAdmin ----------------------------------------------------------------------


async def test_the_admin_sends_each_group_to_its_coordinator(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    cluster.own(b, "g2", "g4")
    async with GroupAdmin(a.address, retry_backoff_ms=10) as admin:
        groups = await admin.describe_groups(["g1", "g2", "g3", "g4"])
        assert [(g.group_id, g.assignor_name, g.error_code) for g in groups] == [
            ("g1", "a", 0),
            ("g2", "b", 0),
            ("g3", "a", 0),
            ("g4", "b", 0),
        ]
        assert [list(c.request.group_ids) for c in b.rpcs("DescribeGroups")] == [["g2", "g4"]]
        # The next call goes straight to each group's coordinator.
        assert (await admin.describe_group("g2")).assignor_name == "b"
        assert len(a.rpcs("DescribeGroups")) == 1
        assert await admin.put_connectors("g2", {"c1": 2}) == 7
        await admin.commit_offsets("g4", {("t", 0): 11})
        await admin.delete_group("g4")
        assert [c.rpc for c in a.calls] == ["DescribeGroups"]
        assert [c.rpc for c in b.calls][2:] == ["PutConnectors", "OffsetCommit", "DeleteGroups"]
        assert await admin.fetch_offsets("g4") == {("t", 0): 11}
        # The owner killed: back to the bootstrap address, which serves (it forwards) now.
        await cluster.kill(b)
        a.forwards = True
        assert (await admin.describe_group("g2")).assignor_name == "a"


def test_the_synchronous_admin_follows_too() -> None:
    async def start() -> tuple[Cluster, Replica, Replica]:
        c = Cluster()
        a = await c.start("a")
        b = await c.start("b")
        c.own(b)
        a.names_owner = False  # FindCoordinator then
        return c, a, b

    # The fake replicas need a loop of their own while the blocking client waits.
    loop = asyncio.new_event_loop()
    thread = _LoopThread(loop)
    try:
        cluster, a, b = thread.run(start())
        with SyncGroupAdmin(a.address, retry_backoff_ms=10) as admin:
            assert admin.describe_group(GROUP).assignor_name == "b"
            admin.commit_offsets(GROUP, {("t", 3): 4})
            assert admin.fetch_offsets(GROUP) == {("t", 3): 4}
        assert [c.rpc for c in a.calls] == ["DescribeGroups", "FindCoordinator"]
        assert [c.rpc for c in b.calls] == ["DescribeGroups", "OffsetCommit", "OffsetFetch"]
        thread.run(cluster.stop())
    finally:
        thread.close()


class _LoopThread:
    """An event loop in a thread of its own."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread = threading.Thread(target=loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(5)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
