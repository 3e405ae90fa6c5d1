"""The Postgres store: loads groups and topics, and appends an operation's records.

Every operation's records are written in one transaction, after a guard that
checks this replica still holds the lease of the group's shard at the owner
epoch it was given (the fence), and that the lease is live by the database's
clock. Records are coalesced per row first, so a transaction writes each row at
most once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

import asyncpg
import structlog

from regroup.reconciler import Group, Record, Topic, replay_all
from regroup.reconciler.history import GroupEvent
from regroup.reconciler.model import Assignment, ClientAssignor, MemberMetadata, MemberState
from regroup.reconciler.records import (
    AssignorStateRecord,
    ConnectorsRecord,
    CurrentAssignmentRecord,
    CurrentAssignmentTombstone,
    GroupMetadataRecord,
    GroupTombstone,
    MemberMetadataRecord,
    MemberMetadataTombstone,
    OffsetCommitRecord,
    OffsetTombstone,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
    TargetAssignmentMemberTombstone,
)
from regroup.reconciler.subscription import canonical_names

from . import sql
from .history import EventQuery, event_from_row, event_row
from .leases import LeaseRequest, LeaseRound, lease_round_from_json

log = structlog.get_logger("regroup")

#: A notice from a replica: (channel, the sender's replica id); see sql.TOPICS_CHANNEL.
Notice = Callable[[str, str], None]

#: A connection taken from the pool.
Conn: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"


class StoreUnavailable(Exception):
    """The store could not be reached or the transaction failed; retry later."""


class NotOwner(Exception):
    """This replica no longer holds the lease of the group's shard at the fence's
    owner epoch (or the lease expired by the database's clock); nothing was written."""


@dataclass(frozen=True, slots=True)
class Fence:
    """What a write for a group is fenced by: its shard, and the owner epoch at which
    this replica holds the shard's lease (a token that only grows)."""

    shard: int
    owner_epoch: int


class StoreConflict(Exception):
    """Postgres refused the write for a constraint (another writer got there first).

    Unlike StoreUnavailable, nothing is in doubt (the transaction rolled back) and
    retrying the same write fails the same way: the caller answers the real reason.
    """

    def __init__(self, constraint: str, message: str) -> None:
        super().__init__(message)
        #: The violated constraint's name, e.g. "topics_name_key".
        self.constraint = constraint


def _database_error(e: BaseException) -> StoreUnavailable | StoreConflict:
    """The one mapping of a failed call to Postgres."""
    if isinstance(e, asyncpg.IntegrityConstraintViolationError):
        return StoreConflict(e.constraint_name or "", f"{type(e).__name__}: {e}")
    return StoreUnavailable(f"{type(e).__name__}: {e}")


class GroupStore(Protocol):
    """What the coordinator runtime needs from a store: `PostgresStore`, and
    `memstore.MemoryStore` for tests of the runtime without a database.

    Writes raise StoreUnavailable (retriable; a commit may or may not have
    happened), StoreConflict (refused for a constraint; nothing committed) or
    NotOwner (the fence failed: the shard's lease is not this replica's at that
    owner epoch, or it expired)."""

    replica_id: str

    async def append(
        self,
        group_id: str,
        records: Sequence[Record] | PreparedWrite,
        fence: Fence,
        events: Sequence[GroupEvent] = (),
        keep_events: int = 0,
    ) -> Sequence[int]:
        """Stores one operation's records and its `events` in one transaction; answers the
        events' sequences. With `keep_events`, also drops the group's events beyond its
        newest `keep_events`."""
        ...

    async def list_events(self, group_id: str, query: EventQuery) -> tuple[list[GroupEvent], bool]:
        """A group's events (also a deleted group's) as `query` asks, and whether more match."""
        ...

    async def expire_events(self, older_than_ms: int) -> int:
        """Deletes every group's events older than `older_than_ms` (wall ms); answers how many."""
        ...

    async def group_ids(self) -> list[str]:
        """Every stored group's id (a takeover picks its shards' groups from them)."""
        ...

    async def load_groups(self, group_ids: Collection[str] | None = None) -> dict[str, Group]:
        """The groups named (every group with None), rebuilt from their stored rows."""
        ...

    async def load_group(self, group_id: str) -> Group | None: ...
    async def load_topics(self) -> list[Topic]: ...
    async def put_topic(self, topic: Topic) -> None: ...
    async def delete_topic(self, topic_id: str) -> None: ...
    async def ping(self) -> None:
        """One round trip; raises StoreUnavailable when the store cannot be reached."""
        ...

    async def shard_count(self, proposed: int) -> int:
        """The database's shard count: `proposed` if none is stored yet (the first start)."""
        ...

    async def lease_round(self, request: LeaseRequest) -> LeaseRound:
        """One renewal period in one statement: register, renew, release, acquire the
        free shards asked for, then read every lease and the live replicas. A round
        that releases shards also notices the other replicas (LEASES_CHANNEL)."""
        ...

    async def listen(self, on_notice: Notice) -> bool:
        """Delivers the replicas' notices (channel, sender replica id) to `on_notice`.
        Called again, it only checks that it still listens; True when it (re)started
        listening, so that the caller catches up with what it may have missed."""
        ...


def encode_assignment(assignment: Assignment) -> str:
    if not assignment:  # most pending revocations: skips building an encoder
        return "{}"
    return json.dumps({t: sorted(p) for t, p in sorted(assignment.items())}, separators=(",", ":"))


def decode_assignment(value: str | dict[str, list[int]]) -> Assignment:
    raw = json.loads(value) if isinstance(value, str) else value
    return {t: frozenset(p) for t, p in raw.items() if p}


def encode_client_assignors(assignors: tuple[ClientAssignor, ...]) -> str:
    return json.dumps(
        [
            {
                "name": a.name,
                "minimum_version": a.minimum_version,
                "maximum_version": a.maximum_version,
                "reason": a.reason,
                "version": a.version,
                "metadata": base64.b64encode(a.metadata).decode(),
            }
            for a in assignors
        ],
        separators=(",", ":"),
    )


def decode_client_assignors(value: str | list[dict[str, Any]]) -> tuple[ClientAssignor, ...]:
    raw = json.loads(value) if isinstance(value, str) else value
    return tuple(
        ClientAssignor(
            name=a["name"],
            minimum_version=a["minimum_version"],
            maximum_version=a["maximum_version"],
            reason=a["reason"],
            version=a["version"],
            metadata=base64.b64decode(a["metadata"]),
        )
        for a in raw
    )


@dataclass
class _GroupRow:
    group_type: str | None = None
    group_epoch: int | None = None
    metadata_hash: int | None = None
    assignment_epoch: int | None = None
    assignor_state: bytes | None = None
    assignment_error: str | None = None


@dataclass
class _Batch:
    """An operation's records coalesced per row: the last write of a row wins."""

    group: _GroupRow | None = None
    delete_group: bool = False
    members: dict[str, MemberMetadataRecord | None] = field(default_factory=dict)
    targets: dict[str, Assignment | None] = field(default_factory=dict)
    current: dict[str, CurrentAssignmentRecord | None] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetCommitRecord | None] = field(default_factory=dict)
    connectors: ConnectorsRecord | None = None

    @classmethod
    def of(cls, records: Iterable[Record]) -> _Batch:
        batch = cls()
        for record in records:
            batch._add(record)
        return batch

    def _row(self) -> _GroupRow:
        if self.group is None:
            self.group = _GroupRow()
        return self.group

    def _add(self, record: Record) -> None:
        match record:
            case GroupMetadataRecord():
                row = self._row()
                row.group_type = record.group_type
                row.group_epoch = record.group_epoch
                row.metadata_hash = record.metadata_hash
                self.delete_group = False
            case TargetAssignmentEpochRecord():
                self._row().assignment_epoch = record.assignment_epoch
            case AssignorStateRecord():
                row = self._row()
                row.assignor_state = record.state
                row.assignment_error = record.error
            case GroupTombstone():
                self.delete_group = True
            case MemberMetadataRecord():
                self.members[record.member_id] = record
            case MemberMetadataTombstone():
                self.members[record.member_id] = None
            case TargetAssignmentMemberRecord():
                self.targets[record.member_id] = record.partitions
            case TargetAssignmentMemberTombstone():
                self.targets[record.member_id] = None
            case CurrentAssignmentRecord():
                self.current[record.member_id] = record
            case CurrentAssignmentTombstone():
                self.current[record.member_id] = None
            case OffsetCommitRecord():
                self.offsets[(record.topic_id, record.partition)] = record
            case OffsetTombstone():
                self.offsets[(record.topic_id, record.partition)] = None
            case ConnectorsRecord():
                self.connectors = record
            case _:
                pass  # soft records (ComputationRecord) live in memory only


