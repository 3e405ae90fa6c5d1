"""Time for the shell: which clock is which, in one place.

Two readings, never mixed:

- `wall_ms()`: wall-clock epoch milliseconds. The time of an operation, which
  the shell passes to the engine as `Context.now_ms`, and so everything the
  engine derives from it: offsets' commit timestamps, the time a target was
  computed (it paces batched assignment), client-side assignors' deadlines and
  `PrepareAssignment.coordinator_time_ms`. These values reach Postgres or leave
  the process, and another process (after a restart elsewhere, or another
  replica) reads them against its own wall clock.
- `monotonic_ms()`: in-memory timers only (sessions, rebalance timeouts, the
  next assignment, retries), the sleeps until them, and how long a shard's lease
  is trusted (server/shards.py). A timer never reaches Postgres; a step of the
  wall clock (NTP) must not fire or delay it. On Linux it is CLOCK_BOOTTIME, which
  also counts the time the machine was suspended (a paused VM): a replica that
  wakes after its lease ran out must know it did (docs/ha.md).

The engine states timer deadlines in the operation's wall-clock time; the shell
arms them at the same distance on the monotonic clock (`Coordinator._arm`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Wall-clock epoch milliseconds: for values that are stored or sent."""
        ...

    def monotonic_ms(self) -> int:
        """A monotonic reading in milliseconds: for in-memory timers only."""
        ...

    async def sleep_until(self, deadline_ms: int | None, wake: asyncio.Event) -> None:
        """Returns at monotonic `deadline_ms` (never if None) or as soon as `wake` is set."""
        ...


#: CLOCK_MONOTONIC stops while the machine is suspended; CLOCK_BOOTTIME does not.
_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        if _BOOTTIME is not None:
            return time.clock_gettime_ns(_BOOTTIME) // 1_000_000
        return time.monotonic_ns() // 1_000_000

    async def sleep_until(self, deadline_ms: int | None, wake: asyncio.Event) -> None:
        timeout = None if deadline_ms is None else max(0.0, (deadline_ms - self.monotonic_ms()) / 1000)
        # asyncio.timeout rather than wait_for: on 3.11, wait_for swallows a cancellation
        # that arrives as the event is set (CPython gh-86296), and the loop sleeping here
        # would then outlive its stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()


#: ManualClock's default wall-clock start (2026-01-01T00:00:00Z): far from its
#: monotonic start, so that a value read from the wrong clock shows in a test.
MANUAL_WALL_START_MS = 1_767_225_600_000


class ManualClock:
    """A clock that moves only when a test calls `advance`; both readings move together."""

    def __init__(self, start_ms: int = 1_000_000, wall_start_ms: int = MANUAL_WALL_START_MS) -> None:
        self._now = start_ms
        self._wall_offset = wall_start_ms - start_ms
        self._moved = asyncio.Event()

    def monotonic_ms(self) -> int:
        return self._now

    def wall_ms(self) -> int:
        return self._now + self._wall_offset

    def advance(self, ms: int) -> None:
        self._now += ms
        self._moved.set()

    def step_wall(self, ms: int) -> None:
        """Steps the wall clock alone (as NTP may): timers must not notice."""
        self._wall_offset += ms

    async def sleep_until(self, deadline_ms: int | None, wake: asyncio.Event) -> None:
        while not wake.is_set() and (deadline_ms is None or self._now < deadline_ms):
            self._moved.clear()
            waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(self._moved.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
