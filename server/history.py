"""Group history in the shell: how events are stored and read, and who watches them.

The engine derives a write's events (reconciler/history.py); the write path
stores them with the write's records, in its transaction (`GroupStore.append`),
and hands them, with the sequences the store gave them, to the `HistoryHub`,
which passes them to the WatchGroup streams of their group. Reading history
(`GroupStore.list_events`) needs no ownership of the group: any replica answers
from the store, also for a deleted group.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from regroup.reconciler.history import EventType, GroupEvent

#: ListGroupEvents' default and largest page.
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
#: WatchGroup's largest history in its first message.
MAX_WATCH_HISTORY = 1_000
#: Events a watcher may have waiting before it is dropped (it reads too slowly).
WATCH_QUEUE_MAX = 10_000

#: The event fields stored in the detail column (the others have columns of their own).
_COLUMNS = frozenset({"type", "timestamp_ms", "group_epoch", "member_id", "sequence"})
_DETAIL = tuple(f.name for f in fields(GroupEvent) if f.name not in _COLUMNS)
_DEFAULTS = {f.name: f.default for f in fields(GroupEvent)}


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Which of a group's events to read (ListGroupEventsRequest's bounds; 0: none)."""

    after_sequence: int = 0
    before_sequence: int = 0
    since_ms: int = 0
    until_ms: int = 0
    limit: int = DEFAULT_LIMIT
    oldest_first: bool = False
    types: tuple[int, ...] = ()

    def matches(self, event: GroupEvent) -> bool:
        return (
            (not self.after_sequence or event.sequence > self.after_sequence)
            and (not self.before_sequence or event.sequence < self.before_sequence)
            and (not self.since_ms or event.timestamp_ms >= self.since_ms)
            and (not self.until_ms or event.timestamp_ms < self.until_ms)
            and (not self.types or int(event.type) in self.types)
        )


def event_row(event: GroupEvent) -> tuple[int, int, int, str, str]:
    """(at_ms, event_type, group_epoch, member_id, detail JSON) of an event."""
    detail = {name: getattr(event, name) for name in _DETAIL if getattr(event, name) != _DEFAULTS[name]}
    return (
        event.timestamp_ms,
        int(event.type),
        event.group_epoch,
        event.member_id,
        json.dumps(detail, separators=(",", ":")),
    )


def event_from_row(row: Any) -> GroupEvent:
    detail = row["detail"]
    if isinstance(detail, str):
        detail = json.loads(detail)
    known = {k: v for k, v in detail.items() if k in _DEFAULTS}  # a newer writer's extra fields are skipped
    return GroupEvent(
        type=EventType(row["event_type"]),
        timestamp_ms=row["at_ms"],
        group_epoch=row["group_epoch"],
        member_id=row["member_id"],
        sequence=row["sequence"],
        **known,
    )


def with_sequences(events: Sequence[GroupEvent], sequences: Sequence[int]) -> list[GroupEvent]:
    """The events with the sequences the store gave them (in order); unchanged if it gave none."""
    if len(sequences) != len(events):
        return list(events)
    return [replace(e, sequence=s) for e, s in zip(events, sequences, strict=True)]


class WatchClosed(Exception):
    """A watch ended by the server: the group left this replica (`moved`), the server is
    stopping, or the watcher fell behind (`behind`)."""

    def __init__(self, message: str, *, moved: bool = False, behind: bool = False) -> None:
        super().__init__(message)
        self.moved = moved
        self.behind = behind


class Watch:
    """One WatchGroup stream's queue of its group's new events."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self._queue: asyncio.Queue[list[GroupEvent] | WatchClosed] = asyncio.Queue()
        self._waiting = 0

    def put(self, events: list[GroupEvent]) -> bool:
        """False when the watcher has too many events waiting (it is closed instead)."""
        self._waiting += len(events)
        if self._waiting > WATCH_QUEUE_MAX:
            self.close(
                WatchClosed(
                    f"The watcher of group {self.group_id} fell {self._waiting} events behind; watch again.",
                    behind=True,
                )
            )
            return False
        self._queue.put_nowait(events)
        return True

    def close(self, why: WatchClosed) -> None:
        self._queue.put_nowait(why)

    async def next(self) -> list[GroupEvent]:
        """The events that arrived since the last call (waits for at least one batch).
        Raises WatchClosed when the server ended the watch."""
        batches = [await self._queue.get()]
        while not self._queue.empty():
            batches.append(self._queue.get_nowait())
        out: list[GroupEvent] = []
        for batch in batches:
            if isinstance(batch, WatchClosed):
                raise batch
            out.extend(batch)
        self._waiting = max(0, self._waiting - len(out))
        return out


class HistoryHub:
    """The watches open on this replica, by group; told of every event stored."""

    def __init__(self) -> None:
        self._watches: dict[str, set[Watch]] = {}

    def watch(self, group_id: str) -> Watch:
        watch = Watch(group_id)
        self._watches.setdefault(group_id, set()).add(watch)
        return watch

    def unwatch(self, watch: Watch) -> None:
        watches = self._watches.get(watch.group_id)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._watches[watch.group_id]

    def published(self, group_id: str, events: list[GroupEvent]) -> None:
        for watch in list(self._watches.get(group_id, ())):
            if not watch.put(events):
                self.unwatch(watch)

    def moved(self, group_ids: Sequence[str], why: str) -> None:
        """The groups left this replica: their watches end (the clients find the new owner)."""
        self._close(group_ids, WatchClosed(why, moved=True))

    def close_all(self, why: str) -> None:
        """The server stops: every watch ends."""
        self._close(list(self._watches), WatchClosed(why))

    def _close(self, group_ids: Sequence[str], why: WatchClosed) -> None:
        for group_id in group_ids:
            for watch in self._watches.pop(group_id, ()):
                watch.close(why)

    def count(self) -> int:
        return sum(len(w) for w in self._watches.values())