@dataclass
class PreparedWrite:
    """An operation's records as the rows to write, JSON already encoded.

    Preparing is pure CPU work, so a large write (a big group's new target)
    can be prepared off the event loop.
    """

    group_row: tuple[Any, ...] | None
    delete_group: bool
    deletes: list[tuple[str, list[str]]]
    upserts: list[tuple[str, list[tuple[Any, ...]]]]
    offset_deletes: list[tuple[str, int]] = field(default_factory=list)
    #: A Connect group's connectors, replacing its stored ones (None: unchanged).
    connectors: list[tuple[str, str, int]] | None = None

    def is_empty(self) -> bool:
        return (
            self.group_row is None
            and not self.delete_group
            and not self.deletes
            and not self.upserts
            and not self.offset_deletes
            and self.connectors is None
        )

    def is_single_current_assignment(self) -> bool:
        return (
            self.group_row is None
            and not self.delete_group
            and not self.deletes
            and not self.offset_deletes
            and self.connectors is None
            and len(self.upserts) == 1
            and self.upserts[0][0] is sql.UPSERT_CURRENT
            and len(self.upserts[0][1]) == 1
        )


def _current_row(group_id: str, c: CurrentAssignmentRecord) -> tuple[Any, ...]:
    return (
        group_id,
        c.member_id,
        int(c.state),
        c.member_epoch,
        c.previous_member_epoch,
        encode_assignment(c.assigned),
        encode_assignment(c.pending_revocation),
    )


