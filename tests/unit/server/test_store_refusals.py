"""Every request the store failed is refused with the one documented message.

Whatever failed (a refused socket, a connection reset, an embedded Postgres
stopped under the driver, which says "FileNotFoundError: [Errno 2] No such file
or directory"), the answer is COORDINATOR_NOT_AVAILABLE with README.md's message
("When Postgres is away"): the failure itself goes to the log, not to clients.
The store fails here without the coordinator knowing it yet (its watch last saw
it answer), so each request tries it and finds it failing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from regroup.reconciler import ApiError, ConsumerGroupHeartbeat, GroupConfig
from regroup.reconciler.errors import CoordinatorNotAvailable
from regroup.server.clock import ManualClock
from regroup.server.history import EventQuery
from regroup.server.memstore import MemoryStore
from regroup.server.runtime import Coordinator
from regroup.server.store import StoreUnavailable
from regroup.server.writepath import STORE_UNREACHABLE
from tests.support.leases import MANUAL_LEASES

#: What asyncpg raises when the Unix socket of a stopped embedded Postgres is gone.
DRIVER_TEXT = "FileNotFoundError: [Errno 2] No such file or directory"


class FailingStore(MemoryStore):
    """A memory store that, while `failing`, fails every call as the driver does."""

    failing = False

    def _reach(self, call: str) -> None:
        if self.failing:
            raise StoreUnavailable(DRIVER_TEXT)
        super()._reach(call)


def _join(member_id: str) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        "g",
        member_id,
        0,
        rebalance_timeout_ms=5_000,
        subscribed_topic_names=("orders",),
        owned_topic_partitions=(),
    )


@pytest.fixture
async def coordinator() -> AsyncIterator[Coordinator]:
    c = Coordinator(FailingStore(), GroupConfig(), ManualClock(), run_timers=False, leases=MANUAL_LEASES)
    await c.start()
    await c.create_topics([("orders", 4, ())])
    await c.consumer_group_heartbeat(_join("a"))
    yield c
    await c.stop()


def _fail(c: Coordinator) -> None:
    store = c.store
    assert isinstance(store, FailingStore)
    store.failing = True


async def _refusal(call: Awaitable[object]) -> ApiError:
    try:
        outcome = await call
    except ApiError as e:
        return e
    # Admin calls answer each topic: the first one's error.
    assert isinstance(outcome, list) and outcome[0].error is not None, outcome
    error: ApiError = outcome[0].error
    return error


REQUESTS: dict[str, Callable[[Coordinator], Awaitable[object]]] = {
    "join": lambda c: c.consumer_group_heartbeat(_join("b")),
    "create topics": lambda c: c.create_topics([("more", 2, ())]),
    "create partitions": lambda c: c.create_partitions([("orders", "", 8, ())]),
    "delete topics": lambda c: c.delete_topics(["orders"], []),
    "list group events": lambda c: c.list_group_events("g", EventQuery()),
}


@pytest.mark.parametrize("request_name", list(REQUESTS))
async def test_a_request_the_store_failed_gets_the_one_message(
    coordinator: Coordinator, request_name: str
) -> None:
    _fail(coordinator)
    refused = await _refusal(REQUESTS[request_name](coordinator))
    assert isinstance(refused, CoordinatorNotAvailable)
    assert refused.message == STORE_UNREACHABLE


async def test_a_group_the_store_cannot_reload_gets_the_one_message(coordinator: Coordinator) -> None:
    """A failed write leaves the group to reload before its next use; that reload fails too."""
    _fail(coordinator)
    await _refusal(coordinator.consumer_group_heartbeat(_join("b")))
    member = coordinator.groups["g"].members["a"]
    refused = await _refusal(
        coordinator.consumer_group_heartbeat(
            ConsumerGroupHeartbeat("g", "a", member.member_epoch, rebalance_timeout_ms=6_000)
        )
    )
    assert isinstance(refused, CoordinatorNotAvailable)
    assert refused.message == STORE_UNREACHABLE
