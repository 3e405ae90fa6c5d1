"""Benchmark 10: member streams. What pushes do to a rebalance, and what batches do to
a heartbeat's cost.

(a) Convergence with push. Members in groups (1,000 in 10 in the full run) heartbeat
    on one MemberStream per load process at the server's interval, acknowledge
    revocations at once and, with push, heartbeat at once when nudged. A member joins
    a group, or one leaves it; the time from that request until the group is Stable
    again (ListGroups polled every 2 ms) is a trial. The same trials with nudges
    ignored (heartbeat-only, the unary protocol's pace) in the same run. Target: p99
    with push under 100 ms.
(b) Capacity. The groups settled, no-change heartbeats back to back: unary calls, then
    on the streams in batches of 100 and of 1, alternating rounds. The figure is
    heartbeats per second of server CPU (read from /proc); each stream figure is a
    ratio against the unary one of its round. Targets: >= 5x with batches of 100,
    >= 1.5x with batches of 1. Postgres commits during these windows: 0.

    python -m bench.streams [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

import grpc

from bench.loadgen import LoadGenerator, MemberSpec, make_members
from bench.report import RESULTS, figure, machine, percentile, table
from bench.servers import BenchPostgres, ServerProcess, postgres_activity, start_coordinator, vacuum_analyze
from bench.steady import QUIET_STORE, _create_topics, settle
from regroup.v1 import admin_pb2, admin_pb2_grpc

POLL_S = 0.002


@dataclass
class Window:
    name: str
    calls: int
    seconds: float
    server_cpu: float
    latencies_us: list[int]

    @property
    def per_cpu_second(self) -> float:
        return self.calls / self.server_cpu if self.server_cpu else float("nan")

    @property
    def rate(self) -> float:
        return self.calls / self.seconds


def _window(server: ServerProcess, load: LoadGenerator, name: str, command: str, **args: Any) -> Window:
    cpu = server.cpu_seconds()
    replies = load.run(command, **args)
    used = server.cpu_seconds() - cpu
    return Window(
        name,
        sum(r["calls"] for r in replies),
        max(r["seconds"] for r in replies),
        used,
        sorted(x for r in replies for x in r["latencies_us"]),
    )


class Poller:
    """Watches one group's epoch and state through ListGroups."""

    def __init__(self, target: str) -> None:
        self.target = target

    async def until_stable(self, group_id: str, after_epoch: int, seconds: float) -> tuple[float, int]:
        """Polls until the group's epoch passed `after_epoch` and it is Stable; returns
        the monotonic time of the answer that showed it, and the epoch."""
        async with grpc.aio.insecure_channel(self.target) as channel:
            admin = admin_pb2_grpc.GroupAdminStub(channel)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                groups = (await admin.ListGroups(admin_pb2.ListGroupsRequest())).groups
                seen = time.monotonic()
                group = next((g for g in groups if g.group_id == group_id), None)
                if group is not None and group.group_epoch > after_epoch and group.group_state == "Stable":
                    return seen, group.group_epoch
                await asyncio.sleep(POLL_S)
            described = (
                await admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[group_id]))
            ).groups[0]
        states = sorted(
            (m.member_state, m.member_epoch, sum(len(t.partitions) for t in m.assignment.topic_partitions))
            for m in described.members
        )
        raise RuntimeError(
            f"group {group_id} not Stable past epoch {after_epoch} within {seconds} s: "
            f"{described.group_state} at epoch {described.group_epoch}/{described.assignment_epoch}, "
            f"members (state, epoch, partitions) not stable: {[s for s in states if s[0] != 'STABLE']}, "
            f"stable: {len([s for s in states if s[0] == 'STABLE'])}"
        )

    async def epoch(self, group_id: str) -> int:
        async with grpc.aio.insecure_channel(self.target) as channel:
            admin = admin_pb2_grpc.GroupAdminStub(channel)
            groups = (await admin.ListGroups(admin_pb2.ListGroupsRequest())).groups
        return next(g.group_epoch for g in groups if g.group_id == group_id)


