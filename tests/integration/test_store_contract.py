"""One contract, two stores: PostgresStore and the in-memory MemoryStore the runtime's
unit tests use. Every test runs on both, so that what a unit test proves on the memory
store holds for Postgres: what is loaded is what replaying the stored records gives
(soft state excepted), deletion takes every row of a group, ownership is fenced, topics
keep their names unique."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from regroup.reconciler import Group, Record, Topic, replay_all
from regroup.reconciler.history import EventType, GroupEvent
from regroup.reconciler.model import (
    CONNECT_GROUP_TYPE,
    ClientAssignor,
    Computation,
    MemberMetadata,
    MemberState,
)
from regroup.reconciler.records import (
    AssignorStateRecord,
    ComputationRecord,
    ConnectorsRecord,
    CurrentAssignmentRecord,
    GroupMetadataRecord,
    GroupTombstone,
    MemberMetadataRecord,
    OffsetCommitRecord,
    OffsetTombstone,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
    member_removal_records,
)
from regroup.server.history import EventQuery
from regroup.server.leases import LeaseRequest
from regroup.server.memstore import MemoryDatabase, MemoryStore
from regroup.server.store import Fence, GroupStore, NotOwner, PostgresStore, StoreConflict
from tests.support.leases import hold_all
from tests.support.pg import EmbeddedPostgres

#: A new store (a replica) on the test's one database.
NewStore = Callable[[str], Awaitable[Any]]


@pytest.fixture(params=["memory", "postgres"])
async def new_store(request: pytest.FixtureRequest, postgres: EmbeddedPostgres) -> AsyncIterator[NewStore]:
    opened: list[PostgresStore] = []
    if request.param == "memory":
        database = MemoryDatabase()

        async def memory(replica_id: str) -> GroupStore:
            return MemoryStore(replica_id, database)

        yield memory
        return
    dsn = await postgres.migrated_database()

    async def postgres_store(replica_id: str) -> GroupStore:
        store = await PostgresStore.connect(dsn, replica_id, max_size=2)
        opened.append(store)
        return store

    yield postgres_store
    for store in opened:
        await store.close()


class Fenced:
    """A store whose replica holds every shard, writing with their fences."""

    def __init__(self, store: GroupStore, fence: Callable[[str], Fence]) -> None:
        self.store, self.fence = store, fence

    async def append(self, group_id: str, records: Sequence[Record]) -> None:
        await self.store.append(group_id, records, self.fence(group_id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def owner(new_store: NewStore, replica_id: str = "r1", lease_ms: int = 60_000) -> Any:
    store: GroupStore = await new_store(replica_id)
    return Fenced(store, await hold_all(store, lease_ms=lease_ms))


def stored_view(group: Group | None) -> Any:
    """What a store keeps of a group: everything but soft state."""
    if group is None:
        return None
    return {
        "type": group.group_type,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "metadata_hash": group.metadata_hash,
        "members": dict(sorted(group.members.items())),
        "target": dict(sorted(group.target.items())),
        "offsets": dict(sorted(group.offsets.items())),
        "assignor_state": (group.assignor_state, group.assignment_error),
        "connectors": dict(group.connectors),
    }


MEMBER = MemberMetadataRecord(
    "m1",
    MemberMetadata(
        instance_id="i1",
        rack_id="rack-a",
        client_id="client",
        client_host="/10.0.0.1",
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex="c.*",
        server_assignor="uniform",
        rebalance_timeout_ms=30_000,
        client_assignors=(ClientAssignor("x", 0, 2, 1, 1, b"\x00meta"),),
        url="http://w1",
        draining=True,  # stored and loaded like the rest of the metadata
    ),
)
OTHER = MemberMetadataRecord("m2", MemberMetadata(subscribed_topic_names=("a",), rebalance_timeout_ms=1_000))
CREATED: tuple[Record, ...] = (
    GroupMetadataRecord(3, -1234567890123, "consumer"),
    MEMBER,
    OTHER,
    TargetAssignmentMemberRecord("m1", {"a": frozenset({0, 1}), "b": frozenset({2})}),
    TargetAssignmentMemberRecord("m2", {"a": frozenset({2})}),
    TargetAssignmentEpochRecord(3, computed_at_ms=1_767_225_600_000),
    CurrentAssignmentRecord(
        "m1", MemberState.UNREVOKED_PARTITIONS, 3, 2, {"a": frozenset({0})}, {"b": frozenset({5})}
    ),
    CurrentAssignmentRecord("m2", MemberState.STABLE, 3, 2, {"a": frozenset({2})}, {}),
    OffsetCommitRecord("a", 0, 42, "meta", 3, 1_767_225_600_000),
    OffsetCommitRecord("a", 1, 7, "", -1, 1_767_225_600_001),
    AssignorStateRecord(b"\x01state", "last computation failed"),
    ComputationRecord(Computation("m1", "x", 1_767_225_630_000)),
)


async def test_a_loaded_group_is_what_its_records_replay_to(new_store: NewStore) -> None:
    store = await owner(new_store)
    changes: list[tuple[Record, ...]] = [
        CREATED,
        (CurrentAssignmentRecord("m2", MemberState.STABLE, 4, 3, {"a": frozenset({2, 3})}, {}),),
        (*member_removal_records("m1"), OffsetTombstone("a", 1), GroupMetadataRecord(4, 99, "consumer")),
    ]
    applied: list[Record] = []
    for records in changes:
        await store.append("g", records)
        applied.extend(records)
        expected = stored_view(replay_all(None, "g", applied))
        assert stored_view(await store.load_group("g")) == expected
        assert stored_view((await store.load_groups())["g"]) == expected
        # Another replica reads the same.
        assert stored_view(await (await new_store("reader")).load_group("g")) == expected


async def test_soft_state_is_not_stored(new_store: NewStore) -> None:
    store = await owner(new_store)
    await store.append("g", CREATED)
    loaded = await store.load_group("g")
    assert loaded is not None
    assert (loaded.computation, loaded.last_assignment_ms) == (None, None)
    commits = store.commits  # type: ignore[attr-defined]
    await store.append("g", (ComputationRecord(None),))
    assert store.commits == commits  # type: ignore[attr-defined]


async def test_a_connect_groups_connectors_are_stored_with_it(new_store: NewStore) -> None:
    store = await owner(new_store)
    created = (GroupMetadataRecord(0, 0, CONNECT_GROUP_TYPE), ConnectorsRecord((("A", 2), ("B", 0))))
    await store.append("c", created)
    await store.append("c", (ConnectorsRecord((("C", 1),)),))
    loaded = await store.load_group("c")
    assert loaded is not None and loaded.group_type == CONNECT_GROUP_TYPE
    assert loaded.connectors == {"C": 1}
    await store.append("c", (ConnectorsRecord(()),))
    assert (await store.load_group("c")).connectors == {}  # type: ignore[union-attr]


async def test_a_deleted_group_leaves_nothing(new_store: NewStore) -> None:
    store = await owner(new_store)
    await store.append("g", CREATED)
    await store.append("c", (GroupMetadataRecord(0, 0, CONNECT_GROUP_TYPE), ConnectorsRecord((("A", 1),))))
    await store.append("g", (*member_removal_records("m1"), *member_removal_records("m2"), GroupTombstone()))
    await store.append("c", (GroupTombstone(),))
    assert await store.load_group("g") is None and await store.load_group("c") is None
    assert await store.load_groups() == {} and await store.group_ids() == []
    # Created again under the same id: nothing of the old group comes back.
    await store.append("c", (GroupMetadataRecord(0, 0, CONNECT_GROUP_TYPE),))
    again = await store.load_group("c")
    assert again is not None and (again.connectors, again.offsets, again.members) == ({}, {}, {})


async def test_writes_are_fenced_by_the_shards_lease(new_store: NewStore) -> None:
    first = await owner(new_store, "r1", lease_ms=300)
    await first.append("g", CREATED)
    await asyncio.sleep(0.4)  # the lease expires by the database's clock
    step = CurrentAssignmentRecord("m2", MemberState.STABLE, 3, 2, {}, {})
    # Expired, not yet taken: the old owner's writes are refused already.
    for records in ((step,), (GroupMetadataRecord(5, 0, "consumer"),)):
        with pytest.raises(NotOwner, match="expired"):
            await first.append("g", records)

    second = await owner(new_store, "r2")
    assert second.fence("g").owner_epoch > first.fence("g").owner_epoch
    for records in ((step,), (GroupMetadataRecord(5, 0, "consumer"),)):
        with pytest.raises(NotOwner, match="held by r2"):
            await first.append("g", records)
    await second.append("g", (step,))
    # A lone step write for a group that is not stored is refused too (Postgres' one-statement write).
    with pytest.raises(NotOwner):
        await second.append("missing", (step,))
    assert await second.load_group("missing") is None
    # A shard nobody holds refuses every write.
    await second.lease_round(LeaseRequest("r2", "", 1_000, {}, release=tuple(range(64))))
    with pytest.raises(NotOwner, match="nobody"):
        await second.append("g", (step,))
    assert (await second.load_group("g")).members["m2"].member_epoch == 3  # type: ignore[union-attr]


async def test_groups_load_by_id(new_store: NewStore) -> None:
    store = await owner(new_store)
    for group_id in ("a", "b", "c"):
        await store.append(group_id, (GroupMetadataRecord(1, 0, "consumer"),))
    assert sorted(await store.group_ids()) == ["a", "b", "c"]
    assert sorted(await store.load_groups(["a", "c", "gone"])) == ["a", "c"]
    assert await store.load_groups([]) == {}
    assert sorted(await store.load_groups()) == ["a", "b", "c"]


async def test_topics_keep_unique_names(new_store: NewStore) -> None:
    store = await owner(new_store)
    a, b = Topic(str(uuid.uuid4()), "b-topic", 2, ("r1", "r2")), Topic(str(uuid.uuid4()), "a-topic", 1)
    await store.put_topic(a)
    await store.put_topic(b)
    assert await store.load_topics() == [b, a]
    grown = Topic(a.topic_id, a.name, 3, ("r1", "r2", "r3"))
    await store.put_topic(grown)
    with pytest.raises(StoreConflict) as conflict:
        await store.put_topic(Topic(str(uuid.uuid4()), "a-topic", 1))
    assert conflict.value.constraint == "topics_name_key"
    await store.delete_topic(b.topic_id)
    assert await store.load_topics() == [grown]


# -- shards and leases (the database's clock is real here: leases last milliseconds) --


async def test_the_first_shard_count_stays(new_store: NewStore) -> None:
    store = await new_store("r1")
    assert await store.shard_count(16) == 16
    assert await (await new_store("r2")).shard_count(64) == 16


async def test_a_lease_round_acquires_free_shards_and_renews_at_its_epoch(new_store: NewStore) -> None:
    a, b = await new_store("a"), await new_store("b")
    first = await a.lease_round(LeaseRequest("a", "10.0.0.1:50051", 60_000, {}, [], [0, 1, 1]))
    assert set(first.granted) == {0, 1}
    assert first.live == {"a": "10.0.0.1:50051"}
    assert [(s, lease.owner) for s, lease in first.leases.items()] == [(0, "a"), (1, "a")]
    assert first.leases[0].expires_at_ms >= first.db_now_ms + 60_000 - 1

    # b cannot take a live lease, whoever asks; its own free shard it gets, at a later epoch.
    taken = await b.lease_round(LeaseRequest("b", "10.0.0.2:50051", 60_000, {}, [], [1, 2]))
    assert taken.granted == {2: taken.leases[2].owner_epoch}
    assert taken.leases[2].owner_epoch > max(first.granted.values())
    assert taken.leases[1].owner == "a" and set(taken.live) == {"a", "b"}

    # a renews at its epochs; a wrong epoch renews nothing.
    renewed = await a.lease_round(
        LeaseRequest("a", "10.0.0.1:50051", 60_000, {0: first.granted[0], 1: -1}, [], [])
    )
    assert renewed.granted == {0: first.granted[0]}
    assert renewed.leases[0].expires_at_ms >= first.leases[0].expires_at_ms


async def test_a_lease_round_tells_when_the_topics_changed(new_store: NewStore) -> None:
    a, b = await new_store("a"), await new_store("b")

    async def version() -> int:
        return (await b.lease_round(LeaseRequest("b", "b:1", 60_000, {}, [], []))).topics_version

    seen = [await version()]
    topic = Topic(str(uuid.uuid4()), "orders", 2)
    await a.put_topic(topic)  # created, grown, deleted through another replica
    seen.append(await version())
    await a.put_topic(Topic(topic.topic_id, "orders", 4))
    seen.append(await version())
    assert await version() == seen[-1]  # nothing changed since
    await a.delete_topic(topic.topic_id)
    seen.append(await version())
    assert seen == sorted(set(seen)), seen


async def test_released_and_expired_leases_are_free(new_store: NewStore) -> None:
    a, b = await new_store("a"), await new_store("b")
    held = await a.lease_round(LeaseRequest("a", "a:1", 60_000, {}, [], [0, 1]))
    released = await a.lease_round(LeaseRequest("a", "a:1", 60_000, dict(held.granted), [0], []))
    assert set(released.granted) == {1}
    assert set((await b.lease_round(LeaseRequest("b", "b:1", 60_000, {}, [], [0]))).granted) == {0}

    # A lease of 1 ms has run out by the database's clock by b's next round.
    short = await a.lease_round(LeaseRequest("a", "a:1", 1, {}, [], [5]))
    assert set(short.granted) == {5}
    await asyncio.sleep(0.01)
    late = await a.lease_round(LeaseRequest("a", "a:1", 60_000, {5: short.granted[5]}, [], []))
    assert 5 not in late.granted  # expired: renewing is too late, the lease must be taken again
    again = await b.lease_round(LeaseRequest("b", "b:1", 60_000, {}, [], [5]))
    assert again.granted[5] > short.granted[5]


async def test_replicas_hear_topic_changes_and_released_shards(new_store: NewStore) -> None:
    first, second = await new_store("r1"), await new_store("r2")
    heard: list[tuple[str, str]] = []
    assert await second.listen(lambda channel, sender: heard.append((channel, sender))) is True
    assert await second.listen(lambda channel, sender: heard.append((channel, sender))) is False  # still

    async def heard_soon(notice: tuple[str, str]) -> None:
        for _ in range(200):  # Postgres delivers after the commit, on another connection
            if notice in heard:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{notice} not heard: {heard}")

    topic = Topic(str(uuid.uuid4()), "t", 1)
    await first.put_topic(topic)
    await heard_soon(("regroup_topics", "r1"))
    await first.delete_topic(topic.topic_id)
    assert heard.count(("regroup_topics", "r1")) >= 1
    await first.lease_round(LeaseRequest("r1", "", 60_000, {}, acquire=[0]))
    assert ("regroup_leases", "r1") not in heard  # renewing or acquiring says nothing
    await first.lease_round(LeaseRequest("r1", "", 60_000, {}, release=[0]))
    await heard_soon(("regroup_leases", "r1"))


def _event(kind: EventType, at_ms: int, **fields: Any) -> GroupEvent:
    return GroupEvent(type=kind, timestamp_ms=at_ms, group_epoch=1, **fields)


async def test_events_are_stored_with_their_write_read_back_trimmed_and_expired(new_store: NewStore) -> None:
    store = await owner(new_store)
    joined = _event(EventType.MEMBER_JOINED, 1_000, member_id="m1", reason="joined", message="Hi.")
    sequences = list(
        await store.store.append(
            "g", CREATED, store.fence("g"), [joined, _event(EventType.GROUP_STABLE, 1_000)]
        )
    )
    assert len(sequences) == 2 and sequences[0] < sequences[1]
    step = CurrentAssignmentRecord("m1", MemberState.STABLE, 1, 0, {}, {})
    more = list(
        await store.store.append(
            "g", (step,), store.fence("g"), [_event(EventType.MEMBER_RECONCILED, 2_000, member_id="m1")]
        )
    )
    assert more[0] > sequences[1]
    await store.store.append("h", CREATED, store.fence("h"), [_event(EventType.GROUP_CREATED, 1_500)])

    newest, more_left = await store.list_events("g", EventQuery())
    assert [e.type for e in newest] == [
        EventType.MEMBER_RECONCILED,
        EventType.GROUP_STABLE,
        EventType.MEMBER_JOINED,
    ]
    assert not more_left
    assert newest[-1] == joined and newest[-1].sequence == sequences[0]  # every field comes back
    page, more_left = await store.list_events(
        "g", EventQuery(limit=1, oldest_first=True, after_sequence=sequences[0])
    )
    assert [e.sequence for e in page] == [sequences[1]] and more_left
    late, _ = await store.list_events("g", EventQuery(since_ms=1_500))
    assert [e.type for e in late] == [EventType.MEMBER_RECONCILED]
    typed, _ = await store.list_events("g", EventQuery(types=(int(EventType.MEMBER_JOINED),)))
    assert typed == [joined]

    # A write the fence refuses stores none of its events (the one-statement step too).
    await store.lease_round(LeaseRequest("r1", "", 1_000, {}, release=tuple(range(64))))
    for records in ((step,), (GroupMetadataRecord(2, 0, "consumer"),)):
        with pytest.raises(NotOwner):
            await store.store.append("g", records, store.fence("g"), [_event(EventType.GROUP_STABLE, 3_000)])
    assert len((await store.list_events("g", EventQuery()))[0]) == 3
    store = await owner(new_store, "r2")

    # Deleting the group keeps its history; keep_events trims to the newest.
    await store.store.append(
        "g", (GroupTombstone(),), store.fence("g"), [_event(EventType.GROUP_DELETED, 4_000)], 2
    )
    kept, _ = await store.list_events("g", EventQuery())
    assert [e.type for e in kept] == [EventType.GROUP_DELETED, EventType.MEMBER_RECONCILED]
    assert await store.expire_events(2_001) == 2  # g's event at 2000 and h's at 1500
    assert [e.type for e in (await store.list_events("g", EventQuery()))[0]] == [EventType.GROUP_DELETED]
    assert (await store.list_events("h", EventQuery()))[0] == []
