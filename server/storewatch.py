"""Whether the store answers, for readiness probes and for failing fast.

A ping every check interval, and one at once when a request reports that the
store failed. Every change is handed to `on_change`: the app turns it into the
health service's NOT_SERVING / SERVING (what Kubernetes' readiness probe reads),
and the coordinator stops sending requests to a store known to be away, so that
an outage that hangs connections (a lost network rather than a stopped server)
does not hang heartbeats: they are refused at once, their sessions renewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from .store import StoreUnavailable

log = structlog.get_logger("regroup")


class StoreWatch:
    def __init__(
        self,
        ping: Callable[[], Awaitable[object]],
        on_change: Callable[[bool], Awaitable[None]],
        interval_s: float,
    ) -> None:
        self._ping = ping
        self._on_change = on_change
        self._interval_s = interval_s
        #: What the last check found; the store is assumed up until one fails.
        self.available = True
        self._since = time.monotonic()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="regroup-store-watch")

    async def stop(self) -> None:
        # The flag ends the loop even if a cancellation were lost on the way.
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def report_failure(self) -> None:
        """A request found the store failing: check now rather than at the next tick."""
        if self.available:
            self._wake.set()

    async def check(self) -> bool:
        """Pings the store once (a ping slower than the interval fails) and reports a change.

        `ping` raises StoreUnavailable when the store fails; anything else is a bug."""
        error = ""
        try:
            async with asyncio.timeout(self._interval_s):
                await self._ping()
            available = True
        except (StoreUnavailable, TimeoutError) as e:
            available = False
            error = f"{type(e).__name__}: {e}"
        if available != self.available:
            now = time.monotonic()
            self.available = available
            if available:
                log.info("store_available", unavailable_s=round(now - self._since, 3))
            else:
                log.warning("store_unavailable", error=error)
            self._since = now
            await self._on_change(available)
        return available

    async def _run(self) -> None:
        while not self._stopping:
            # asyncio.timeout rather than wait_for: on 3.11, wait_for swallows a cancellation
            # that arrives as the event is set (CPython gh-86296): report_failure just before
            # stop left this loop running and the server's stop waiting for it for good.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._wake.wait()
            if self._stopping:
                return
            self._wake.clear()
            try:
                await self.check()
            except Exception:  # on_change failed: keep watching
                log.exception("store_watch_failed")
