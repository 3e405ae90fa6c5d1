"""An in-memory store, for tests of the coordinator runtime without a database.

It keeps each group's stored records and rebuilds the group by replaying them on
every load, as the Postgres store rebuilds it from its rows. Several stores may
share one `MemoryDatabase`, as replicas share Postgres: writes are fenced by the
shard's lease as the Postgres store fences them (tests/integration/test_store_contract.py holds both to
one contract). Outages are injected: `down` refuses every call, as an unreachable
Postgres does; `fail_calls` makes the calls it names fail that many more times
(one step of a longer path, as a connection lost between two statements); and
`commit_then_fail` makes writes commit and then fail, as a connection lost before
the commit's acknowledgement does (a write in doubt).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from regroup.reconciler import Group, Record, Topic, replay_all
from regroup.reconciler.history import GroupEvent
from regroup.reconciler.records import (
    SOFT_RECORDS,
    CurrentAssignmentRecord,
    GroupTombstone,
    TargetAssignmentEpochRecord,
)

from .history import EventQuery
from .leases import Lease, LeaseRequest, LeaseRound
from .sql import LEASES_CHANNEL, TOPICS_CHANNEL
from .store import Fence, GroupStore, Notice, NotOwner, PreparedWrite, StoreConflict, StoreUnavailable


def _system_wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class MemoryDatabase:
    """What Postgres holds, for stores that share it."""

    #: Each group's stored records since it was created.
    log: dict[str, list[Record]] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    #: The owner epoch sequence (shard leases draw from it, as in Postgres).
    owner_epochs: int = 0
    #: The database's clock (wall-clock ms): lease expiries are read and written on it.
    clock: Callable[[], int] = _system_wall_ms
    settings: dict[str, str] = field(default_factory=dict)
    #: replica id -> (advertised address, registration expiry)
    replicas: dict[str, tuple[str, int]] = field(default_factory=dict)
    shard_leases: dict[int, Lease] = field(default_factory=dict)
    #: Each listening replica's notice callback (as Postgres LISTEN connections).
    listeners: dict[str, Notice] = field(default_factory=dict)

    def notify(self, channel: str, sender: str) -> None:
        for on_notice in list(self.listeners.values()):
            on_notice(channel, sender)

    #: Bumped by every topic change (cluster_settings 'topics_version' in Postgres).
    topics_version: int = 0
    #: Every group's events, in the order stored (the group_events table).
    events: list[tuple[str, GroupEvent]] = field(default_factory=list)
    #: The last sequence drawn (the table's identity).
    event_sequence: int = 0


class MemoryStore:
    def __init__(self, replica_id: str = "memory", database: MemoryDatabase | None = None) -> None:
        self.replica_id = replica_id
        self.database = database if database is not None else MemoryDatabase()
        #: Transactions committed (as PostgresStore counts them).
        self.commits = 0
        #: While set, every call fails as with an unreachable database.
        self.down = False
        #: Each call named here (a method's name) fails so, before doing anything, that
        #: many more times.
        self.fail_calls: Counter[str] = Counter()
        #: While positive, each write commits, then fails (and counts down).
        self.commit_then_fail = 0

    def _reach(self, call: str) -> None:
        if self.fail_calls[call] > 0:
            self.fail_calls[call] -= 1
            raise StoreUnavailable(f"ConnectionResetError: the memory store failed {call}")
        if self.down:
            raise StoreUnavailable("ConnectionRefusedError: the memory store is down")

    def _committed(self) -> None:
        self.commits += 1
        if self.commit_then_fail > 0:
            self.commit_then_fail -= 1
            raise StoreUnavailable("ConnectionResetError: lost after the commit")

    async def ping(self) -> None:
        self._reach("ping")

    def _guard(self, group_id: str, records: Sequence[Record], fence: Fence, *, trims: bool = False) -> None:
        """As PostgresStore: the shard's lease must be this replica's at the fence's
        owner epoch and live by the database's clock; a lone step write (its
        one-statement path) also refuses a group that is not stored."""
        db = self.database
        lease = db.shard_leases.get(fence.shard)
        where = f"Group {group_id} (shard {fence.shard})"
        if lease is None:
            raise NotOwner(f"{where}: nobody holds the shard's lease.")
        if (lease.owner, lease.owner_epoch) != (self.replica_id, fence.owner_epoch):
            raise NotOwner(f"{where} is held by {lease.owner} at owner epoch {lease.owner_epoch}.")
        if lease.expired(db.clock()):
            raise NotOwner(f"{where}: the lease at owner epoch {fence.owner_epoch} expired.")
        lone_step = len(records) == 1 and type(records[0]) is CurrentAssignmentRecord and not trims
        if lone_step and group_id not in db.log:
            raise NotOwner(f"{where} is not stored.")

    async def append(
        self,
        group_id: str,
        records: Sequence[Record] | PreparedWrite,
        fence: Fence,
        events: Sequence[GroupEvent] = (),
        keep_events: int = 0,
    ) -> Sequence[int]:
        if isinstance(records, PreparedWrite):
            raise NotImplementedError("MemoryStore stores records, not prepared rows")
        self._reach("append")
        stored = [_as_stored(r) for r in records if not isinstance(r, SOFT_RECORDS)]
        if not stored and not events:
            return ()
        self._guard(group_id, stored, fence, trims=keep_events > 0)
        db = self.database
        sequences = self._store_events(group_id, events, keep_events)
        if not stored:
            self._committed()
            return sequences
        log = db.log.setdefault(group_id, [])
        for record in stored:
            if isinstance(record, GroupTombstone):
                log.clear()  # what the group was before is gone with its rows
            log.append(record)
        if len(log) == 1 and isinstance(log[0], GroupTombstone):  # deleted, not created again
            db.log.pop(group_id, None)
        self._committed()
        return sequences

    def _store_events(self, group_id: str, events: Sequence[GroupEvent], keep_events: int) -> list[int]:
        db = self.database
        sequences = list(range(db.event_sequence + 1, db.event_sequence + 1 + len(events)))
        db.event_sequence += len(events)
        db.events.extend((group_id, replace(e, sequence=s)) for e, s in zip(events, sequences, strict=True))
        if keep_events > 0 and events:
            mine = [e.sequence for g, e in db.events if g == group_id]
            if len(mine) > keep_events:
                cut = mine[-keep_events]
                db.events = [(g, e) for g, e in db.events if g != group_id or e.sequence >= cut]
        return sequences

    async def list_events(self, group_id: str, query: EventQuery) -> tuple[list[GroupEvent], bool]:
        self._reach("list_events")
        found = [e for g, e in self.database.events if g == group_id and query.matches(e)]
        if not query.oldest_first:
            found.reverse()
        return found[: query.limit], len(found) > query.limit

    async def expire_events(self, older_than_ms: int) -> int:
        self._reach("expire_events")
        before = len(self.database.events)
        self.database.events = [(g, e) for g, e in self.database.events if e.timestamp_ms >= older_than_ms]
        return before - len(self.database.events)

    async def group_ids(self) -> list[str]:
        self._reach("group_ids")
        return list(self.database.log)

    async def load_groups(self, group_ids: Collection[str] | None = None) -> dict[str, Group]:
        self._reach("load_groups")
        logs = self.database.log
        wanted = logs if group_ids is None else [g for g in group_ids if g in logs]
        groups = {gid: replay_all(None, gid, logs[gid]) for gid in wanted}
        return {gid: g for gid, g in groups.items() if g is not None}

    async def load_group(self, group_id: str) -> Group | None:
        self._reach("load_group")
        return replay_all(None, group_id, self.database.log.get(group_id, ()))

    async def load_topics(self) -> list[Topic]:
        self._reach("load_topics")
        return sorted(self.database.topics.values(), key=lambda t: t.name)

    async def put_topic(self, topic: Topic) -> None:
        self._reach("put_topic")
        topics = self.database.topics
        same_name = next((t for t in topics.values() if t.name == topic.name), None)
        if same_name is not None and same_name.topic_id != topic.topic_id:
            raise StoreConflict("topics_name_key", f"Topic name {topic.name!r} is taken")
        topics[topic.topic_id] = topic
        self.database.notify(TOPICS_CHANNEL, self.replica_id)
        self.database.topics_version += 1
        self._committed()

    async def delete_topic(self, topic_id: str) -> None:
        self._reach("delete_topic")
        self.database.topics.pop(topic_id, None)
        self.database.notify(TOPICS_CHANNEL, self.replica_id)
        self.database.topics_version += 1  # a statement-level trigger: even when nothing was deleted
        self._committed()

    async def shard_count(self, proposed: int) -> int:
        self._reach("shard_count")
        return int(self.database.settings.setdefault("shards", str(proposed)))

    async def lease_round(self, request: LeaseRequest) -> LeaseRound:
        self._reach("lease_round")
        answer = _lease_round(self.database, request)
        if request.release:
            self.database.notify(LEASES_CHANNEL, self.replica_id)
        return answer

    async def listen(self, on_notice: Notice) -> bool:
        self._reach("listen")
        listening = self.replica_id in self.database.listeners
        self.database.listeners[self.replica_id] = on_notice
        return not listening


def _lease_round(db: MemoryDatabase, request: LeaseRequest) -> LeaseRound:
    """regroup_lease_round (migrations/0005_shard_leases.sql, 0006_topics_version.sql),
    statement for statement."""
    replica_id, lease_ms = request.replica_id, request.lease_ms
    t = db.clock()
    expiry = t + lease_ms
    db.replicas[replica_id] = (request.address, expiry)
    leases = db.shard_leases
    granted: dict[int, int] = {}
    for shard in request.release:
        if shard in leases and leases[shard].owner == replica_id:
            del leases[shard]
    for shard, epoch in request.renew.items():
        lease = leases.get(shard)
        if (
            lease is not None
            and (lease.owner, lease.owner_epoch) == (replica_id, epoch)
            and lease.expires_at_ms > t
        ):
            leases[shard] = Lease(shard, replica_id, epoch, expiry)
            granted[shard] = epoch
    for shard in dict.fromkeys(request.acquire):
        db.owner_epochs += 1  # drawn whether or not the shard is free, as nextval is
        lease = leases.get(shard)
        if lease is None or lease.expires_at_ms <= t:
            leases[shard] = Lease(shard, replica_id, db.owner_epochs, expiry)
            granted[shard] = db.owner_epochs
    return LeaseRound(
        db_now_ms=t,
        granted=dict(sorted(granted.items())),
        leases=dict(sorted(leases.items())),
        live={r: a for r, (a, until) in sorted(db.replicas.items()) if until > t},
        topics_version=db.topics_version,
    )


def _as_stored(record: Record) -> Record:
    """The record as Postgres keeps it: when a target was computed, and its
    summary, are not stored."""
    if isinstance(record, TargetAssignmentEpochRecord) and (
        record.computed_at_ms is not None or record.summary is not None
    ):
        return TargetAssignmentEpochRecord(record.assignment_epoch)
    return record


def _conforms(store: MemoryStore) -> GroupStore:
    return store  # mypy checks that MemoryStore keeps the runtime's contract
