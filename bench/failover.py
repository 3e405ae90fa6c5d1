"""Benchmark 11: leader failover in a leader group (docs/leader-election.md).

Three `LeaderElection` clients in this process share a leader group on a regroup
server in its own process (embedded Postgres). Once one leads and the others
settled, the leader goes, and the time is taken from that moment until another
client's `on_elected` runs:
  crash:  `abort()`, no leave: the coordinator elects another once the old leader's
          session expired; in session timeouts (the baseline: 1.0; the session runs
          from the old leader's last heartbeat, up to one interval before the crash,
          and the follower learns at its next heartbeat, up to one interval after);
  leave:  `close()` (on_revoked, then a leave), unary heartbeats: the follower learns
          at its next heartbeat; in heartbeat intervals (the baseline: one interval,
          at most; half of one on average);
  stream: the same with member streams (the client default): the coordinator nudges
          the follower on its stream at once; in milliseconds.
Each is repeated at random phases of the heartbeats; the median and the worst are printed.

    python -m bench.failover [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from bench.report import figure, machine, table
from bench.servers import BenchPostgres, start_coordinator
from regroup.client import LeaderElection, MemberOptions

MEMBERS = 3


async def _one(target: str, group: str, how: str, interval_ms: int, phase: random.Random) -> float:
    """Seconds from the leader going (crash or leave) until another is elected."""
    elected: dict[str, float] = {}
    second = asyncio.Event()
    options = MemberOptions(member_stream=how == "stream", session_safety_margin_ms=interval_ms)

    def election(name: str) -> LeaderElection:
        async def on_elected(token: int) -> None:
            elected[name] = time.monotonic()
            if len(elected) >= 2:
                second.set()

        return LeaderElection(target, group, member_id=name, on_elected=on_elected, options=options)

    elections = [election(f"m{i}") for i in range(MEMBERS)]
    for e in elections:
        await e.start()
    try:
        async with asyncio.timeout(30):
            await elections[0].wait_elected()  # the first to join leads
        await asyncio.sleep(3 * interval_ms / 1000)  # the others settle (Stable)
        # At a random phase of the heartbeats: they all started together, so a fixed
        # delay would always catch the followers just before (or after) their next one.
        await asyncio.sleep(phase.uniform(0, interval_ms / 1000))
        leader = elections[0]
        went = time.monotonic()
        if how == "crash":
            await leader.abort()
        else:
            await leader.close()
        async with asyncio.timeout(60):
            await second.wait()
        (new,) = (t for name, t in elected.items() if name != leader.member_id)
        return new - went
    finally:
        for e in elections[1:]:
            await e.close()


async def _run(target: str, trials: int, interval_ms: int, session_ms: int) -> list[dict[str, Any]]:
    rows = []
    phase = random.Random(848)
    for how in ("crash", "leave", "stream"):
        took = [await _one(target, f"failover-{how}-{i}", how, interval_ms, phase) for i in range(trials)]
        median, worst = statistics.median(took), max(took)
        unit, per = (
            ("session timeouts", session_ms / 1000)
            if how == "crash"
            else ("heartbeat intervals", interval_ms / 1000)
            if how == "leave"
            else ("ms", 0.001)
        )
        rows.append(
            figure(
                "failover",
                scenario=how,
                trials=trials,
                median_s=round(median, 4),
                worst_s=round(worst, 4),
                unit=unit,
                median_in_unit=round(median / per, 2),
                worst_in_unit=round(worst / per, 2),
                heartbeat_interval_ms=interval_ms,
                session_timeout_ms=session_ms,
                members=MEMBERS,
                **machine(),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, help="trials per scenario (5 quick, 20 full)")
    args = parser.parse_args(argv)
    trials = args.trials or (5 if args.quick else 20)
    interval_ms, session_ms = 200, 2000
    postgres = BenchPostgres()
    server = None
    try:
        server = start_coordinator(
            postgres.new_database(),
            heartbeat_interval_ms=interval_ms,
            session_timeout_ms=session_ms,
            assignment_interval_ms=0,
        )
        rows = asyncio.run(_run(server.target, trials, interval_ms, session_ms))
    finally:
        if server is not None:
            server.stop()
        postgres.close()
    table(
        f"Leader failover ({MEMBERS} members, heartbeat {interval_ms} ms, session {session_ms} ms, "
        f"{trials} trials)",
        ["scenario", "median s", "worst s", "median", "worst", "unit"],
        [
            [r["scenario"], r["median_s"], r["worst_s"], r["median_in_unit"], r["worst_in_unit"], r["unit"]]
            for r in rows
        ],
    )
    return rows


if __name__ == "__main__":
    main()
