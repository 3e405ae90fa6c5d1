"""The Postgres store: one transaction per operation, the shard fence on every write path."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from regroup.reconciler.model import MemberMetadata, MemberState
from regroup.reconciler.records import (
    CurrentAssignmentRecord,
    GroupMetadataRecord,
    MemberMetadataRecord,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
)
from regroup.server.store import HELD_CONNECTIONS, NotOwner, PostgresStore, StoreUnavailable
from tests.support.leases import hold_all

MEMBER = MemberMetadataRecord("m", MemberMetadata(subscribed_topic_names=("t",), rebalance_timeout_ms=1000))


def current(epoch: int) -> CurrentAssignmentRecord:
    return CurrentAssignmentRecord("m", MemberState.STABLE, epoch, epoch - 1, {"t": frozenset({0, 1})}, {})


async def test_records_round_trip_through_a_reload(database: str) -> None:
    store = await PostgresStore.connect(database, "r1")
    try:
        fence = await hold_all(store)
        await store.append("g", [GroupMetadataRecord(2, 42, "consumer"), MEMBER, current(1)], fence("g"))
        await store.append(
            "g",
            [TargetAssignmentMemberRecord("m", {"t": frozenset({0, 1})}), TargetAssignmentEpochRecord(2)],
            fence("g"),
        )
        await store.append("g", [current(2)], fence("g"))  # the one-statement path
        group = (await store.load_groups())["g"]
    finally:
        await store.close()
    assert (group.group_epoch, group.assignment_epoch, group.metadata_hash) == (2, 2, 42)
    member = group.members["m"]
    assert (member.member_epoch, member.previous_member_epoch, member.assigned) == (
        2,
        1,
        {"t": frozenset({0, 1})},
    )
    assert member.assigned["t"] is group.target["m"]["t"]  # a loaded stable member shares its target's set


async def test_a_step_owing_a_revocation_round_trips_through_the_one_statement_path(database: str) -> None:
    store = await PostgresStore.connect(database, "r1")
    owing = CurrentAssignmentRecord(
        "m", MemberState.UNREVOKED_PARTITIONS, 3, 2, {"t": frozenset({0})}, {"t": frozenset({1, 2})}
    )
    try:
        fence = await hold_all(store)
        await store.append("g", [GroupMetadataRecord(3, 42, "consumer"), MEMBER, current(2)], fence("g"))
        commits = store.commits
        await store.append("g", [owing], fence("g"))
        assert store.commits == commits + 1
        member = (await store.load_groups())["g"].members["m"]
    finally:
        await store.close()
    assert (member.state, member.member_epoch, member.previous_member_epoch) == (
        MemberState.UNREVOKED_PARTITIONS,
        3,
        2,
    )
    assert (member.assigned, member.pending_revocation) == ({"t": frozenset({0})}, {"t": frozenset({1, 2})})


@pytest.mark.parametrize("write", ["single current assignment", "transaction"])
async def test_a_replica_that_lost_the_shard_cannot_write(database: str, write: str) -> None:
    old = await PostgresStore.connect(database, "old")
    new = await PostgresStore.connect(database, "new")
    try:
        old_fence = await hold_all(old, lease_ms=300)
        await old.append("g", [GroupMetadataRecord(1, 0, "consumer"), MEMBER, current(1)], old_fence("g"))
        await asyncio.sleep(0.4)  # the old lease expires by the database's clock
        new_fence = await hold_all(new)
        assert new_fence("g").owner_epoch > old_fence("g").owner_epoch
        records = (
            [current(2)] if write == "single current assignment" else [GroupMetadataRecord(2, 0, "consumer")]
        )
        with pytest.raises(NotOwner):
            await old.append("g", records, old_fence("g"))
        assert (await new.load_groups())["g"].members["m"].member_epoch == 1
        await new.append("g", records, new_fence("g"))
    finally:
        await old.close()
        await new.close()


async def test_a_released_connection_is_not_reset_with_another_round_trip(database: str) -> None:
    """A write is one statement: the pool sends nothing after it when the connection goes back."""
    store = await PostgresStore.connect(database, "r1", max_size=1)
    try:
        fence = await hold_all(store)
        await store.append("g", [GroupMetadataRecord(1, 0, "consumer"), MEMBER, current(1)], fence("g"))
        await store.append("g", [current(2)], fence("g"))  # the one-statement path
        observer = await asyncpg.connect(database)
        try:
            last = await observer.fetch(
                "SELECT query FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            )
        finally:
            await observer.close()
    finally:
        await store.close()
    assert [row["query"] for row in last if "current_assignments" in row["query"]], last
    assert not [row for row in last if "RESET ALL" in row["query"]], last


async def test_a_store_with_one_connection_holds_none_back(database: str) -> None:
    """Step writes keep connections out of the pool, but never its last one: a
    transaction after a step write still gets a connection."""
    store = await PostgresStore.connect(database, "r1", max_size=1)
    try:
        fence = await hold_all(store)
        await store.append("g", [GroupMetadataRecord(1, 0, "consumer"), MEMBER, current(1)], fence("g"))
        await store.append("g", [current(2)], fence("g"))
        async with asyncio.timeout(10):
            await store.append("g", [GroupMetadataRecord(2, 0, "consumer")], fence("g"))
            assert (await store.load_groups())["g"].group_epoch == 2
    finally:
        await store.close()


async def test_step_writes_survive_a_lost_connection_and_run_concurrently(database: str) -> None:
    store = await PostgresStore.connect(database, "r1")
    try:
        fence = await hold_all(store)
        for g in ("g0", "g1", "g2", "g3"):
            await store.append(g, [GroupMetadataRecord(1, 0, "consumer"), MEMBER, current(1)], fence(g))
        # More step writes at once than connections are held: the rest use the pool.
        await asyncio.gather(*(store.append(g, [current(2)], fence(g)) for g in ("g0", "g1", "g2", "g3")))
        assert 0 < len(store._held) <= HELD_CONNECTIONS

        # Postgres drops every connection (a restart, an idle timeout): the writes that
        # meet a dead one fail as unavailable (retriable), and a later one succeeds.
        observer = await asyncpg.connect(database)
        try:
            await observer.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await observer.close()
        failures = 0
        for epoch in range(3, 13):
            try:
                await store.append("g0", [current(epoch)], fence("g0"))
                break
            except StoreUnavailable:
                failures += 1
        assert failures <= 4  # at most once per connection the writes had opened
        groups = await store.load_groups()
    finally:
        await store.close()
    assert [groups[g].members["m"].member_epoch for g in ("g0", "g1", "g2", "g3")] == [3 + failures, 2, 2, 2]


async def test_a_lost_listening_connection_is_reported_and_listened_again(database: str) -> None:
    store = await PostgresStore.connect(database, "r1")
    heard: list[tuple[str, str]] = []
    try:
        assert await store.listen(lambda channel, sender: heard.append((channel, sender)))
        observer = await asyncpg.connect(database)
        try:
            await observer.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            )
        finally:
            await observer.close()
        async with asyncio.timeout(5):
            while ("", "") not in heard:  # sql.LISTEN_LOST
                await asyncio.sleep(0.01)
        assert await store.listen(lambda channel, sender: heard.append((channel, sender)))  # again
    finally:
        await store.close()
