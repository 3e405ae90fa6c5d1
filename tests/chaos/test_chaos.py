"""The chaos test of issue 20: three replica processes on one Postgres, five groups of
real client members, random SIGKILLs, SIGSTOP/SIGCONT pauses and graceful restarts of the
replicas for REGROUP_CHAOS_SECONDS (40 by default; `make chaos` runs longer). See
tests/chaos/harness.py for what is injected and what is checked."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.chaos.harness import Chaos, ChaosSettings
from tests.support.pg import EmbeddedPostgres
from tests.support.timing import scaled


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(line + "\n")


# The faults' time, then starting, converging and stopping (each bounded by the harness itself).
@pytest.mark.timeout(ChaosSettings.from_environment().seconds + scaled(180))
async def test_replicas_fail_and_pause_while_members_keep_their_partitions(
    postgres: EmbeddedPostgres, tmp_path: Path
) -> None:
    settings = ChaosSettings.from_environment()
    chaos = Chaos(await postgres.migrated_database(), _free_ports(settings.replicas), settings, tmp_path)
    try:
        await chaos.start()
        await chaos.run_faults()
        converged_s = await chaos.converge()
        chaos.check_members()
    finally:
        await chaos.close()
    report = chaos.report(converged_s)
    print("\n" + report)
    if os.environ.get("REGROUP_CHAOS_TIMELINE"):
        print("\n".join(chaos.timeline))
    if results := os.environ.get("REGROUP_CHAOS_RESULTS"):
        _append(Path(results), json.dumps(chaos.figures(converged_s)))
    assert not chaos.violations.found, report + "\n" + "\n".join(chaos.timeline)
    # The members ran on their default transport, member streams, and the watch saw them.
    assert chaos.watch.streamed > 0, report
