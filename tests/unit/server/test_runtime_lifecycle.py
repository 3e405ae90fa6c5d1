"""The coordinator runtime's start and stop, on the in-memory store and the system clock."""

from __future__ import annotations

import asyncio

from regroup.reconciler import GroupConfig
from regroup.server.clock import SystemClock
from regroup.server.memstore import MemoryStore
from regroup.server.runtime import Coordinator
from regroup.server.timers import TimerKey


async def test_stop_ends_the_timer_loop_even_right_after_a_timer_woke_it() -> None:
    """On 3.11, wait_for swallows a cancellation that arrives as its event is set; the
    timer loop sleeps on the timers' wake event, which every earlier deadline sets."""
    for turns in range(6):
        for _ in range(20):
            coordinator = Coordinator(MemoryStore(), GroupConfig(), SystemClock())
            await coordinator.start()
            for _ in range(turns):
                await asyncio.sleep(0)
            coordinator.timers.schedule(TimerKey("g", "m", "session"), 0)  # wakes the loop
            for _ in range(turns % 3):
                await asyncio.sleep(0)
            await asyncio.wait_for(coordinator.stop(), 5)
