"""A stop ends the process within Settings.stop_bound_s, whatever hangs (server/main.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

from regroup.server.config import STOP_SLACK_S, Settings
from regroup.server.main import EXIT_SLACK_S, stop_within_bound


class _Hanging:
    """A server whose stop never ends (a worker process or an exporter that does not answer)."""

    def __init__(self) -> None:
        self.cancelled = False

    async def stop(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_the_bound_is_the_drain_two_store_operations_and_the_slack() -> None:
    settings = Settings(shutdown_grace_s=5, store_timeout_ms=10_000)
    assert settings.stop_bound_s() == 5 + 2 * 10 + STOP_SLACK_S == 30  # the chart's default grace


async def test_a_stop_that_hangs_is_abandoned_and_the_watchdog_ends_the_process_at_the_bound() -> None:
    server = _Hanging()
    exited = threading.Event()
    told: list[float] = []

    def exit_now(bound_s: float) -> None:  # os._exit(1) in the process
        told.append(bound_s)
        exited.set()

    bound_s = EXIT_SLACK_S + 0.2
    watchdog = await stop_within_bound(cast(Any, server), bound_s, exit_now)
    assert server.cancelled, "the stop was abandoned before the bound"
    assert await asyncio.to_thread(exited.wait, 60)
    assert told == [bound_s]
    watchdog.join()


async def test_a_stop_that_ends_returns_and_the_watchdog_can_be_called_off() -> None:
    class Quick:
        stopped = False

        async def stop(self) -> None:
            self.stopped = True

    server = Quick()
    watchdog = await stop_within_bound(cast(Any, server), 60, lambda _: None)
    assert server.stopped
    watchdog.cancel()