def _member_row(group_id: str, member_id: str, m: MemberMetadata) -> tuple[Any, ...]:
    """A members row (sql.UPSERT_MEMBER's columns) from the member's metadata."""
    return (
        group_id,
        member_id,
        m.instance_id,
        m.rack_id,
        m.client_id,
        m.client_host,
        list(m.subscribed_topic_names),
        m.subscribed_topic_regex,
        m.server_assignor,
        m.rebalance_timeout_ms,
        encode_client_assignors(m.client_assignors),
        m.url,
        m.draining,
        m.capacity,
        m.replicas,
        m.require_co_partitioning,
    )


def _member_metadata(row: Any) -> MemberMetadata:
    """A member's metadata from its members row (the inverse of `_member_row`)."""
    return MemberMetadata(
        instance_id=row["instance_id"],
        rack_id=row["rack_id"],
        client_id=row["client_id"],
        client_host=row["client_host"],
        subscribed_topic_names=canonical_names(tuple(row["subscribed_topic_names"])),
        subscribed_topic_regex=row["subscribed_topic_regex"],
        server_assignor=row["server_assignor"],
        rebalance_timeout_ms=row["rebalance_timeout_ms"],
        client_assignors=decode_client_assignors(row["client_assignors"]),
        url=row["url"],
        draining=row["draining"],
        capacity=row["capacity"],
        replicas=row["replicas"],
        require_co_partitioning=row["require_co_partitioning"],
    )


