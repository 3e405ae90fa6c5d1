"""Deadlines for session and rebalance timeouts, keyed by (group, member, kind).

A heartbeat re-arms its member's session timer, so scheduling must be cheap:
rescheduling to a later deadline only updates a dict; the heap keeps one
(possibly early) entry per key, which is pushed again at its real deadline
when it surfaces. Cancelled keys are skipped when they surface.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Literal, NamedTuple

#: "refresh": a group's metadata refresh that failed, tried again (server/refresh.py).
TimerKind = Literal["session", "rebalance", "assignment", "offsets", "refresh"]


class TimerKey(NamedTuple):
    """A timer's identity; a NamedTuple because it is hashed on every heartbeat."""

    group_id: str
    #: Empty for group-level timers (a batched assignment).
    member_id: str
    kind: TimerKind


class TimerQueue:
    def __init__(self) -> None:
        #: key -> (deadline, payload): the authoritative deadlines.
        self._deadlines: dict[TimerKey, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._seq = itertools.count()
        #: Set when a deadline earlier than any before is scheduled.
        self.wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._deadlines)

    def schedule(self, key: TimerKey, deadline_ms: int, payload: int = 0) -> None:
        old = self._deadlines.get(key)
        self._deadlines[key] = (deadline_ms, payload)
        if old is None or deadline_ms < old[0]:
            if not self._heap or deadline_ms < self._heap[0][0]:
                self.wake.set()
            heapq.heappush(self._heap, (deadline_ms, next(self._seq), key))

    def cancel(self, key: TimerKey) -> None:
        self._deadlines.pop(key, None)

    def cancel_member(self, group_id: str, member_id: str) -> None:
        self.cancel(TimerKey(group_id, member_id, "session"))
        self.cancel(TimerKey(group_id, member_id, "rebalance"))

    def cancel_where(self, predicate: Callable[[TimerKey], bool]) -> int:
        """Cancels every timer whose key matches (a scan: for rare, wholesale changes
        such as a shard leaving this replica); returns how many."""
        keys = [key for key in self._deadlines if predicate(key)]
        for key in keys:
            del self._deadlines[key]
        return len(keys)

    def deadline(self, key: TimerKey) -> int | None:
        entry = self._deadlines.get(key)
        return None if entry is None else entry[0]

    def next_deadline(self) -> int | None:
        self._drop_stale_head()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> list[tuple[TimerKey, int]]:
        """Removes and returns the timers due at `now_ms`, with their payloads."""
        due: list[tuple[TimerKey, int]] = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, _, key = heapq.heappop(self._heap)
            entry = self._deadlines.get(key)
            if entry is None:
                continue
            deadline, payload = entry
            if deadline <= now_ms:
                del self._deadlines[key]
                due.append((key, payload))
            else:
                heapq.heappush(self._heap, (deadline, next(self._seq), key))
        return due

    def _drop_stale_head(self) -> None:
        while self._heap:
            deadline, _, key = self._heap[0]
            entry = self._deadlines.get(key)
            if entry is None:
                heapq.heappop(self._heap)
            elif entry[0] != deadline:
                heapq.heapreplace(self._heap, (entry[0], next(self._seq), key))
            else:
                return