def _trials(
    load: LoadGenerator,
    poller: Poller,
    members: list[MemberSpec],
    groups: int,
    count: int,
    interval_ms: int,
    topics: dict[str, tuple[str, ...]],
    timeout: float,
    live: dict[str, list[MemberSpec]],
) -> list[dict[str, Any]]:
    """`count` trials over the groups in turn, a round of joins then a round of leaves. A group's
    trials are at least 1.1 s apart (its target is computed at most once a second)."""
    last: dict[str, float] = {}
    results = []
    for i in range(count):
        group_id = sorted(topics)[i % groups]
        wait = 1.1 - (time.monotonic() - last.get(group_id, 0.0))
        if wait > 0:
            time.sleep(wait)
        before = asyncio.run(poller.epoch(group_id))
        kind = "join" if (i // groups) % 2 == 0 else "leave"  # each group: a round of joins, then of leaves
        if kind == "join":
            spec = MemberSpec(group_id, str(uuid.uuid4()), topics[group_id])
            load.add([spec])
            started = time.monotonic()
            load.start("stream_paced", seconds=3600, interval_ms=interval_ms, member_ids=[spec.member_id])
            live[group_id].append(spec)
        else:
            spec = live[group_id].pop(random.randrange(len(live[group_id])))
            started = time.monotonic()
            replies = load.run_on([spec.member_id], "stream_leave")
            refused = {k: v for r in replies for k, v in r.get("refused", {}).items()}
            if refused or not any(spec.member_id in r.get("left_at", {}) for r in replies):
                raise RuntimeError(f"the leave of {spec.member_id} was not taken: {refused or 'not sent'}")
        stable_at, epoch = asyncio.run(poller.until_stable(group_id, before, timeout))
        last[group_id] = time.monotonic()
        results.append(
            {"kind": kind, "group": group_id, "ms": (stable_at - started) * 1000, "epochs": epoch - before}
        )
    return results


def _plot(push: list[float], heartbeat_only: list[float], interval_ms: int) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, values, title in (
        (left, push, "with push (nudges on the member stream)"),
        (right, heartbeat_only, f"heartbeat-only (interval {interval_ms} ms)"),
    ):
        ordered = sorted(values)
        ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post")
        ax.set_xlabel("time from the join or leave to Stable (ms)")
        ax.set_ylabel("share of trials")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "push_convergence.png"
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--groups", type=int)
    parser.add_argument("--members-per-group", type=int)
    parser.add_argument("--trials", type=int, help="push trials (heartbeat-only: a third of them)")
    parser.add_argument("--interval-ms", type=int, default=2_000, help="the server's heartbeat interval")
    parser.add_argument("--seconds", type=float, help="each capacity window")
    parser.add_argument("--rounds", type=int, help="capacity rounds")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--only", choices=("capacity", "push"), help="one part only")
    args = parser.parse_args(argv)
    groups = args.groups or (4 if args.quick else 10)
    per_group = args.members_per_group or (25 if args.quick else 100)
    trials = args.trials or (8 if args.quick else 60)
    seconds = args.seconds or (2.0 if args.quick else 8.0)
    rounds = args.rounds or (1 if args.quick else 3)
    partitions = 10 * per_group
    members = make_members(groups, per_group)
    topics = {m.group_id: m.topics for m in members}
    context = {"groups": groups, "members": len(members), "partitions_per_group": partitions, **machine()}

    postgres = BenchPostgres()
    server = start_coordinator(postgres.new_database(), heartbeat_interval_ms=args.interval_ms, **QUIET_STORE)
    load: LoadGenerator | None = None
    try:
        asyncio.run(_create_topics(server.target, groups, partitions))
        load = LoadGenerator(server.target, members, args.processes)
        load.run("join")
        settle(load, server.target, groups)

        # (b) capacity first, on settled groups and idle streams; then (a).
        windows: dict[str, list[Window]] = {"unary": [], "stream x100": [], "stream x1": []}
        commits = rows_written = 0
        push: list[dict[str, Any]] = []
        heartbeat_only: list[dict[str, Any]] = []
        commits_push = commits_base = nudges = 0
        if args.only != "push":
            commits, rows_written = _capacity(server, load, postgres, windows, rounds, seconds)
        if args.only != "capacity":
            push, heartbeat_only, commits_push, commits_base, nudges = _push(
                load, server, members, groups, trials, args.interval_ms, topics
            )
    finally:
        if load is not None:
            load.close()
        server.stop()
        postgres.close()
    result: dict[str, Any] = {}
    capacity: dict[str, Any] | None = None
    if windows["unary"]:
        result = capacity = _report_capacity(
            windows, members, args.processes, seconds, commits, rows_written, context
        )
    if push:
        result = _report_push(
            push,
            heartbeat_only,
            commits_push,
            commits_base,
            nudges,
            members,
            groups,
            args.interval_ms,
            context,
        )
        if capacity is not None:
            result = {**result, "capacity": capacity}
    return result


def _capacity(
    server: ServerProcess,
    load: LoadGenerator,
    postgres: BenchPostgres,
    windows: dict[str, list[Window]],
    rounds: int,
    seconds: float,
) -> tuple[int, int]:
    """Alternating windows of unary, stream x100 and stream x1; Postgres commits and rows in them."""
    dsn = server.dsn
    asyncio.run(vacuum_analyze(dsn))
    postgres.disable_autovacuum()
    probe = asyncio.run(postgres_activity(dsn))
    own = {k: v - probe[k] for k, v in asyncio.run(postgres_activity(dsn)).items()}
    before = asyncio.run(postgres_activity(dsn))
    load.run("stream_steady", seconds=min(1.0, seconds / 2), batch=100, inflight=4)  # warm up
    for _ in range(rounds):
        windows["unary"].append(_window(server, load, "unary", "steady", seconds=seconds, concurrency=64))
        windows["stream x100"].append(
            _window(server, load, "stream x100", "stream_steady", seconds=seconds, batch=100, inflight=4)
        )
        windows["stream x1"].append(
            _window(server, load, "stream x1", "stream_steady", seconds=seconds, batch=1, inflight=64)
        )
    after = asyncio.run(postgres_activity(dsn))
    commits = after["xact_commit"] - before["xact_commit"] - own["xact_commit"]
    rows_written = after["rows_written"] - before["rows_written"]

    return commits, rows_written


def _push(
    load: LoadGenerator,
    server: ServerProcess,
    members: list[MemberSpec],
    groups: int,
    trials: int,
    interval_ms: int,
    topics: dict[str, tuple[str, ...]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, int, int]:
    """Trials with push, then heartbeat-only ones, on the same members and streams."""
    dsn = server.dsn
    # (a) push, then heartbeat-only, on the same members and streams.
    poller = Poller(server.target)
    paced = load.start("stream_paced", seconds=3600, interval_ms=interval_ms, push=True)
    time.sleep(interval_ms / 1000 * 1.5)  # every member heartbeated on its stream
    commits_push_before = asyncio.run(postgres_activity(dsn))["xact_commit"]
    # The members in each group now (trials add and remove some), across both series.
    live = {g: [m for m in members if m.group_id == g] for g in topics}
    push = _trials(load, poller, members, groups, trials, interval_ms, topics, 30, live)
    commits_push = asyncio.run(postgres_activity(dsn))["xact_commit"] - commits_push_before
    load.run("stream_control", push=False)
    baseline_count = max(2, trials // 3)
    commits_base_before = asyncio.run(postgres_activity(dsn))["xact_commit"]
    heartbeat_only = _trials(load, poller, members, groups, baseline_count, interval_ms, topics, 60, live)
    commits_base = asyncio.run(postgres_activity(dsn))["xact_commit"] - commits_base_before
    nudges = sum(r["nudges"] for r in load.run("stream_control", stop=True))
    load.wait(paced)
    return push, heartbeat_only, commits_push, commits_base, nudges


def _report_capacity(
    windows: dict[str, list[Window]],
    members: list[MemberSpec],
    processes: int,
    seconds: float,
    commits: int,
    rows_written: int,
    context: dict[str, Any],
) -> dict[str, Any]:
    # -- (b) capacity ---------------------------------------------------------------
    rows = []
    for name, runs in windows.items():
        for w in runs:
            rows.append([name, w.calls, w.rate, w.per_cpu_second, percentile(w.latencies_us, 99) / 1000])
    table(
        f"Capacity: no-change heartbeats, {len(members)} members, {processes} load processes, "
        f"{seconds:.0f} s windows",
        ["transport", "calls", "hb/s", "hb per server CPU s", "p99 ms"],
        rows,
    )
    ratio100 = [
        s.per_cpu_second / u.per_cpu_second
        for s, u in zip(windows["stream x100"], windows["unary"], strict=True)
    ]
    ratio1 = [
        s.per_cpu_second / u.per_cpu_second
        for s, u in zip(windows["stream x1"], windows["unary"], strict=True)
    ]
    print(
        f"heartbeats per server CPU second, stream/unary: batches of 100 {statistics.median(ratio100):.2f}x "
        f"(target >= 5; per round {[round(r, 2) for r in ratio100]}), batches of 1 "
        f"{statistics.median(ratio1):.2f}x (target >= 1.5; per round {[round(r, 2) for r in ratio1]}); "
        f"Postgres during the windows: {commits} commits (target 0), {rows_written} rows written"
    )
    return figure(
        "streams",
        part="capacity",
        batch100_ratio=round(statistics.median(ratio100), 2),
        batch100_ratio_per_round=[round(r, 2) for r in ratio100],
        batch1_ratio=round(statistics.median(ratio1), 2),
        batch1_ratio_per_round=[round(r, 2) for r in ratio1],
        unary_hb_per_cpu_s=round(statistics.median(w.per_cpu_second for w in windows["unary"])),
        postgres_commits=commits,
        postgres_rows_written=rows_written,
        seconds=seconds,
        **context,
    )


def _report_push(
    push: list[dict[str, Any]],
    heartbeat_only: list[dict[str, Any]],
    commits_push: int,
    commits_base: int,
    nudges: int,
    members: list[MemberSpec],
    groups: int,
    interval_ms: int,
    context: dict[str, Any],
) -> dict[str, Any]:
    # -- (a) convergence ------------------------------------------------------------
    push_ms = sorted(t["ms"] for t in push)
    base_ms = sorted(t["ms"] for t in heartbeat_only)
    table(
        f"Time to Stable after a join or a leave, {len(members)} members in {groups} groups, "
        f"heartbeat interval {interval_ms} ms",
        ["mode", "trials", "p50 ms", "p99 ms", "max ms", "joins p99", "leaves p99", "commits/trial"],
        [
            [
                "push",
                len(push_ms),
                percentile(push_ms, 50),
                percentile(push_ms, 99),
                push_ms[-1],
                percentile(sorted(t["ms"] for t in push if t["kind"] == "join"), 99),
                percentile(sorted(t["ms"] for t in push if t["kind"] == "leave"), 99),
                commits_push / len(push),
            ],
            [
                "heartbeat-only",
                len(base_ms),
                percentile(base_ms, 50),
                percentile(base_ms, 99),
                base_ms[-1],
                percentile(sorted(t["ms"] for t in heartbeat_only if t["kind"] == "join"), 99),
                percentile(sorted(t["ms"] for t in heartbeat_only if t["kind"] == "leave"), 99),
                commits_base / len(heartbeat_only),
            ],
        ],
    )
    plot = _plot(push_ms, base_ms, interval_ms)
    print(
        f"p99 time to Stable with push {percentile(push_ms, 99):.1f} ms (target < 100), heartbeat-only "
        f"{percentile(base_ms, 99):.0f} ms; {nudges} nudges; plot {plot}"
    )
    return figure(
        "streams",
        part="push",
        push_p50_ms=round(percentile(push_ms, 50), 1),
        push_p99_ms=round(percentile(push_ms, 99), 1),
        push_max_ms=round(push_ms[-1], 1),
        heartbeat_only_p50_ms=round(percentile(base_ms, 50)),
        heartbeat_only_p99_ms=round(percentile(base_ms, 99)),
        trials=len(push_ms),
        heartbeat_only_trials=len(base_ms),
        commits_per_trial_push=round(commits_push / len(push), 1),
        commits_per_trial_heartbeat_only=round(commits_base / len(heartbeat_only), 1),
        nudges=nudges,
        interval_ms=interval_ms,
        **context,
    )


if __name__ == "__main__":
    main()
