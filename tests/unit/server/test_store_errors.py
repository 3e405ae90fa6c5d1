"""Every call PostgresStore makes to Postgres goes through one error mapping: a database
that cannot be reached is StoreUnavailable (COORDINATOR_NOT_AVAILABLE to clients), never
an asyncpg or OS error that the service would answer as INTERNAL."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from regroup.reconciler import Topic
from regroup.reconciler.model import MemberState
from regroup.reconciler.records import CurrentAssignmentRecord, GroupMetadataRecord
from regroup.server.history import EventQuery
from regroup.server.leases import LeaseRequest
from regroup.server.store import Fence, GroupStore, PostgresStore, StoreUnavailable


def _refusing_dsn() -> str:
    """A DSN whose port nothing listens on: every connection attempt is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://regroup@127.0.0.1:{port}/regroup"


@pytest.fixture
async def unreachable() -> AsyncIterator[PostgresStore]:
    # min_size=0: the pool connects on first use, as one whose database went away reconnects.
    dsn = _refusing_dsn()
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=2, timeout=2)
    store = PostgresStore(pool, "r", close_timeout_s=1)
    store.dsn = dsn
    yield store
    await store.close()


TOPIC = Topic(str(uuid.uuid4()), "t", 1)
STEP = CurrentAssignmentRecord("m", MemberState.STABLE, 2, 1, {}, {})
FENCE = Fence(0, 1)

#: Every method of the store contract, called as the runtime calls it.
CALLS: dict[str, Callable[[GroupStore], Awaitable[Any]]] = {
    "append": lambda s: s.append("g", [GroupMetadataRecord(1, 0, "consumer")], FENCE),
    "list_events": lambda s: s.list_events("g", EventQuery()),
    "expire_events": lambda s: s.expire_events(0),
    "group_ids": lambda s: s.group_ids(),
    "load_groups": lambda s: s.load_groups(),
    "load_group": lambda s: s.load_group("g"),
    "load_topics": lambda s: s.load_topics(),
    "put_topic": lambda s: s.put_topic(TOPIC),
    "delete_topic": lambda s: s.delete_topic(TOPIC.topic_id),
    "ping": lambda s: s.ping(),
    "shard_count": lambda s: s.shard_count(64),
    "listen": lambda s: s.listen(lambda channel, sender: None),
    "lease_round": lambda s: s.lease_round(LeaseRequest("r", "127.0.0.1:1", 1_000, {0: 1}, [1], [2])),
}


def test_every_method_of_the_contract_is_covered() -> None:
    methods = {
        name for name, value in vars(GroupStore).items() if callable(value) and not name.startswith("_")
    }
    assert methods == set(CALLS)


@pytest.mark.parametrize("method", sorted(CALLS))
async def test_an_unreachable_database_is_store_unavailable(unreachable: PostgresStore, method: str) -> None:
    with pytest.raises(StoreUnavailable):
        await CALLS[method](unreachable)


async def test_the_one_statement_step_write_maps_its_failures_too(unreachable: PostgresStore) -> None:
    # The most frequent write skips the transaction (and its context manager) on purpose.
    with pytest.raises(StoreUnavailable):
        await unreachable.append("g", [STEP], FENCE)
    with pytest.raises(StoreUnavailable):
        await unreachable.fetch("SELECT 1")


class _LostWhileListening:
    """A connection that was made, then lost before it listened."""

    def __init__(self) -> None:
        self.terminated = False

    async def add_listener(self, channel: str, callback: Any) -> None:
        raise asyncpg.exceptions.ConnectionDoesNotExistError(
            "connection was closed in the middle of operation"
        )

    def terminate(self) -> None:
        self.terminated = True


async def test_a_listener_connection_lost_before_it_listens_is_closed_not_leaked(
    unreachable: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in CI under a store outage: connected, then the database went away before
    LISTEN; the connection was left to the GC (ResourceWarning: unclosed connection)."""
    lost = _LostWhileListening()

    async def connect(*args: Any, **kwargs: Any) -> _LostWhileListening:
        return lost

    monkeypatch.setattr(asyncpg, "connect", connect)
    with pytest.raises(StoreUnavailable):
        await unreachable.listen(lambda channel, sender: None)
    assert lost.terminated
