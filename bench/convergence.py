"""Benchmark 2: how fast a group settles after a change, and what it costs.

Real members from the load generator heartbeat at the server's interval and
acknowledge revocations at once. Scenarios:
  (a) members join a group on one large topic from nothing;
  (b) 10 members; the topic grows from 100 to 1,000 partitions (Kafka's
      published case: 103 s with the classic protocol, 5 s with KIP-848);
  (c) one of the members crashes (detected after the session timeout), then
      a new one joins.
For each: the time from the change until the group is Stable (in heartbeat
intervals; for a crash, counted after the session timeout expired),
heartbeats sent, partitions moved against the minimum possible, Postgres
transactions, and instants at which a partition had two owners (from every
member's own record of what it held, on one monotonic clock). (a) and (b)
are also drawn: partitions owned per member over time, as PNG files.

    python -m bench.convergence [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.loadgen import LoadGenerator, MemberSpec, make_members
from bench.report import RESULTS, figure, machine, table
from bench.servers import BenchPostgres, ServerProcess, postgres_activity, start_coordinator
from regroup.v1 import admin_pb2, admin_pb2_grpc

#: (monotonic seconds, member id, acquired [(topic, partition)], released [...])
Event = tuple[float, str, list[tuple[str, int]], list[tuple[str, int]]]


@dataclass
class Outcome:
    scenario: str
    intervals: float
    seconds: float
    heartbeats: int
    moved: int
    minimum_moves: int
    postgres_commits: int
    postgres_xids: int
    double_owned: int
    members: int
    partitions: int
    extra: dict[str, Any] = field(default_factory=dict)


async def _admin(target: str, call: Callable[[admin_pb2_grpc.GroupAdminStub], Any]) -> Any:
    async with grpc.aio.insecure_channel(target) as channel:
        return await call(admin_pb2_grpc.GroupAdminStub(channel))


def _group(target: str, group_id: str) -> Any:
    """The group's ListGroups entry (state and epochs; cheap, unlike DescribeGroups)."""

    async def describe(admin: admin_pb2_grpc.GroupAdminStub) -> Any:
        return await admin.ListGroups(admin_pb2.ListGroupsRequest())

    groups = asyncio.run(_admin(target, describe)).groups
    return next((g for g in groups if g.group_id == group_id), None)


def _state(target: str, group_id: str) -> str:
    group = _group(target, group_id)
    return "Dead" if group is None else str(group.group_state)


def _epoch(target: str, group_id: str) -> int:
    group = _group(target, group_id)
    return 0 if group is None else int(group.group_epoch)


