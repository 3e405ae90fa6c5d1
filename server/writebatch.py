"""What the write path needs to serve a group's queued heartbeats as one batch.

While a group's lock is held (a write is being stored), the heartbeats that arrive for
it queue up. The next holder of the lock runs them all, one after the other, on a copy
of the group (each sees what the ones before it changed), stores all their records in
one transaction, and only then keeps the copy, applies their timers and answers them.
A member's heartbeats are never in one batch twice (a member sends one at a time), so
the batch is what serving them one by one would give, with one round trip to Postgres
instead of one per write: a big group's rebalance, where every member must move to the
new epoch, is bound by those round trips. If the transaction fails, every heartbeat of
the batch gets the failure, and memory keeps the group as it was.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Groups with more members than this serve their heartbeats one by one (copying a
#: group costs about as much as a few of its heartbeats).
BATCH_MAX_MEMBERS = 2_000


@dataclass(slots=True)
class Queued(Generic[T]):
    """A heartbeat waiting for its group's lock."""

    op: Any
    cause: str
    new_member_id: str
    group_type: str | None
    future: asyncio.Future[T]

    def resolve(self, value: T) -> None:
        if not self.future.done():  # its caller may have gone (a cancelled call)
            self.future.set_result(value)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@dataclass(slots=True)
class DeferredLog:
    """A structlog-like logger that keeps its events until the batch is stored: an event
    says what was stored, and the batch may still fail."""

    bound: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def bind(self, **values: Any) -> DeferredLog:
        return DeferredLog({**self.bound, **values}, self.events)

    def info(self, event: str, **values: Any) -> None:
        self.events.append(("info", event, {**self.bound, **values}))

    def debug(self, event: str, **values: Any) -> None:
        self.events.append(("debug", event, {**self.bound, **values}))

    def emit(self, log: Any) -> None:
        for level, event, values in self.events:
            getattr(log, level)(event, **values)