def prepare_write(group_id: str, records: Sequence[Record]) -> PreparedWrite:
    if len(records) == 1 and type(records[0]) is CurrentAssignmentRecord:
        # A member's reconciliation step, the most frequent write: its row directly,
        # without coalescing a batch of one (with the runtime's plain try, about 0.9x
        # a step's CPU in-process, measured with bench/steps.py).
        return PreparedWrite(None, False, [], [(sql.UPSERT_CURRENT, [_current_row(group_id, records[0])])])
    batch = _Batch.of(records)
    row = batch.group
    group_row = None
    if row is not None and not batch.delete_group:
        group_row = (
            group_id,
            row.group_type,
            row.group_epoch,
            row.metadata_hash,
            row.assignment_epoch,
            row.assignor_state,
            row.assignment_error,
        )
    deletes = [
        (table, member_ids)
        for table, member_ids in (
            ("members", [m for m, r in batch.members.items() if r is None]),
            ("target_assignments", [m for m, t in batch.targets.items() if t is None]),
            ("current_assignments", [m for m, c in batch.current.items() if c is None]),
        )
        if member_ids
    ]
    members = [
        _member_row(group_id, r.member_id, r.metadata) for r in batch.members.values() if r is not None
    ]
    targets = [(group_id, m, encode_assignment(t)) for m, t in batch.targets.items() if t is not None]
    current = [_current_row(group_id, c) for c in batch.current.values() if c is not None]
    offsets = [
        (group_id, o.topic_id, o.partition, o.offset, o.metadata, o.member_epoch, o.commit_ms)
        for o in batch.offsets.values()
        if o is not None
    ]
    upserts = [
        (sql, rows)
        for sql, rows in (
            (sql.UPSERT_MEMBER, members),
            (sql.UPSERT_TARGET, targets),
            (sql.UPSERT_CURRENT, current),
            (sql.UPSERT_OFFSET, offsets),
        )
        if rows
    ]
    offset_deletes = sorted(k for k, o in batch.offsets.items() if o is None)
    connectors = None
    if batch.connectors is not None and not batch.delete_group:
        connectors = [(group_id, name, tasks) for name, tasks in batch.connectors.connectors]
    return PreparedWrite(group_row, batch.delete_group, deletes, upserts, offset_deletes, connectors)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """How a pooled connection is reset when released: not at all.

    asyncpg's default sends RESET ALL, UNLISTEN *, CLOSE ALL and
    pg_advisory_unlock_all() after every use: a second round trip (and a
    transaction Postgres counts) for each one-statement write, which made the
    most frequent write cost 1.3-1.4 x the client's and Postgres' CPU
    (measured). The store leaves no session state to reset: no SET, LISTEN,
    cursor or advisory lock outside a transaction (the migrations' lock is taken
    on a connection of their own). asyncpg still rolls back a transaction left open.
    """


#: What a failed call to Postgres raises: the store answers them as unavailable (retriable).
#: asyncpg's InternalClientError included: a connection whose server went away while it
#: sat idle can report that as "another operation is in progress" on its next use.
DATABASE_ERRORS = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)

#: Connections the store keeps out of the pool for the one-statement step write.
HELD_CONNECTIONS = 2


