"""A smoke run of every benchmark in quick mode, so that they cannot rot.

This checks that each benchmark runs end to end and reports its figures; the
targets themselves are read from the benchmark output (docs/benchmarks.md),
never asserted on timings here. Safety figures that do not depend on timing
are asserted: no instant with two owners, no Postgres write while nothing
changes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.ports import default_ports_held


@pytest.fixture(autouse=True)
def _default_ports_taken() -> Iterator[None]:
    """Every benchmark runs with the default ports taken, as under a `make run`: one that
    binds a default port fails here instead of on a developer's machine."""
    with default_ports_held():
        yield


def test_steady_smoke() -> None:
    from bench import steady

    summary = steady.main(["--quick", "--seconds", "1"])
    assert summary["postgres_commits"] == 0
    assert summary["postgres_xids"] == 0
    assert summary["throughput_ratio"] > 0


def test_steady_accept_depth_comparison_smoke() -> None:
    from bench import steady
    from regroup.server.config import Settings

    summary = steady.main(["--quick", "--seconds", "1", "--accept"])
    assert summary["accept_depth"] == Settings().accept_depth
    assert summary["throughput_ratio"] > 0


def test_steady_metrics_comparison_smoke() -> None:
    from bench import steady

    summary = steady.main(["--quick", "--seconds", "1", "--metrics"])
    assert summary["throughput_ratio"] > 0
    assert not summary["errors"]


def test_convergence_smoke() -> None:
    from bench import convergence

    lines = convergence.main(["--quick"])
    assert [line["scenario"] for line in lines] == ["a", "b", "c-crash", "c-rejoin"]
    assert all(line["two_owner_instants"] == 0 for line in lines)


def test_assignors_smoke() -> None:
    from bench import assignors

    grid = assignors.main(["--quick"])
    # Every assignor, point and mode of the quick grid was measured.
    ran = {(r["assignor"], r["members"], r["partitions"], r["topics"], r["mode"]) for r in grid}
    assert ran == {
        (name, *point, mode)
        for name in ("uniform", "range")
        for point in assignors.QUICK_POINTS
        for mode in assignors.MODES
    }
    assert all(r["ratio"] > 0 for r in grid)


def test_stall_smoke() -> None:
    from bench import stall

    assert stall.main(["--quick"])["p99_ratio"] > 0


def test_memory_smoke() -> None:
    from bench import memory

    assert memory.main(["--quick"])["live_heap_bytes"] > 0


def test_regex_smoke() -> None:
    from bench import regex

    summary = regex.main(["--quick"])
    assert (summary["patterns"], summary["refusals"]) == (len(regex.PATHOLOGICAL), len(regex.OVER_BUDGET))
    assert summary["pathological_worst_ratio"] > 0


def test_steps_smoke() -> None:
    from bench import steps

    summary = steps.main(["--quick"])
    # Counts, not timings: a heartbeat that changes nothing writes nothing, a step writes once.
    assert summary["unchanged_commits"] == 0
    assert summary["commits_per_step"] == 1.0
    assert summary["step_cpu_us"] > 0


def test_stall_quiet_phases_compare_only_phases_taken_on_a_quiet_host() -> None:
    from bench.stall import quiet_phases

    idle, busy, ratio = quiet_phases([5.0, 40.0, 6.0], [0.4, 12.0, 1.1], [8.0, 9.0, 60.0], [None, 1.9, 9.0])
    assert (idle, busy, ratio) == ([5.0, 6.0], [9.0], 9.0 / 5.5)
    assert quiet_phases([5.0], [0.5], [7.0], [3.0]) == ([5.0], [], None)


def test_replicas_smoke() -> None:
    from bench import replicas

    summary = replicas.main(["--quick"])
    # Counts, not timings: a failover and a handover ran, neither moved a partition, and
    # heartbeats that change nothing made Postgres run no statement and write no row.
    assert (summary["failover_trials"], summary["handover_trials"]) == (1, 1)
    assert summary["rebalances"] == 0
    assert summary["heartbeats"] > 0
    assert summary["heartbeat_statements"] == 0
    assert summary["writes_per_heartbeat"] == 0
    # Transaction ids beyond the lease rounds' own: the window's ends are read from the xid
    # counter and from the statement log, which do not tick together, so a lease round of
    # each replica may straddle each end (seen: -1 on a busy machine). The statements and
    # rows above are exact; this only must not grow with the heartbeats.
    assert abs(summary["heartbeat_write_transactions"]) <= 2 * len(replicas.NAMES)
    assert summary["idle_lease_rounds_per_s"] > 0
    assert summary["forward_ratio"] > 0


def test_streams_smoke() -> None:
    from bench import streams

    summary = streams.main(["--quick", "--seconds", "1", "--trials", "4", "--interval-ms", "1000"])
    assert summary["part"] == "push"
    assert summary["trials"] == 4 and summary["nudges"] > 0
    assert summary["capacity"]["postgres_commits"] == 0  # no-change heartbeats on streams write nothing
    assert summary["capacity"]["postgres_rows_written"] == 0


def test_failover_smoke() -> None:
    from bench import failover

    rows = failover.main(["--quick", "--trials", "1"])
    # Counts, not timings: each scenario ran and another member was elected.
    assert [r["scenario"] for r in rows] == ["crash", "leave", "stream"]
    assert all(r["trials"] == 1 and r["median_s"] > 0 for r in rows)


def test_restart_smoke() -> None:
    from bench import restart

    # A lease far longer than any start: a restart that waited for it could not pass.
    rows = restart.main(["--quick", "--modes", "kept", "--lease-ms", "60000"])
    assert [(r["mode"], r["trials"]) for r in rows] == [("kept", 1)]
    assert rows[0]["served_in_leases"] < 0.5
