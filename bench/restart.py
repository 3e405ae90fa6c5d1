"""Benchmark 12: a single replica killed (SIGKILL) and started again.

How long a group's member waits, from the kill, until the restarted process answers its
heartbeat again (keeping its epoch and partitions), with each way of naming the replica
(docs/ha.md, "What a crash costs"):

- `kept`: `make run`'s set-up, the embedded Postgres and no REGROUP_REPLICA_ID: the id
  kept in the data directory, whose lock says the earlier process is dead
  (server/identity.py), so its leases are taken over at once;
- `configured`: REGROUP_REPLICA_ID set: the earlier process might still run elsewhere,
  so its leases are waited for;
- `new`: DATABASE_URL and no id: a new id per process, which waits for them too.

Reported against the lease (REGROUP_LEASE_MS), with the part of it that is the process's
own start (until it listens). The member probes every PROBE_MS.

    python -m bench.restart [--quick] [--trials N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from bench.report import figure, machine, table
from bench.servers import BenchPostgres, ServerProcess, _spawn, free_port
from regroup.v1 import common_pb2
from tests.support.wire import Stubs, WireMember

MODES = ("kept", "configured", "new")
PROBE_MS = 20
TOPIC = "restart-topic"


def _environment(mode: str, data_dir: Path, dsn: str, port: int, lease_ms: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_") and k != "DATABASE_URL"}
    env.update(
        REGROUP_LISTEN=f"127.0.0.1:{port}",
        REGROUP_METRICS_LISTEN="off",
        REGROUP_LOG_LEVEL="warning",
        REGROUP_LEASE_MS=str(lease_ms),
        REGROUP_DATA_DIR=str(data_dir),
        PYTHONUNBUFFERED="1",
    )
    if mode == "configured":
        env["REGROUP_REPLICA_ID"] = "bench-replica"
    if mode == "new":
        env["DATABASE_URL"] = dsn
    return env


def _start(env: dict[str, str], port: int, mode: str, wait: bool = True) -> ServerProcess:
    return _spawn([sys.executable, "-m", "regroup.server"], env, port, f"restart-{mode}", wait)


async def _served(member: WireMember, deadline_s: float) -> None:
    """Heartbeats until one is answered without an error (the server may not listen yet)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            if (await member.heartbeat()).error_code == common_pb2.NONE:
                return
        except grpc.aio.AioRpcError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"not served within {deadline_s} s: {member.last}")
        await asyncio.sleep(PROBE_MS / 1000)


async def _trial(
    env: dict[str, str], port: int, mode: str, lease_ms: int, first: bool
) -> tuple[float, float]:
    """(kill -> listening, kill -> the member served again), in seconds."""
    server = _start(env, port, mode)
    stubs = Stubs.connect(f"127.0.0.1:{port}")
    try:
        if first:
            await _served_admin(stubs)
        member = WireMember(stubs.coordinator, "g", f"m-{mode}", [TOPIC])
        await _served(member, 60)
        await _served(member, 60)  # its assignment acknowledged: Stable
        epoch, owned = member.epoch, member.partitions()
        server.proc.kill()
        server.proc.wait()
        killed = time.monotonic()
        server = _start(env, port, mode, wait=False)
        server.wait_listening()
        listening = time.monotonic() - killed
        await _served(member, 3 * lease_ms / 1000 + 60)
        served = time.monotonic() - killed
        assert (member.epoch, member.partitions()) == (epoch, owned), "the restart rebalanced the member"
        # It leaves, so that the next trial's member is alone in the group.
        await member.leave()
        return listening, served
    finally:
        await stubs.channel.close()
        server.stop()


async def _served_admin(stubs: Stubs) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            await stubs.create_topic(TOPIC, 4)
            return
        except grpc.aio.AioRpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, help="trials per mode (1 quick, 5 full)")
    parser.add_argument("--lease-ms", type=int, help="REGROUP_LEASE_MS (2000 quick, the default 10000 full)")
    parser.add_argument("--modes", nargs="*", choices=MODES, default=list(MODES))
    args = parser.parse_args(argv)
    trials = args.trials or (1 if args.quick else 5)
    lease_ms = args.lease_ms or (2_000 if args.quick else 10_000)
    postgres = BenchPostgres()
    rows = []
    try:
        for mode in args.modes:
            with tempfile.TemporaryDirectory(prefix=f"regroup-bench-restart-{mode}-") as d:
                env = _environment(mode, Path(d), postgres.new_database(), free_port(), lease_ms)
                port = int(env["REGROUP_LISTEN"].rpartition(":")[2])
                took = [asyncio.run(_trial(env, port, mode, lease_ms, first=i == 0)) for i in range(trials)]
            listening = statistics.median(t[0] for t in took)
            served = [t[1] for t in took]
            rows.append(
                figure(
                    "restart",
                    mode=mode,
                    trials=trials,
                    lease_ms=lease_ms,
                    listening_s=round(listening, 3),
                    served_median_s=round(statistics.median(served), 3),
                    served_worst_s=round(max(served), 3),
                    served_in_leases=round(statistics.median(served) / (lease_ms / 1000), 2),
                    **machine(),
                )
            )
    finally:
        postgres.close()
    table(
        f"A single replica killed and started again (lease {lease_ms} ms, {trials} trials each)",
        ["replica id", "listening s", "served s (median)", "worst s", "in leases"],
        [
            [r["mode"], r["listening_s"], r["served_median_s"], r["served_worst_s"], r["served_in_leases"]]
            for r in rows
        ],
    )
    return rows


if __name__ == "__main__":
    main()