def _wait_stable(
    target: str, group_id: str, timeout: float, poll: float, after_epoch: int = 0, members: int = 0
) -> float:
    """Seconds until the group is Stable at an epoch above `after_epoch` with at least
    `members` members (polling ListGroups)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        group = _group(target, group_id)
        if (
            group is not None
            and group.group_state == "Stable"
            and group.group_epoch > after_epoch
            and group.members >= members
        ):
            return time.monotonic() - started
        time.sleep(poll)
    raise RuntimeError(f"{group_id} was not Stable within {timeout} s")


def _owners_at(events: Sequence[Event], until: float) -> dict[tuple[str, int], str]:
    owners: dict[tuple[str, int], str] = {}
    for at, member, acquired, released in sorted(events):
        if at > until:
            break
        for tp in released:
            if owners.get(tp) == member:
                del owners[tp]
        for tp in acquired:
            owners[tp] = member
    return owners


def double_owned(events: Sequence[Event]) -> int:
    """Acquisitions of a partition that another member still held at that instant."""
    owners: dict[tuple[str, int], str] = {}
    violations = 0
    for _, member, acquired, released in sorted(events, key=lambda e: e[0]):
        for tp in released:
            if owners.get(tp) == member:
                del owners[tp]
        for tp in acquired:
            holder = owners.get(tp)
            if holder is not None and holder != member:
                violations += 1
            owners[tp] = member
    return violations


def moves_after(events: Sequence[Event], since: float) -> int:
    """Partitions acquired after `since` by a member other than their owner at `since`."""
    before = _owners_at(events, since)
    moved = 0
    for at, member, acquired, _ in events:
        if at <= since:
            continue
        for tp in acquired:
            if tp in before and before[tp] != member:
                moved += 1
    return moved


def plot(events: Sequence[Event], t0: float, interval_s: float, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts: dict[str, int] = {}
    series: dict[str, tuple[list[float], list[int]]] = {}
    owners_x, owners_y = [0.0], [0]  # how many members own something
    for at, member, acquired, released in sorted(events, key=lambda e: e[0]):
        before = counts.get(member, 0)
        counts[member] = before + len(acquired) - len(released)
        xs, ys = series.setdefault(member, ([0.0], [0]))
        x = (at - t0) / interval_s
        xs.append(x)
        ys.append(ys[-1])
        xs.append(x)
        ys.append(counts[member])
        owners_x.append(x)
        owners_y.append(owners_y[-1] + (counts[member] > 0) - (before > 0))
    end = max((xs[-1] for xs, _ in series.values()), default=0.0) + 0.5
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    alpha = 0.9 if len(series) <= 20 else max(0.08, 20 / len(series))
    peak = max(series, key=lambda m: max(series[m][1]), default=None)
    for member, (xs, ys) in series.items():
        if member != peak or len(series) <= 20:
            ax.plot([*xs, end], [*ys, ys[-1]], linewidth=1, alpha=alpha)
    if peak is not None and len(series) > 20:
        # Drawn last and solid: among many faint lines, the one that held the most.
        xs, ys = series[peak]
        ax.plot([*xs, end], [*ys, ys[-1]], linewidth=1.5, color="tab:red", label="the member that held most")
        ax.legend(loc="center left")
    ax.set_xlabel("time since the change (heartbeat intervals)")
    ax.set_ylabel("partitions owned")
    finals = sorted(counts.values())
    if finals and max(max(ys) for _, ys in series.values()) > 20 * max(1, finals[len(finals) // 2]):
        # One member held far more than the share each ends with (the first to
        # join takes everything): a linear axis would flatten everyone else.
        ax.set_yscale("symlog", linthresh=10)
    if len(series) > 20:
        # Too many lines to tell apart: how many members own something, over time.
        owners = ax.twinx()
        owners.step([*owners_x, end], [*owners_y, owners_y[-1]], where="post", color="black", linewidth=1.5)
        owners.set_ylabel("members owning partitions (black)")
        owners.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


@dataclass
class Harness:
    postgres: BenchPostgres
    interval_ms: int
    session_ms: int
    server: ServerProcess | None = None
    dsn: str = ""

    def start(self) -> ServerProcess:
        self.dsn = self.postgres.new_database()
        # Batch targets at a fifth of the heartbeat interval, the ratio of Kafka's defaults (1 s / 5 s).
        self.server = start_coordinator(
            self.dsn,
            heartbeat_interval_ms=self.interval_ms,
            session_timeout_ms=self.session_ms,
            assignment_interval_ms=max(1, self.interval_ms // 5),
        )
        return self.server

    def create_topic(self, name: str, partitions: int) -> None:
        assert self.server is not None

        async def create(admin: admin_pb2_grpc.GroupAdminStub) -> Any:
            return await admin.CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[admin_pb2.CreatableTopic(name=name, num_partitions=partitions)]
                )
            )

        assert asyncio.run(_admin(self.server.target, create)).topics[0].error_code == 0

    def grow_topic(self, name: str, count: int) -> None:
        assert self.server is not None

        async def grow(admin: admin_pb2_grpc.GroupAdminStub) -> Any:
            topic = admin_pb2.CreatePartitionsRequest.Topic(name=name, count=count)
            return await admin.CreatePartitions(admin_pb2.CreatePartitionsRequest(topics=[topic]))

        assert asyncio.run(_admin(self.server.target, grow)).topics[0].error_code == 0

    def activity(self) -> dict[str, int]:
        return asyncio.run(postgres_activity(self.dsn))

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def _paced(load: LoadGenerator, seconds: float, interval_ms: int) -> int:
    return load.start("paced", seconds=seconds, interval_ms=interval_ms)


def _calls(load: LoadGenerator, seq: int) -> int:
    return sum(r["calls"] for r in load.wait(seq))


def scenario_join(h: Harness, members: int, partitions: int, quick: bool) -> Outcome:
    """(a) `members` join a group on a `partitions`-partition topic from nothing."""
    server = h.start()
    h.create_topic("big", partitions)
    specs = make_members(1, members, lambda g: ["big"])
    load = LoadGenerator(server.target, specs, processes=2)
    try:
        before = h.activity()
        t0 = time.monotonic()
        _paced(load, 600, h.interval_ms)
        seconds = _wait_stable(server.target, "g0000", 600, h.interval_ms / 20_000, members=members)
        heartbeats = load.calls()
        time.sleep(h.interval_ms / 1000)  # let the members see the last responses
        events = load.events()
        after = h.activity()
    finally:
        events_tail = load.close()
    all_events = events + events_tail
    acquisitions = sum(len(e[2]) for e in all_events)
    plot(
        all_events,
        t0,
        h.interval_ms / 1000,
        f"(a) {members} members join a {partitions}-partition topic",
        RESULTS / "convergence_a.png",
    )
    return Outcome(
        "a",
        seconds / (h.interval_ms / 1000),
        seconds,
        heartbeats,
        moved=acquisitions - partitions,
        minimum_moves=0,
        postgres_commits=after["xact_commit"] - before["xact_commit"],
        postgres_xids=after["next_xid"] - before["next_xid"],
        double_owned=double_owned(all_events),
        members=members,
        partitions=partitions,
    )


def scenario_growth(h: Harness, members: int, start: int, grown: int) -> Outcome:
    """(b) `members` members; the topic grows from `start` to `grown` partitions."""
    server = h.start()
    h.create_topic("grows", start)
    specs = make_members(1, members, lambda g: ["grows"])
    load = LoadGenerator(server.target, specs, processes=1)
    events: list[Event] = []
    try:
        _paced(load, 600, h.interval_ms)
        _wait_stable(server.target, "g0000", 120, h.interval_ms / 20_000)
        time.sleep(2 * h.interval_ms / 1000)
        before = h.activity()
        calls = load.calls()
        epoch = _epoch(server.target, "g0000")
        t0 = time.monotonic()
        h.grow_topic("grows", grown)
        seconds = _wait_stable(server.target, "g0000", 120, h.interval_ms / 20_000, after_epoch=epoch)
        heartbeats = load.calls() - calls
        time.sleep(h.interval_ms / 1000)
        after = h.activity()
        events = load.events()
    finally:
        events += load.close()
    plot(
        events,
        t0,
        h.interval_ms / 1000,
        f"(b) {members} members, topic grows {start} -> {grown} partitions",
        RESULTS / "convergence_b.png",
    )
    return Outcome(
        "b",
        seconds / (h.interval_ms / 1000),
        seconds,
        heartbeats,
        moved=moves_after(events, t0),
        minimum_moves=0,
        postgres_commits=after["xact_commit"] - before["xact_commit"],
        postgres_xids=after["next_xid"] - before["next_xid"],
        double_owned=double_owned(events),
        members=members,
        partitions=grown,
    )


def scenario_crash_and_rejoin(h: Harness, members: int, partitions: int) -> list[Outcome]:
    """(c) one of `members` crashes; after the group settles, a new member joins."""
    server = h.start()
    h.create_topic("work", partitions)
    specs = make_members(1, members, lambda g: ["work"])
    load = LoadGenerator(server.target, specs, processes=2)
    outcomes = []
    try:
        _paced(load, 600, h.interval_ms)
        _wait_stable(server.target, "g0000", 120, h.interval_ms / 20_000)
        time.sleep(2 * h.interval_ms / 1000)
        events = load.events()
        victim = specs[0].member_id
        victim_partitions = len([tp for tp, m in _owners_at(events, time.monotonic()).items() if m == victim])

        before = h.activity()
        calls = load.calls()
        epoch = _epoch(server.target, "g0000")
        t_crash = time.monotonic()
        load.run_on([victim], "crash")
        # The coordinator learns of the crash only when the session expires.
        time.sleep(h.session_ms / 1000 * 0.9)
        while _state(server.target, "g0000") == "Stable":
            time.sleep(h.interval_ms / 20_000)
        t_expired = time.monotonic()
        seconds = _wait_stable(server.target, "g0000", 120, h.interval_ms / 20_000, after_epoch=epoch)
        heartbeats = load.calls() - calls
        time.sleep(h.interval_ms / 1000)
        after = h.activity()
        events += load.events()
        outcomes.append(
            Outcome(
                "c-crash",
                seconds / (h.interval_ms / 1000),
                seconds,
                heartbeats,
                moved=moves_after(events, t_crash),
                minimum_moves=victim_partitions,
                postgres_commits=after["xact_commit"] - before["xact_commit"],
                postgres_xids=after["next_xid"] - before["next_xid"],
                double_owned=double_owned(events),
                members=members,
                partitions=partitions,
                extra={
                    "detected_after_s": round(t_expired - t_crash, 3),
                    "session_timeout_s": h.session_ms / 1000,
                },
            )
        )

        newcomer = MemberSpec("g0000", "rejoined-" + victim[:8], ("work",))
        before = h.activity()
        calls = load.calls()
        epoch = _epoch(server.target, "g0000")
        t_join = time.monotonic()
        load.add([newcomer])
        # A second paced command runs the newcomer (the first one ignores members added later).
        load.start("paced", seconds=600, interval_ms=h.interval_ms, member_ids=[newcomer.member_id])
        seconds = _wait_stable(server.target, "g0000", 120, h.interval_ms / 20_000, after_epoch=epoch)
        heartbeats = load.calls() - calls
        time.sleep(h.interval_ms / 1000)
        after = h.activity()
        events += load.events()
        quota = partitions // members
        outcomes.append(
            Outcome(
                "c-rejoin",
                seconds / (h.interval_ms / 1000),
                seconds,
                heartbeats,
                moved=moves_after(events, t_join),
                minimum_moves=quota,
                postgres_commits=after["xact_commit"] - before["xact_commit"],
                postgres_xids=after["next_xid"] - before["next_xid"],
                double_owned=double_owned(events),
                members=members,
                partitions=partitions,
            )
        )
    finally:
        load.close()
    return outcomes


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        sizes = {"a": (30, 300), "b": (5, 20, 200), "c": (10, 100)}
        interval_ms = {"a": 300, "b": 200, "c": 200}
    else:
        sizes = {"a": (1000, 10_000), "b": (10, 100, 1000), "c": (100, 10_000)}
        interval_ms = {"a": 1000, "b": 500, "c": 500}
    postgres = BenchPostgres()
    outcomes: list[Outcome] = []
    try:
        for name, run in (
            ("a", lambda h: [scenario_join(h, *sizes["a"], args.quick)]),
            ("b", lambda h: [scenario_growth(h, *sizes["b"])]),
            ("c", lambda h: scenario_crash_and_rejoin(h, *sizes["c"])),
        ):
            h = Harness(postgres, interval_ms[name], session_ms=interval_ms[name] * 6)
            try:
                outcomes.extend(run(h))
            finally:
                h.stop()
    finally:
        postgres.close()

    table(
        "Convergence (time from the change until Stable; for a crash, after the session timeout)",
        [
            "scenario",
            "members",
            "partitions",
            "intervals",
            "seconds",
            "moved",
            "min moves",
            "pg commits",
            "pg xids",
            "two owners",
        ],
        [
            [
                o.scenario,
                o.members,
                o.partitions,
                o.intervals,
                o.seconds,
                o.moved,
                o.minimum_moves,
                o.postgres_commits,
                o.postgres_xids,
                o.double_owned,
            ]
            for o in outcomes
        ],
    )
    lines = []
    for o in outcomes:
        lines.append(
            figure(
                "convergence",
                scenario=o.scenario,
                members=o.members,
                partitions=o.partitions,
                heartbeat_intervals=round(o.intervals, 2),
                seconds=round(o.seconds, 3),
                moved=o.moved,
                minimum_moves=o.minimum_moves,
                postgres_commits=o.postgres_commits,
                postgres_xids=o.postgres_xids,
                two_owner_instants=o.double_owned,
                interval_ms=interval_ms[o.scenario[0]],
                quick=args.quick,
                **o.extra,
                **machine(),
            )
        )
    print(f"plots: {RESULTS / 'convergence_a.png'}, {RESULTS / 'convergence_b.png'}")
    return lines


if __name__ == "__main__":
    main()
