"""Benchmark 5: memory per member and per partition.

Two measurements of settled groups, each group on its own topic:

1. Resident memory (RSS, from /proc) of a real regroup process while the full
   shape (10,000 members in 100 groups over 100,000 partitions) joins through
   gRPC and settles, after a few warm-up groups; compared with the budget the
   target implies (2 KB per member + 100 B per partition).
2. The live Python heap that the coordinator's state holds (tracemalloc, after
   a full garbage collection), for three shapes built in this process by the
   real runtime (`Coordinator`: engine, replay, timers) with a store that keeps
   nothing: full, half the members, half the partitions. RSS moves in
   allocator-sized steps and keeps freed memory, so differences of RSS between
   runs are too noisy to split; the live heap is exact:
     bytes per member    = (heap(full) - heap(half members)) / members removed
     bytes per partition = (heap(full) - heap(half partitions)) / partitions removed

    python -m bench.memory [--quick] [--groups N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import time
import tracemalloc
import uuid
from typing import Any

import structlog

from bench.loadgen import LoadGenerator, make_members
from bench.report import figure, machine, table
from bench.servers import BenchPostgres, start_coordinator
from bench.steady import _create_topics, settle


def _add_groups(server: Any, first: int, groups: int, members: int, partitions: int) -> LoadGenerator:
    """Creates topics and groups first..first+groups-1 and settles them; returns their load generator."""
    asyncio.run(_create_topics(server.target, groups, partitions, first=first))
    load = LoadGenerator(server.target, make_members(groups, members, first=first), processes=2)
    load.run("join")
    settle(load, server.target, first + groups, timeout=900)
    return load


def growth(postgres: BenchPostgres, groups: int, members: int, partitions: int) -> tuple[int, int]:
    """(RSS growth while `groups` groups joined and settled, RSS after), in a fresh warmed-up process."""
    # The warm-up groups' members do not heartbeat while the others join, which
    # may take longer than a default session on a busy machine (they were fenced
    # and the run never settled): sessions here outlast the run.
    server = start_coordinator(
        postgres.new_database(), assignment_interval_ms=200, session_timeout_ms=1_800_000
    )
    loads = []
    try:
        warm = max(1, groups // 10)
        loads.append(_add_groups(server, 0, warm, members, partitions))
        time.sleep(0.5)
        before = server.rss_bytes()
        loads.append(_add_groups(server, warm, groups, members, partitions))
        time.sleep(0.5)
        after = server.rss_bytes()
    finally:
        for load in loads:
            load.close()
        server.stop()
    return after - before, after


class _NullStore:
    """Accepts every write and keeps nothing: only the coordinator's own memory is measured."""

    replica_id = "bench"
    commits = 0

    async def append(self, group_id: str, records: Any, fence: Any, *history: Any) -> tuple[int, ...]:
        self.commits += 1
        return ()  # no event sequences: the events are not kept either


def _serve_every_shard(coordinator: Any) -> None:
    """This coordinator alone serves every shard, without a lease keeper (no store)."""
    from regroup.server.shards import HeldShard

    shards = coordinator.shards
    for shard in range(shards.count):
        shards.held[shard] = HeldShard(owner_epoch=1, trusted_until_ms=2**62, loaded=True)


async def _heap_of_shape(groups: int, members: int, partitions: int) -> int:
    """`_heap_held`, with the runtime's logs quiet: it logs every state change, and here
    only its memory matters. The logging comes back as it was: this runs in tests too."""
    previous = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        return await _heap_held(groups, members, partitions)
    finally:
        structlog.configure(**previous)


async def _heap_held(groups: int, members: int, partitions: int) -> int:
    """Live heap bytes held by a Coordinator whose groups all settled."""
    from regroup.reconciler import (
        ConsumerGroupHeartbeat,
        GroupConfig,
        OwnedTopicPartitions,
        Topic,
        TopicsImage,
    )
    from regroup.server.clock import ManualClock
    from regroup.server.runtime import Coordinator

    config = GroupConfig(assignment_interval_ms=0)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    coordinator = Coordinator(_NullStore(), config, ManualClock(), run_timers=False)  # type: ignore[arg-type]
    _serve_every_shard(coordinator)
    coordinator.writer.image = TopicsImage(Topic(f"id-{g}", f"t{g:04d}", partitions) for g in range(groups))
    epochs: dict[tuple[str, str], int] = {}
    for g in range(groups):
        group_id, topic = f"g{g:04d}", (f"t{g:04d}",)
        ids = [str(uuid.uuid4()) for _ in range(members)]
        for member_id in ids:
            req = ConsumerGroupHeartbeat(
                group_id,
                member_id,
                0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=topic,
                owned_topic_partitions=(),
            )
            epochs[(group_id, member_id)] = (await coordinator.consumer_group_heartbeat(req)).member_epoch
        for _ in range(10):  # heartbeat rounds, each member acknowledging what it owns
            for member_id in ids:
                member = coordinator.groups[group_id].members[member_id]
                owned = tuple(OwnedTopicPartitions(t, "", tuple(p)) for t, p in member.assigned.items())
                req = ConsumerGroupHeartbeat(
                    group_id, member_id, member.member_epoch, owned_topic_partitions=owned
                )
                await coordinator.consumer_group_heartbeat(req)
            if coordinator.groups[group_id].state().value == "Stable":
                break
        assert coordinator.groups[group_id].state().value == "Stable"
    del epochs, req, ids, member, owned
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del coordinator
    return held


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--groups", type=int, help="groups in the full shape (default 100)")
    args = parser.parse_args(argv)
    n, m, p = (10, 20, 200) if args.quick else (args.groups or 100, 100, 1000)
    budget = 2048 * n * m + 100 * n * p

    postgres = BenchPostgres()
    try:
        rss_growth, rss = growth(postgres, n, m, p)
    finally:
        postgres.close()
    heaps = {
        "full": (n * m, n * p, asyncio.run(_heap_of_shape(n, m, p))),
        "half members": (n * (m // 2), n * p, asyncio.run(_heap_of_shape(n, m // 2, p))),
        "half partitions": (n * m, n * (p // 2), asyncio.run(_heap_of_shape(n, m, p // 2))),
    }
    full = heaps["full"][2]
    per_member = (full - heaps["half members"][2]) / (n * m - n * (m // 2))
    per_partition = (full - heaps["half partitions"][2]) / (n * p - n * (p // 2))
    table(
        "Memory of settled groups (each on its own topic)",
        ["measure", "members", "partitions", "MB", "budget MB"],
        [
            ["RSS growth, real server", n * m, n * p, rss_growth / 1e6, budget / 1e6],
            *[[f"live heap, {name}", mm, pp, h / 1e6, ""] for name, (mm, pp, h) in heaps.items()],
        ],
    )
    print(
        f"per member {per_member:.0f} B (target <= 2048), "
        f"per partition {per_partition:.0f} B (target <= 100); RSS grew {rss_growth / 1e6:.1f} MB "
        f"against a budget of {budget / 1e6:.1f} MB ({rss / 1e6:.0f} MB in all)"
    )
    return figure(
        "memory",
        members=n * m,
        groups=n,
        partitions=n * p,
        bytes_per_member=round(per_member),
        bytes_per_partition=round(per_partition),
        live_heap_bytes=full,
        rss_growth_bytes=rss_growth,
        budget_bytes=budget,
        rss_bytes=rss,
        quick=args.quick,
        **machine(),
    )


if __name__ == "__main__":
    main()
