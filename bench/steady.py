"""Benchmark 1: steady heartbeats against the bare-gRPC limit.

Many members (10,000 in 100 groups in the full run) heartbeat back to back
from load-generator processes, first against a bare grpc.aio server with the
same types and a handler that does nothing, then against regroup after every
member joined and the groups settled. For both: heartbeats/s, p50/p99
latency, and server CPU microseconds per RPC (read from /proc for the server
process alone). For regroup, also the Postgres commits and transaction ids
consumed during the steady phase, which must be zero: a heartbeat that
changes nothing writes nothing. (The join is vacuumed before the window and
Postgres' autovacuum daemon is off during it, because its visits to the
database are commits too.)

    python -m bench.steady [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

import grpc

from bench.loadgen import LoadGenerator, make_members
from bench.report import figure, machine, percentile, table
from bench.servers import (
    BenchPostgres,
    ServerProcess,
    postgres_activity,
    start_bare,
    start_coordinator,
    vacuum_analyze,
)
from regroup.server.config import Settings
from regroup.v1 import admin_pb2, admin_pb2_grpc


@dataclass
class Run:
    name: str
    calls: int
    seconds: float
    server_cpu: float
    client_cpu: float
    latencies_us: list[int]
    errors: dict[int, int]

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    @property
    def cpu_us_per_rpc(self) -> float:
        return self.server_cpu / self.calls * 1e6

    def p(self, q: float) -> float:
        return percentile(self.latencies_us, q) / 1000


def _steady(server: ServerProcess, load: LoadGenerator, seconds: float, concurrency: int, name: str) -> Run:
    load.run("steady", seconds=min(2.0, seconds / 3), concurrency=concurrency)  # warm up
    cpu = server.cpu_seconds()
    replies = load.run("steady", seconds=seconds, concurrency=concurrency)
    server_cpu = server.cpu_seconds() - cpu
    latencies = sorted(x for r in replies for x in r["latencies_us"])
    errors: dict[int, int] = {}
    for r in replies:
        for code, n in r["errors"].items():
            errors[code] = errors.get(code, 0) + n
    return Run(
        name=name,
        calls=sum(r["calls"] for r in replies),
        seconds=max(r["seconds"] for r in replies),
        server_cpu=server_cpu,
        client_cpu=sum(r["client_cpu"] for r in replies),
        latencies_us=latencies,
        errors=errors,
    )


async def _create_topics(target: str, groups: int, partitions: int, first: int = 0) -> None:
    """Topics t<first>.. for groups first..first+groups-1, `partitions` partitions each."""
    async with grpc.aio.insecure_channel(target) as channel:
        admin = admin_pb2_grpc.GroupAdminStub(channel)
        topics = [
            admin_pb2.CreatableTopic(name=f"t{g:04d}", num_partitions=partitions)
            for g in range(first, first + groups)
        ]
        for start in range(0, len(topics), 100):
            resp = await admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=topics[start : start + 100]))
            assert all(t.error_code == 0 for t in resp.topics), resp


async def _group_states(target: str, groups: int) -> dict[str, int]:
    async with grpc.aio.insecure_channel(target) as channel:
        admin = admin_pb2_grpc.GroupAdminStub(channel)
        resp = await admin.ListGroups(admin_pb2.ListGroupsRequest())
    states: dict[str, int] = {}
    for group in resp.groups:
        states[group.group_state] = states.get(group.group_state, 0) + 1
    return states


def _median_run(runs: list[Run]) -> Run:
    """The run with the median CPU per RPC (its other figures come with it)."""
    return sorted(runs, key=lambda r: r.cpu_us_per_rpc)[len(runs) // 2]


def settle(load: LoadGenerator, target: str, groups: int, timeout: float = 120) -> None:
    """Heartbeat rounds until every group is Stable (targets may be batched by a timer)."""
    deadline = time.monotonic() + timeout
    while True:
        load.run("rounds", n=1)
        states = asyncio.run(_group_states(target, groups))
        if states == {"Stable": groups}:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"groups did not settle in {timeout} s: {states}")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--groups", type=int)
    parser.add_argument("--members-per-group", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--processes", type=int, default=2, help="load generator processes")
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight per process")
    parser.add_argument("--rounds", type=int, help="alternating bare/regroup phases (default 5, quick 1)")
    parser.add_argument(
        "--loops",
        action="store_true",
        help="instead: the bare server on uvloop (as regroup runs) against asyncio's own loop",
    )
    parser.add_argument(
        "--accept",
        action="store_true",
        help="instead: the bare server with regroup's accept depth against grpc.aio's single pipeline",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="instead: regroup with its metrics on (Prometheus endpoint) against regroup with them off",
    )
    args = parser.parse_args(argv)
    groups = args.groups or (4 if args.quick else 100)
    per_group = args.members_per_group or (25 if args.quick else 100)
    seconds = args.seconds or (2.0 if args.quick else 10.0)
    args.rounds = args.rounds or (1 if args.quick else 5)
    members = make_members(groups, per_group)
    context = {
        "groups": groups,
        "members": len(members),
        "processes": args.processes,
        "concurrency": args.concurrency,
        "seconds": seconds,
        **machine(),
    }
    if args.loops:
        return compare_loops(members, seconds, args, context)
    if args.accept:
        return compare_accept(members, seconds, args, context)
    if args.metrics:
        return compare_metrics(members, groups, per_group, seconds, args, context)

    # Both servers run side by side and their steady phases alternate, `rounds`
    # times each, so that drifts of this shared machine fall on both alike; the
    # medians of the per-phase figures are compared.
    postgres = BenchPostgres()
    bare = start_bare()
    # The store watch pings Postgres once per REGROUP_STORE_CHECK_MS: a read-only transaction
    # that pg_stat_database counts as a commit. This phase measures what heartbeats cost
    # Postgres, so the ping is moved out of it (an hour apart); it writes nothing either way.
    # Its store pings and lease renewals are statements of their own, whatever the members
    # do: hour-long periods keep them out of the window, which then counts only what
    # heartbeats write. What leases cost is measured by bench/replicas.py.
    coordinator = start_coordinator(
        postgres.new_database(), store_check_ms=3_600_000, lease_ms=7_200_000, lease_renew_ms=3_000_000
    )
    loads: list[LoadGenerator] = []
    try:
        asyncio.run(_create_topics(coordinator.target, groups, per_group))
        bare_load = LoadGenerator(bare.target, members, args.processes)
        loads.append(bare_load)
        load = LoadGenerator(coordinator.target, members, args.processes)
        loads.append(load)
        joined = load.run("join")
        settle(load, coordinator.target, groups)
        dsn = coordinator.dsn
        # The window should count what heartbeats do: the join's clean-up is done
        # now, and Postgres' autovacuum daemon, whose visits to the database are
        # commits of its own, is off until the end (rows written and transaction
        # ids are still counted, whoever writes).
        asyncio.run(vacuum_analyze(dsn))
        postgres.disable_autovacuum()
        probe = asyncio.run(postgres_activity(dsn))
        probe_again = asyncio.run(postgres_activity(dsn))
        own = {k: probe_again[k] - probe[k] for k in probe}  # what measuring itself costs
        before = asyncio.run(postgres_activity(dsn))
        baselines, runs = [], []
        for _ in range(args.rounds):
            baselines.append(_steady(bare, bare_load, seconds, args.concurrency, "bare gRPC"))
            runs.append(_steady(coordinator, load, seconds, args.concurrency, "regroup"))
        after = asyncio.run(postgres_activity(dsn))
    finally:
        for one in loads:
            one.close()
        coordinator.stop()
        bare.stop()
        postgres.close()
    baseline, run = _median_run(baselines), _median_run(runs)

    commits = after["xact_commit"] - before["xact_commit"] - own["xact_commit"]
    xids = after["next_xid"] - before["next_xid"] - own["next_xid"]
    rows_written = after["rows_written"] - before["rows_written"]
    background = after["autovacuum_runs"] - before["autovacuum_runs"]
    rows = []
    for r in (baseline, run):
        rows.append(
            [r.name, r.calls, r.rate, r.p(50), r.p(99), r.cpu_us_per_rpc, r.client_cpu / r.calls * 1e6]
        )
    table(
        f"Steady heartbeats: {len(members)} members in {groups} groups, {args.processes} load processes x "
        f"{args.concurrency} in flight, {seconds:.0f} s",
        ["server", "calls", "hb/s", "p50 ms", "p99 ms", "server cpu us/rpc", "client cpu us/rpc"],
        rows,
    )
    ratios = [r.rate / b.rate for r, b in zip(runs, baselines, strict=True)]
    round_ratios = [round(x, 2) for x in ratios]
    throughput_ratio = statistics.median(ratios)
    cpu_ratio = statistics.median(
        b.cpu_us_per_rpc / r.cpu_us_per_rpc for r, b in zip(runs, baselines, strict=True)
    )
    print(
        f"throughput ratio regroup/bare = {throughput_ratio:.2f} (target >= 0.8; per round {round_ratios}); "
        f"CPU-capacity ratio bare/regroup us per rpc = {cpu_ratio:.2f}; "
        f"Postgres during the steady phase: {commits} commits (target 0), {rows_written} rows written, "
        f"{xids} transaction ids, {background} autovacuum/autoanalyze runs (its daemon off)"
    )
    if run.errors:
        print(f"regroup error codes during the steady phase: {run.errors}")
    for r in (baseline, run):
        figure(
            "steady",
            server=r.name,
            heartbeats_per_s=round(r.rate, 1),
            p50_ms=round(r.p(50), 3),
            p99_ms=round(r.p(99), 3),
            server_cpu_us_per_rpc=round(r.cpu_us_per_rpc, 1),
            calls=r.calls,
            **context,
        )
    return figure(
        "steady",
        summary=True,
        throughput_ratio=round(throughput_ratio, 3),
        throughput_ratio_per_round=round_ratios,
        cpu_ratio=round(cpu_ratio, 3),
        postgres_commits=commits,
        postgres_xids=xids,
        postgres_rows_written=rows_written,
        postgres_autovacuum_runs=background,
        join_seconds=round(max(j["seconds"] for j in joined), 2),
        errors=run.errors,
        **context,
    )


#: Keeps store pings and lease renewals out of a steady window (see main()).
QUIET_STORE = {"store_check_ms": 3_600_000, "lease_ms": 7_200_000, "lease_renew_ms": 3_000_000}


def compare_metrics(
    members: list[Any],
    groups: int,
    per_group: int,
    seconds: float,
    args: argparse.Namespace,
    context: dict[str, Any],
) -> dict[str, Any]:
    """Two regroup servers, each on a database of its own with the same groups and members:
    one records its metrics (the Prometheus endpoint on, so the SDK aggregates every
    record), the other has them off (the API's no-op instruments). Their steady phases
    alternate `rounds` times; the median of the per-round throughput ratios on/off is the
    figure (target >= 0.95), beside server CPU per RPC."""
    postgres = BenchPostgres()
    servers = {
        "metrics on": start_coordinator(postgres.new_database(), metrics_listen="127.0.0.1:0", **QUIET_STORE),
        "metrics off": start_coordinator(postgres.new_database(), metrics_listen="off", **QUIET_STORE),
    }
    loads: dict[str, LoadGenerator] = {}
    try:
        for name, server in servers.items():
            asyncio.run(_create_topics(server.target, groups, per_group))
            loads[name] = LoadGenerator(server.target, members, args.processes)
            loads[name].run("join")
            settle(loads[name], server.target, groups)
        runs: dict[str, list[Run]] = {name: [] for name in servers}
        names = list(servers)
        for round_ in range(args.rounds):
            # Each goes first every other round: a drift of the machine within a round
            # (the first phase of a round has been seen faster) falls on both alike.
            for name in names if round_ % 2 == 0 else names[::-1]:
                runs[name].append(_steady(servers[name], loads[name], seconds, args.concurrency, name))
    finally:
        for one in loads.values():
            one.close()
        for server in servers.values():
            server.stop()
        postgres.close()
    on, off = runs["metrics on"], runs["metrics off"]
    ratios = [a.rate / b.rate for a, b in zip(on, off, strict=True)]
    cpu = [a.cpu_us_per_rpc / b.cpu_us_per_rpc for a, b in zip(on, off, strict=True)]
    medians = {name: _median_run(r) for name, r in runs.items()}
    table(
        f"Metrics on vs off: {len(members)} members in {groups} groups, "
        f"{args.rounds} rounds of {seconds:.0f} s",
        ["server", "calls", "hb/s", "p50 ms", "p99 ms", "server cpu us/rpc"],
        [[r.name, r.calls, r.rate, r.p(50), r.p(99), r.cpu_us_per_rpc] for r in medians.values()],
    )
    ratio = statistics.median(ratios)
    print(
        f"throughput ratio metrics on/off = {ratio:.3f} (target >= 0.95; per round "
        f"{[round(x, 3) for x in ratios]}); server CPU per RPC on/off = {statistics.median(cpu):.3f}"
    )
    return figure(
        "steady_metrics",
        summary=True,
        throughput_ratio=round(ratio, 3),
        throughput_ratio_per_round=[round(x, 3) for x in ratios],
        cpu_ratio=round(statistics.median(cpu), 3),
        cpu_us_per_rpc={name: round(r.cpu_us_per_rpc, 1) for name, r in medians.items()},
        errors={name: r.errors for name, r in medians.items() if r.errors},
        **context,
    )


def compare_loops(
    members: list[Any], seconds: float, args: argparse.Namespace, context: dict[str, Any]
) -> dict[str, Any]:
    """The bare server's throughput and CPU per RPC on uvloop against asyncio's
    own loop, alternating `rounds` times (the issue's suggestion, measured)."""
    servers = {"uvloop": start_bare("uvloop"), "asyncio": start_bare("asyncio")}
    return _compare_bare(servers, members, seconds, args, "The bare server's event loop", context, loops=True)


def compare_accept(
    members: list[Any], seconds: float, args: argparse.Namespace, context: dict[str, Any]
) -> dict[str, Any]:
    """The bare server with regroup's accept depth against grpc.aio's own single
    pipeline (depth 1), alternating `rounds` times: what server/accept.py saves."""
    depth = Settings().accept_depth
    servers = {f"depth {depth}": start_bare(accept_depth=depth), "depth 1": start_bare(accept_depth=1)}
    title = "The bare server's accept depth"
    return _compare_bare(servers, members, seconds, args, title, context, accept_depth=depth)


def _compare_bare(
    servers: dict[str, ServerProcess],
    members: list[Any],
    seconds: float,
    args: argparse.Namespace,
    title: str,
    context: dict[str, Any],
    **fields: Any,
) -> dict[str, Any]:
    """Alternates steady phases on two bare servers and reports the medians of the
    first's throughput and CPU per RPC over the second's, round by round."""
    loads = {name: LoadGenerator(server.target, members, args.processes) for name, server in servers.items()}
    try:
        runs: dict[str, list[Run]] = {name: [] for name in servers}
        for _ in range(args.rounds):
            for name, server in servers.items():
                runs[name].append(_steady(server, loads[name], seconds, args.concurrency, f"bare, {name}"))
    finally:
        for load in loads.values():
            load.close()
        for server in servers.values():
            server.stop()
    table(
        f"{title}: {len(members)} members, {args.processes} load processes x "
        f"{args.concurrency} in flight, {seconds:.0f} s, {args.rounds} rounds (median run)",
        ["server", "calls", "hb/s", "p50 ms", "p99 ms", "server cpu us/rpc"],
        [
            [r.name, r.calls, r.rate, r.p(50), r.p(99), r.cpu_us_per_rpc]
            for r in map(_median_run, runs.values())
        ],
    )
    first, second = runs.values()
    pairs = list(zip(first, second, strict=True))
    throughput = statistics.median(a.rate / b.rate for a, b in pairs)
    cpu = statistics.median(a.cpu_us_per_rpc / b.cpu_us_per_rpc for a, b in pairs)
    print(f"{' / '.join(servers)}: throughput {throughput:.2f}x, CPU per RPC {cpu:.2f}x")
    return figure(
        "steady", throughput_ratio=round(throughput, 3), cpu_per_rpc_ratio=round(cpu, 3), **fields, **context
    )


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"(took {time.monotonic() - started:.0f} s)")
