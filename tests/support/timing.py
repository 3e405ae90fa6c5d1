"""One scale for every wait of the tests: `REGROUP_TEST_TIME_SCALE` (default 1).

A test waits for a condition with a deadline, never for a fixed time; the deadline is
what an idle machine needs with room to spare, times this scale. A loaded machine (a busy
CI host, a laptop building something else) raises it rather than each test widening its
own timeouts: `REGROUP_TEST_TIME_SCALE=3 make test`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable


def _scale() -> float:
    raw = os.environ.get("REGROUP_TEST_TIME_SCALE", "").strip()
    if not raw:
        return 1.0
    value = float(raw)
    if value < 1:
        raise ValueError(f"REGROUP_TEST_TIME_SCALE must be at least 1, got {raw!r}")
    return value


SCALE = _scale()


def scaled(seconds: float) -> float:
    """A deadline of `seconds` on an idle machine, as this run's scale makes it."""
    return seconds * SCALE


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]], seconds: float, what: str, poll_s: float = 0.02
) -> None:
    """Polls `condition` until it holds; AssertionError naming `what` past the scaled deadline."""
    deadline = time.monotonic() + scaled(seconds)
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {scaled(seconds):.1f} s (REGROUP_TEST_TIME_SCALE={SCALE:g})"
            )
        await asyncio.sleep(poll_s)


def describe() -> str:
    return f"time scale: {SCALE:g} (REGROUP_TEST_TIME_SCALE)"
