"""The synchronous twins (SyncGroupMember, SyncGroupAdmin) driven from plain threads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from regroup.client import RegroupError, SyncGroupAdmin, SyncGroupMember, TopicPartition
from regroup.v1 import common_pb2
from tests.support.ownership import OwnershipRegistry
from tests.support.service import Service, ServiceFactory


@pytest.fixture
async def fast(start_service: ServiceFactory) -> Service:
    return await start_service(heartbeat_interval_ms=100, session_timeout_ms=1500)


class SlowRevoker:
    """Takes its time in on_partitions_revoked, as a sink flushing would."""

    def __init__(self, registry: OwnershipRegistry, name: str) -> None:
        self.inner = registry.listener(name)
        self.threads: set[str] = set()

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.threads.add(threading.current_thread().name)
        self.inner.on_partitions_assigned(partitions)

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.threads.add(threading.current_thread().name)
        time.sleep(0.3)  # longer than the heartbeat interval: the member keeps heartbeating
        self.inner.on_partitions_revoked(partitions)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.inner.on_partitions_lost(partitions)


def _run_members(target: str, registry: OwnershipRegistry, count: int, partitions: int) -> list[str]:
    """Each member in its own plain thread: join, wait for a fair share, then leave
    when told to. Returns the errors seen by the threads."""
    errors: list[str] = []
    listeners = [SlowRevoker(registry, f"s{i}") for i in range(count)]
    members = [SyncGroupMember(target, listener=listeners[i]) for i in range(count)]
    share = partitions // count

    def run(i: int) -> None:
        try:
            members[i].join("g", topics=["orders"])
            members[i].wait_for_assignment(
                lambda a: len(a) == share and registry.held_by(f"s{i}") == a.partitions, timeout=20
            )
        except Exception as err:
            errors.append(f"s{i}: {err!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    registry.assert_safe()
    held = [m.assignment().partitions for m in members]
    assert len(frozenset().union(*held)) == partitions
    assert all(m.member_epoch > 0 for m in members)
    # Callbacks ran in worker threads, never on the members' event-loop threads.
    assert all(name != "regroup-member" for listener in listeners for name in listener.threads)

    closers = [threading.Thread(target=m.close) for m in members]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    registry.assert_safe()
    assert registry.owners == {}
    return errors


async def test_sync_members_in_threads(fast: Service) -> None:
    target = f"127.0.0.1:{fast.server.port}"
    with SyncGroupAdmin(target) as admin:
        await asyncio.to_thread(admin.create_topic, "orders", 12)
    registry = OwnershipRegistry()
    errors = await asyncio.to_thread(_run_members, target, registry, 4, 12)
    assert errors == []
    group = await fast.stubs.describe("g")
    assert group.group_state == "Empty"


async def test_sync_admin_and_member_errors(fast: Service) -> None:
    target = f"127.0.0.1:{fast.server.port}"

    def scenario() -> None:
        with SyncGroupAdmin(target) as admin:
            admin.create_topics({"a": 2, "b": 1})
            assert sorted(t.name for t in admin.describe_topics()) == ["a", "b"]
            with pytest.raises(RegroupError) as missing:
                admin.create_partitions("nope", 3)
            assert missing.value.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION
            with SyncGroupMember(target) as member:
                member.join("g", topics=["a"])
                got = member.wait_for_assignment(timeout=10)
                assert {tp.partition for tp in got.partitions} == {0, 1}
                assert admin.describe_group("g").members[0].member_id == member.member_id
            assert admin.list_groups(states=["Empty"])[0].group_id == "g"
            admin.delete_group("g")
            with SyncGroupMember(target) as refused, pytest.raises(RegroupError):
                refused.join("", topics=["a"])

    await asyncio.to_thread(scenario)
