"""Time for the shell: a Clock protocol, the system clock and a manual one for tests.

The engine never reads a clock: the shell reads one once per operation and
passes `now_ms`. Deadlines are in-memory only, so a monotonic clock is right.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    async def sleep_until(self, deadline_ms: int | None, wake: asyncio.Event) -> None:
        """Returns at `deadline_ms` (never if None) or as soon as `wake` is set."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    async def sleep_until(self, deadline_ms: int | None, wake: asyncio.Event) -> None:
        timeout = None if deadline_ms is None else max(0.0, (deadline_ms - self.now_ms()) / 1000)
        # asyncio.timeout rather than wait_for: on 3.11, wait_for swallows a cancellation
        # that arrives as the event is set (CPython gh-86296), and the loop sleeping here
        # would then outlive its stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()


class ManualClock:
    """A clock that moves only when a test calls `advance`."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self._now = start_ms
        self._moved = asyncio.Event()

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms
        self._moved.set()

    async def sleep_until(self, deadline_ms: int | None, wake: asyncio.Event) -> None:
        while not wake.is_set() and (deadline_ms is None or self._now < deadline_ms):
            self._moved.clear()
            waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(self._moved.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