class PostgresStore:
    def __init__(self, pool: asyncpg.Pool, replica_id: str, *, close_timeout_s: float = 10.0) -> None:
        self._pool = pool
        self.replica_id = replica_id or f"regroup-{uuid.uuid4()}"
        #: Transactions committed by this store (for tests and benchmarks).
        self.commits = 0
        #: Free connections held out of the pool for the step write, and how many are held
        #: (at most HELD_CONNECTIONS, and never the pool's last connection).
        self._held: list[Conn] = []
        self._held_count = 0
        self._held_limit = max(0, min(HELD_CONNECTIONS, pool.get_max_size() - 1))
        self._closing = False
        #: How long `close` waits for connections in use before it terminates them.
        self.close_timeout_s = close_timeout_s
        #: Where `listen` connects (set by `connect`), and its connection.
        self.dsn: str | None = None
        self._listener: asyncpg.Connection | None = None

    @classmethod
    async def connect(
        cls, dsn: str, replica_id: str = "", max_size: int = 8, timeout_s: float = 10.0
    ) -> PostgresStore:
        """A pool whose connecting and every statement give up after `timeout_s`: a
        database lost behind a silent network must fail requests, not hang them."""
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=1,
                max_size=max_size,
                reset=_keep_session,
                timeout=timeout_s,
                command_timeout=timeout_s,
            )
        except (OSError, asyncpg.PostgresError) as e:
            raise StoreUnavailable(f"Cannot connect to Postgres: {e}") from e
        store = cls(pool, replica_id, close_timeout_s=timeout_s)
        store.dsn = dsn
        return store

    async def close(self) -> None:
        # The pool's close waits for every connection to come back: a write still
        # in flight gives its held one back instead of keeping it.
        self._closing = True
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.terminate()
        while self._held:
            await self._unhold(self._held.pop())
        try:
            async with asyncio.timeout(self.close_timeout_s):
                await self._pool.close()
        except TimeoutError:
            # A connection stuck in a call the database never answers must not keep the
            # service from stopping; asyncpg's close terminates the pool when cancelled.
            log.warning("store_close_timed_out", timeout_s=self.close_timeout_s)

    async def _take_held(self) -> Conn | None:
        """A connection for the step write, kept out of the pool between writes:
        taking one from the pool and giving it back (a task to shield the release,
        a timer, a proxy) cost about 60 us of this process's CPU per write, half
        the statement's own, and a step's whole cost fell by a fifth (measured).
        None when every connection the store may hold is in use."""
        while self._held:
            conn = self._held.pop()
            with contextlib.suppress(asyncpg.InterfaceError):  # a proxy asyncpg detached
                if not conn.is_closed():
                    return conn
            # Its server closed it while it sat here. Released all the same: asyncpg says a
            # protocol abort may close a connection without giving it back, and the pool's
            # close would wait for it forever.
            await self._unhold(conn)
        if self._held_count >= self._held_limit:
            return None
        self._held_count += 1
        try:
            return await self._pool.acquire()
        except BaseException:
            self._held_count -= 1
            raise

    async def _give_back_held(self, conn: Conn) -> None:
        if self._closing:
            await self._unhold(conn)
        else:
            self._held.append(conn)

    async def _unhold(self, conn: Conn) -> None:
        self._held_count -= 1
        with contextlib.suppress(Exception):
            await self._pool.release(conn)

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Conn]:
        """A pooled connection in a transaction; failures mapped by `_database_error`."""
        async with self._connection() as conn, conn.transaction():
            yield conn
        self.commits += 1

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        """A pooled connection. Every call to Postgres runs in one of these (or, on the
        step write's hot path, maps its failures itself): a failure the runtime does not
        know must never reach a client as INTERNAL."""
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except (NotOwner, StoreUnavailable, StoreConflict):
            raise
        except DATABASE_ERRORS as e:
            raise _database_error(e) from e

    # -- the shard fence -----------------------------------------------------

    async def _append_current_assignment(
        self, group_id: str, row: tuple[Any, ...], fence: Fence, events: Sequence[GroupEvent] = ()
    ) -> Sequence[int]:
        """The most frequent write (one member's reconciliation step) in one statement,
        with its events if it has any (it reached the target); answers their sequences.

        One round trip instead of four (begin, guard, upsert, commit): the fence
        is a CTE that locks the shard's lease FOR SHARE, so a replica taking the
        shard over waits for this write, and a write from a replica that lost
        the shard inserts nothing.
        """
        args: tuple[Any, ...] = (*row, fence.shard, self.replica_id, fence.owner_epoch)
        if events:
            rows = [event_row(e) for e in events]
            args += tuple(list(column) for column in zip(*rows, strict=True))
        sequences: Sequence[int] = ()
        try:
            conn = await self._take_held()
            if conn is None:  # every held connection is busy: an ordinary pooled one
                async with self._pool.acquire() as pooled:
                    written, sequences = await self._step(pooled, args, bool(events))
            else:
                try:
                    written, sequences = await self._step(conn, args, bool(events))
                except BaseException:
                    # Back to the pool, which resets or replaces a connection left in doubt.
                    await self._unhold(conn)
                    raise
                await self._give_back_held(conn)
        except DATABASE_ERRORS as e:
            raise _database_error(e) from e
        if not written:
            async with self._connection() as conn:
                lease = await conn.fetchrow(sql.SHARD_LEASE, fence.shard)
            raise NotOwner(_fence_failed(group_id, fence, self.replica_id, lease, lone_step=True))
        self.commits += 1
        return sequences

    @staticmethod
    async def _step(conn: Conn, args: tuple[Any, ...], with_events: bool) -> tuple[bool, Sequence[int]]:
        """Runs the one-statement step: (whether the fenced upsert wrote, the events' sequences)."""
        if not with_events:
            status = await conn.execute(sql.GUARDED_UPSERT_CURRENT, *args)
            return not status.endswith(" 0"), ()
        row = await conn.fetchrow(sql.GUARDED_UPSERT_CURRENT_WITH_EVENTS, *args)
        assert row is not None
        return bool(row["written"]), list(row["sequences"])

    async def _guard(self, conn: Conn, group_id: str, fence: Fence) -> None:
        lease = await conn.fetchrow(sql.LOCK_SHARD_LEASE, fence.shard)
        if (
            lease is None
            or (lease["owner"], lease["owner_epoch"]) != (self.replica_id, fence.owner_epoch)
            or not lease["live"]
        ):
            raise NotOwner(_fence_failed(group_id, fence, self.replica_id, lease))

    # -- groups ----------------------------------------------------------------

    async def append(
        self,
        group_id: str,
        records: Sequence[Record] | PreparedWrite,
        fence: Fence,
        events: Sequence[GroupEvent] = (),
        keep_events: int = 0,
    ) -> Sequence[int]:
        """Stores one operation's records and events in one transaction, fenced by `fence`."""
        write = records if isinstance(records, PreparedWrite) else prepare_write(group_id, records)
        if write.is_empty() and not events:
            return ()  # only soft records: nothing to store
        if write.is_single_current_assignment() and not keep_events:
            return await self._append_current_assignment(group_id, write.upserts[0][1][0], fence, events)
        async with self._transaction() as conn:
            await self._write(conn, group_id, write, fence)
            if not events:
                return ()
            return await self._insert_events(conn, group_id, events, keep_events)

    async def _insert_events(
        self, conn: Conn, group_id: str, events: Sequence[GroupEvent], keep_events: int
    ) -> list[int]:
        rows = [event_row(e) for e in events]
        inserted = await conn.fetch(
            sql.INSERT_EVENTS, group_id, *(list(column) for column in zip(*rows, strict=True))
        )
        if keep_events > 0:
            await conn.execute(sql.TRIM_GROUP_EVENTS, group_id, keep_events)
        return sorted(row["sequence"] for row in inserted)

    async def _write(self, conn: Conn, group_id: str, write: PreparedWrite, fence: Fence) -> None:
        await self._guard(conn, group_id, fence)
        if write.group_row is not None:
            await conn.execute(sql.UPSERT_GROUP, *write.group_row, self.replica_id, fence.owner_epoch)
        for table, member_ids in write.deletes:
            await conn.execute(sql.DELETE_MEMBER_ROWS[table], group_id, member_ids)
        if write.offset_deletes:
            await conn.execute(
                sql.DELETE_OFFSETS,
                group_id,
                [t for t, _ in write.offset_deletes],
                [p for _, p in write.offset_deletes],
            )
        for statement, rows in write.upserts:
            if len(rows) == 1:
                await conn.execute(statement, *rows[0])
            else:
                await conn.executemany(statement, rows)
        if write.connectors is not None:
            await conn.execute(sql.DELETE_CONNECTORS, group_id)
            if write.connectors:
                await conn.executemany(sql.INSERT_CONNECTOR, write.connectors)
        if write.delete_group:
            await conn.execute(sql.DELETE_GROUP, group_id)

    async def list_events(self, group_id: str, query: EventQuery) -> tuple[list[GroupEvent], bool]:
        order = "ASC" if query.oldest_first else "DESC"
        statement = f"{sql.SELECT_EVENTS} ORDER BY sequence {order} LIMIT $7"
        async with self._connection() as conn:
            rows = await conn.fetch(
                statement,
                group_id,
                query.after_sequence,
                query.before_sequence,
                query.since_ms,
                query.until_ms,
                list(query.types),
                query.limit + 1,
            )
        return [event_from_row(r) for r in rows[: query.limit]], len(rows) > query.limit

    async def expire_events(self, older_than_ms: int) -> int:
        async with self._connection() as conn:
            status = await conn.execute(sql.EXPIRE_EVENTS, older_than_ms)
        return int(status.rsplit(" ", 1)[-1])

    async def group_ids(self) -> list[str]:
        async with self._connection() as conn:
            return [row["group_id"] for row in await conn.fetch(sql.GROUP_IDS)]

    async def load_groups(self, group_ids: Collection[str] | None = None) -> dict[str, Group]:
        """Rebuilds the groups named (every group with None) by replaying their stored rows."""
        if group_ids is not None and not group_ids:
            return {}
        async with self._connection() as conn:
            return await self._load(conn, None if group_ids is None else list(group_ids))

    async def load_group(self, group_id: str) -> Group | None:
        async with self._connection() as conn:
            groups = await self._load(conn, group_id)
        return groups.get(group_id)

    async def ping(self) -> None:
        """One round trip to Postgres; raises StoreUnavailable when it fails."""
        async with self._connection() as conn:
            await conn.fetchval(sql.PING)

    async def _load(self, conn: Conn, which: str | list[str] | None) -> dict[str, Group]:
        # The statement for every group, for one, or for some.
        one, args = (0, []) if which is None else (1, [which]) if isinstance(which, str) else (2, [which])
        records: dict[str, list[Record]] = {}
        for row in await conn.fetch(sql.LOAD_GROUPS[one], *args):
            records[row["group_id"]] = [
                GroupMetadataRecord(row["group_epoch"], row["metadata_hash"], row["group_type"]),
                TargetAssignmentEpochRecord(row["assignment_epoch"]),
                AssignorStateRecord(bytes(row["assignor_state"]), row["assignment_error"]),
            ]
        connectors: dict[str, list[tuple[str, int]]] = {}
        for row in await conn.fetch(sql.LOAD_CONNECTORS[one], *args):
            connectors.setdefault(row["group_id"], []).append((row["name"], row["tasks"]))
        for gid, rows in connectors.items():
            records[gid].append(ConnectorsRecord(tuple(rows)))
        for row in await conn.fetch(sql.LOAD_MEMBERS[one], *args):
            records[row["group_id"]].append(MemberMetadataRecord(row["member_id"], _member_metadata(row)))
        for row in await conn.fetch(sql.LOAD_TARGET_ASSIGNMENTS[one], *args):
            records[row["group_id"]].append(
                TargetAssignmentMemberRecord(row["member_id"], decode_assignment(row["partitions"]))
            )
        for row in await conn.fetch(sql.LOAD_CURRENT_ASSIGNMENTS[one], *args):
            records[row["group_id"]].append(
                CurrentAssignmentRecord(
                    member_id=row["member_id"],
                    state=MemberState.decode(row["state"]),
                    member_epoch=row["member_epoch"],
                    previous_member_epoch=row["previous_member_epoch"],
                    assigned=decode_assignment(row["assigned"]),
                    pending_revocation=decode_assignment(row["pending_revocation"]),
                )
            )
        for row in await conn.fetch(sql.LOAD_OFFSETS[one], *args):
            records[row["group_id"]].append(
                OffsetCommitRecord(
                    row["topic_id"],
                    row["partition"],
                    row["offset"],
                    row["metadata"],
                    row["member_epoch"],
                    row["commit_ms"],
                )
            )
        groups: dict[str, Group] = {}
        for gid, group_records in records.items():
            group = replay_all(None, gid, group_records)
            if group is not None:
                groups[gid] = group
        return groups

    # -- topics ----------------------------------------------------------------

    async def load_topics(self) -> list[Topic]:
        async with self._connection() as conn:
            rows = await conn.fetch(sql.LOAD_TOPICS)
        return [
            Topic(str(r["topic_id"]), r["name"], r["num_partitions"], tuple(r["partition_racks"]))
            for r in rows
        ]

    async def put_topic(self, topic: Topic) -> None:
        async with self._transaction() as conn:
            await conn.execute(
                sql.UPSERT_TOPIC,
                uuid.UUID(topic.topic_id),
                topic.name,
                topic.num_partitions,
                list(topic.partition_racks),
            )
            await conn.execute(sql.NOTIFY, sql.TOPICS_CHANNEL, self.replica_id)  # sent at the commit

    async def delete_topic(self, topic_id: str) -> None:
        async with self._transaction() as conn:
            await conn.execute(sql.DELETE_TOPIC, uuid.UUID(topic_id))
            await conn.execute(sql.NOTIFY, sql.TOPICS_CHANNEL, self.replica_id)

    # -- notices between replicas ----------------------------------------------------

    async def listen(self, on_notice: Notice) -> bool:
        if self._listener is not None and not self._listener.is_closed():
            return False
        if self.dsn is None or self._closing:
            return False

        def deliver(_conn: Any, _pid: int, channel: str, payload: object) -> None:
            on_notice(channel, str(payload))

        def lost(_conn: Any) -> None:
            # Notices sent from now on would be missed: the caller listens again soon.
            on_notice(sql.LISTEN_LOST, "")

        try:
            conn = await asyncpg.connect(self.dsn, timeout=self.close_timeout_s)
        except DATABASE_ERRORS as e:
            raise _database_error(e) from e
        try:
            for channel in (sql.TOPICS_CHANNEL, sql.LEASES_CHANNEL):
                await conn.add_listener(channel, deliver)
            conn.add_termination_listener(lost)
        except BaseException as e:
            # Connected, then lost (the database went away between the two): the
            # connection is nobody's, so it is closed here rather than left to the GC.
            conn.terminate()
            if isinstance(e, DATABASE_ERRORS):
                raise _database_error(e) from e
            raise
        if self._closing:
            conn.terminate()
            return False
        self._listener = conn
        return True

    # -- introspection -----------------------------------------------------------

    # -- shards and leases ----------------------------------------------------

    async def shard_count(self, proposed: int) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(sql.SHARD_COUNT, str(proposed)))

    async def lease_round(self, request: LeaseRequest) -> LeaseRound:
        r = request
        args = (
            r.replica_id,
            r.address,
            r.lease_ms,
            list(r.renew),
            list(r.renew.values()),
            list(r.release),
            list(r.acquire),
        )
        if not r.release:  # the round of every period: one statement
            async with self._connection() as conn:
                raw = await conn.fetchval(sql.LEASE_ROUND, *args)
        else:
            async with self._transaction() as conn:
                raw = await conn.fetchval(sql.LEASE_ROUND, *args)
                await conn.execute(sql.NOTIFY, sql.LEASES_CHANNEL, r.replica_id)
        return lease_round_from_json(json.loads(raw))

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        async with self._connection() as conn:
            return list(await conn.fetch(sql, *args))


def _fence_failed(
    group_id: str, fence: Fence, replica_id: str, lease: Any, *, lone_step: bool = False
) -> str:
    """Why a fenced write was refused, for NotOwner."""
    where = f"Group {group_id} (shard {fence.shard})"
    if lease is None:
        return f"{where}: nobody holds the shard's lease."
    if (lease["owner"], lease["owner_epoch"]) != (replica_id, fence.owner_epoch):
        return f"{where} is held by {lease['owner']} at owner epoch {lease['owner_epoch']}."
    if not lease["live"]:
        return f"{where}: the lease at owner epoch {fence.owner_epoch} expired."
    return f"{where} is not stored." if lone_step else f"{where}: fenced."


def _conforms(store: PostgresStore) -> GroupStore:
    return store  # mypy checks that PostgresStore keeps the runtime's contract
