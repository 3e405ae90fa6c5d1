"""StoreWatch without a database: a ping that a test makes fail, hang or answer."""

from __future__ import annotations

import asyncio

from regroup.server.store import StoreUnavailable
from regroup.server.storewatch import StoreWatch


class FakeStore:
    def __init__(self) -> None:
        self.up = True
        self.hang = False
        self.pings = 0

    async def ping(self) -> None:
        self.pings += 1
        if self.hang:
            await asyncio.sleep(3600)
        if not self.up:
            raise StoreUnavailable("connection refused")


async def test_reports_each_change_once() -> None:
    store, changes = FakeStore(), []

    async def changed(available: bool) -> None:
        changes.append(available)

    watch = StoreWatch(store.ping, changed, interval_s=1.0)
    assert await watch.check() and changes == []
    store.up = False
    assert not await watch.check()
    assert not await watch.check()
    store.up = True
    assert await watch.check()
    assert changes == [False, True] and watch.available


async def test_a_ping_slower_than_the_interval_is_a_failure() -> None:
    store, changes = FakeStore(), []

    async def changed(available: bool) -> None:
        changes.append(available)

    watch = StoreWatch(store.ping, changed, interval_s=0.01)
    store.hang = True
    assert not await watch.check()
    assert changes == [False]


async def test_a_reported_failure_is_checked_at_once() -> None:
    store = FakeStore()
    seen = asyncio.Event()

    async def changed(available: bool) -> None:
        seen.set()

    watch = StoreWatch(store.ping, changed, interval_s=3600)  # no tick during the test
    watch.start()
    try:
        store.up = False
        watch.report_failure()
        await asyncio.wait_for(seen.wait(), 5)
        assert not watch.available and store.pings == 1
    finally:
        await watch.stop()


async def test_stop_ends_the_watch_even_right_after_a_reported_failure() -> None:
    """On 3.11, wait_for swallows a cancellation that arrives as its event is set: the
    watch then ran on and the server's stop waited for it for good."""
    store = FakeStore()
    store.up = False

    async def changed(available: bool) -> None:
        pass

    for turns in range(6):
        for _ in range(20):
            watch = StoreWatch(store.ping, changed, interval_s=3600)
            watch.start()
            for _ in range(turns):
                await asyncio.sleep(0)
            watch.report_failure()
            for _ in range(turns % 3):
                await asyncio.sleep(0)
            await asyncio.wait_for(watch.stop(), 5)
