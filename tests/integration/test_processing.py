"""The processing loops on real members: every record handled, progress resumed
from committed offsets across rebalances, nothing lost or doubled in at-least-once
with an idempotent sink, nothing doubled in at-most-once."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from regroup.client import SyncGroupAdmin, SyncGroupMember, TopicPartition
from regroup.client.processing import Batch, PartitionProcessor
from tests.support.service import Service, ServiceFactory

PARTITIONS = 4
ROWS = 300


class Source:
    def read(self, partition: TopicPartition, offset: int, max_records: int) -> Sequence[Any]:
        end = min(ROWS, offset + max_records)
        return [(partition.partition, i) for i in range(offset, end)]


class Sink:
    """Counts every write, and keeps rows by key (an idempotent sink)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writes: Counter[tuple[int, int]] = Counter()

    def handle(self, batch: Batch) -> None:
        with self.lock:
            self.writes.update(batch.records)


@pytest.fixture
async def fast(start_service: ServiceFactory) -> Service:
    return await start_service(heartbeat_interval_ms=100, session_timeout_ms=1500)


def _run(target: str, mode: str, sink: Sink, stop: threading.Event, leave_after: int | None = None) -> None:
    processor = PartitionProcessor(Source(), sink.handle, mode=mode, batch_size=25)  # type: ignore[arg-type]
    with SyncGroupMember(target, listener=processor) as member:
        member.join("g", topics=["t"])

        def until() -> bool:
            return stop.is_set() or (leave_after is not None and processor.stats.batches >= leave_after)

        processor.run(member, until=until)


def _all_committed(target: str) -> bool:
    with SyncGroupAdmin(target) as admin:
        return admin.fetch_offsets("g") == {("t", p): ROWS for p in range(PARTITIONS)}


@pytest.mark.parametrize("mode", ["at_least_once", "at_most_once"])
async def test_members_process_everything_across_rebalances(fast: Service, mode: str) -> None:
    target = f"127.0.0.1:{fast.server.port}"
    await fast.stubs.create_topic("t", PARTITIONS)
    sink = Sink()
    stop = threading.Event()
    threads = [threading.Thread(target=_run, args=(target, mode, sink, stop)) for _ in range(2)]
    # A third member joins, works a little and leaves: partitions move twice.
    threads.append(threading.Thread(target=_run, args=(target, mode, sink, stop, 3)))
    for t in threads:
        t.start()

    async with asyncio.timeout(60):
        while not await asyncio.to_thread(_all_committed, target):
            await asyncio.sleep(0.1)
    stop.set()
    for t in threads:
        await asyncio.to_thread(t.join)

    expected = {(p, i) for p in range(PARTITIONS) for i in range(ROWS)}
    assert set(sink.writes) == expected, "every record reached the sink"
    if mode == "at_most_once":
        assert max(sink.writes.values()) == 1, "at most once: nothing processed twice"
