"""Benchmark 4: a big group's rebalance must not stall everyone else.

Many small groups heartbeat at a steady pace while one big group (1,000
members over 100,000 partitions in the full run) sits settled. Phase 1
measures the small groups' heartbeat latency with the big group idle. Phase 2
measures it again while the big group's topic grows by one partition every
200 ms: each growth bumps the big group's epoch, so the coordinator keeps
recomputing its 100,000-partition target (at most once per assignment
interval), while almost nothing else changes (one new partition for one
member), so what is measured is the cost of computing, not of reconciling.
Target: phase-2 p99 within 2 x phase-1 p99.

    python -m bench.stall [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Any

import grpc

from bench.convergence import _epoch, _wait_stable
from bench.loadgen import LoadGenerator, make_members
from bench.report import figure, machine, percentile, table
from bench.servers import BenchPostgres, start_coordinator
from bench.steady import _create_topics, settle
from regroup.v1 import admin_pb2, admin_pb2_grpc


def _latencies(replies: list[dict[str, Any]]) -> list[float]:
    return sorted(x / 1000 for r in replies for x in r["latencies_us"])


def _grow(target: str, topic: str, partitions: int, seconds: float, period: float) -> None:
    """Grows the topic by one partition every `period` seconds for `seconds`."""

    async def grow() -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            admin = admin_pb2_grpc.GroupAdminStub(channel)
            deadline = time.monotonic() + seconds
            count = partitions
            while time.monotonic() < deadline:
                count += 1
                request = admin_pb2.CreatePartitionsRequest(
                    topics=[admin_pb2.CreatePartitionsRequest.Topic(name=topic, count=count)]
                )
                response = await admin.CreatePartitions(request)
                assert response.topics[0].error_code == 0, response
                await asyncio.sleep(period)

    asyncio.run(grow())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        small_groups, small_members, big_members, big_partitions, seconds = 10, 5, 20, 2_000, 3.0
    else:
        small_groups, small_members, big_members, big_partitions, seconds = 100, 5, 1000, 100_000, 15.0
    interval_ms, assignment_interval_ms = 500, 200

    postgres = BenchPostgres()
    loads: list[LoadGenerator] = []
    try:
        server = start_coordinator(
            postgres.new_database(),
            heartbeat_interval_ms=interval_ms,
            session_timeout_ms=30_000,
            assignment_interval_ms=assignment_interval_ms,
        )
        try:
            asyncio.run(_create_topics(server.target, small_groups, 10))
            asyncio.run(_create_topics(server.target, 1, big_partitions, first=9000))
            small = LoadGenerator(server.target, make_members(small_groups, small_members), processes=1)
            loads.append(small)
            big = LoadGenerator(server.target, make_members(1, big_members, first=9000), processes=1)
            loads.append(big)
            started = time.monotonic()
            big.run("join")
            # The big group's members heartbeat ten times less often, so that the machine is far
            # from saturated and the small groups' idle latency is the coordinator's, not a queue's.
            big.start("paced", seconds=3600, interval_ms=10 * interval_ms)
            _wait_stable(server.target, "g9000", 900, 0.1, members=big_members)
            setup_s = time.monotonic() - started
            small.run("join")
            settle(small, server.target, small_groups + 1)

            idle = _latencies(small.run("paced", seconds=seconds, interval_ms=interval_ms, latencies=True))
            epoch = _epoch(server.target, "g9000")
            grower = threading.Thread(
                target=_grow, args=(server.target, "t9000", big_partitions, seconds + 1.5, 0.2), daemon=True
            )
            grower.start()
            time.sleep(0.5)  # let the big group start recomputing
            busy = _latencies(small.run("paced", seconds=seconds, interval_ms=interval_ms, latencies=True))
            grower.join()
            bumps = _epoch(server.target, "g9000") - epoch
        finally:
            for load in loads:
                load.close()
            server.stop()
    finally:
        postgres.close()

    rows = []
    for name, values in (("big group idle", idle), ("big group recomputing", busy)):
        rows.append(
            [
                name,
                len(values),
                percentile(values, 50),
                percentile(values, 99),
                percentile(values, 99.9),
                values[-1] if values else float("nan"),
            ]
        )
    table(
        f"Heartbeat latency of {small_groups} small groups while one group of {big_members} members over "
        f"{big_partitions} partitions is idle, then recomputing ({bumps} epoch bumps)",
        ["phase", "heartbeats", "p50 ms", "p99 ms", "p99.9 ms", "max ms"],
        rows,
    )
    ratio = percentile(busy, 99) / percentile(idle, 99)
    print(f"p99 ratio recomputing/idle = {ratio:.2f} (target <= 2); big group set-up took {setup_s:.0f} s")
    return figure(
        "stall",
        small_groups=small_groups,
        big_members=big_members,
        big_partitions=big_partitions,
        idle_p99_ms=round(percentile(idle, 99), 3),
        busy_p99_ms=round(percentile(busy, 99), 3),
        p99_ratio=round(ratio, 3),
        busy_max_ms=round(busy[-1], 3) if busy else None,
        epoch_bumps=bumps,
        assignment_interval_ms=assignment_interval_ms,
        quick=args.quick,
        **machine(),
    )


if __name__ == "__main__":
    main()
