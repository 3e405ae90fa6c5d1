"""Step cost: what one member's reconciliation step costs the coordinator's process.

A settled group grows its topic by one partition, so its group epoch moves, its
target is recomputed (in the heartbeat, before the timing starts) and every
other member's next heartbeat is a step to the new epoch: one durable write
each. The baseline, in the same run, is a round of heartbeats that change
nothing. Both rounds go through the coordinator in-process (engine, store,
replay, timers; no gRPC), and what is reported is this process's CPU per
heartbeat (Postgres runs in its own process and is not counted). This is the
work a big group's rebalance adds to the event loop every other group shares
(benchmark 4), so it is tracked as a ratio: steps / unchanged heartbeats.

    python -m bench.steps [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from bench.report import figure, machine, table
from bench.servers import BenchPostgres
from regroup.reconciler import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse, OwnedTopicPartitions
from regroup.server.app import RegroupServer
from regroup.server.config import Settings
from regroup.server.logs import logging_at


class _Members:
    """Members following the protocol against an in-process coordinator."""

    def __init__(self, coordinator: Any, group_id: str, topic: str) -> None:
        self.coordinator = coordinator
        self.group_id = group_id
        self.topic = topic
        #: member id -> (member epoch, owned partitions per topic id)
        self.state: dict[str, tuple[int, dict[str, tuple[int, ...]]]] = {}

    async def join(self) -> None:
        req = ConsumerGroupHeartbeat(
            self.group_id,
            "",
            0,
            subscribed_topic_names=(self.topic,),
            rebalance_timeout_ms=600_000,
            owned_topic_partitions=(),
        )
        self._apply(await self.coordinator.consumer_group_heartbeat(req), None)

    async def beat(self, member_id: str) -> None:
        epoch, owned = self.state[member_id]
        # Owned partitions go with every heartbeat, as KIP-848 clients send them
        # after a change; the unchanged heartbeats carry them too, so that the two
        # rounds differ only in the step itself.
        req = ConsumerGroupHeartbeat(
            self.group_id,
            member_id,
            epoch,
            owned_topic_partitions=tuple(OwnedTopicPartitions(t, "", p) for t, p in sorted(owned.items())),
        )
        self._apply(await self.coordinator.consumer_group_heartbeat(req), owned)

    def _apply(self, resp: ConsumerGroupHeartbeatResponse, owned: dict[str, tuple[int, ...]] | None) -> None:
        if resp.assignment is not None:
            owned = {t: tuple(sorted(p)) for t, p in resp.assignment.items()}
        self.state[resp.member_id] = (resp.member_epoch, owned or {})

    def settled(self) -> bool:
        group = self.coordinator.groups[self.group_id]
        return group.assignment_epoch == group.group_epoch and all(
            m.member_epoch == group.group_epoch and not m.pending_revocation for m in group.members.values()
        )


async def _round(members: _Members, ids: list[str]) -> tuple[float, int]:
    """This process's CPU per heartbeat (us) over one heartbeat of each member, and the commits."""
    store = members.coordinator.store
    commits, cpu = store.commits, time.process_time()
    for member_id in ids:
        await members.beat(member_id)
    return (time.process_time() - cpu) / len(ids) * 1e6, store.commits - commits


async def _run(dsn: str, n_members: int, partitions: int, rounds: int, history: int) -> dict[str, Any]:
    settings = Settings(
        listen="127.0.0.1:0",
        # Metrics recorded as a deployment records them, on a free port: the default one
        # may be a `make run`'s.
        metrics_listen="127.0.0.1:0",
        database_url=dsn,
        shutdown_grace_s=0.5,
        assignment_interval_ms=0,  # the target is computed by the heartbeat that finds it due
        inline_assignment_max_partitions=max(partitions * 2, 10_000),
        session_timeout_ms=600_000,
        history_max_events=history,
    )
    server = RegroupServer(settings)
    await server.start()
    try:
        coordinator = server.coordinator
        outcome = (await coordinator.create_topics([("steps", partitions, ())]))[0]
        assert outcome.topic is not None, outcome.error
        members = _Members(coordinator, "steps", "steps")
        for _ in range(n_members):
            await members.join()
        for _ in range(50):
            for member_id in list(members.state):
                await members.beat(member_id)
            if members.settled():
                break
        assert members.settled(), "the group did not settle"
        ids = sorted(members.state)
        unchanged: list[float] = []
        steps: list[float] = []
        step_commits = unchanged_commits = 0
        for i in range(rounds):
            cpu, commits = await _round(members, ids)
            unchanged.append(cpu)
            unchanged_commits += commits
            grown = partitions + 1 + i
            await coordinator.create_partitions([("steps", outcome.topic.topic_id, grown, ())])
            await members.beat(ids[0])  # computes the new target: not timed
            cpu, commits = await _round(members, ids[1:])
            steps.append(cpu)
            step_commits += commits
            for member_id in ids:  # the grown partition's new owner takes it
                await members.beat(member_id)
        return {
            "unchanged": unchanged,
            "steps": steps,
            "unchanged_commits": unchanged_commits,
            "unchanged_commits_per_heartbeat": unchanged_commits / (rounds * len(ids)),
            "step_commits_per_step": step_commits / (rounds * (len(ids) - 1)),
        }
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--history-max-events",
        type=int,
        default=Settings().history_max_events,
        help="REGROUP_HISTORY_MAX_EVENTS (0: no history, to measure what it costs a step)",
    )
    args = parser.parse_args(argv)
    n_members, partitions, rounds = (50, 5_000, 2) if args.quick else (300, 30_000, 6)
    postgres = BenchPostgres()
    try:
        with logging_at("warning"):
            result = asyncio.run(
                _run(postgres.new_database(), n_members, partitions, rounds, args.history_max_events)
            )
    finally:
        postgres.close()
    unchanged, steps = statistics.median(result["unchanged"]), statistics.median(result["steps"])
    table(
        f"CPU of the coordinator's process per heartbeat, {n_members} members over {partitions} partitions "
        f"(median of {rounds} rounds)",
        ["heartbeat", "cpu us", "per round", "Postgres commits each"],
        [
            [
                "changes nothing",
                unchanged,
                " ".join(f"{x:.0f}" for x in result["unchanged"]),
                result["unchanged_commits_per_heartbeat"],
            ],
            [
                "step to a new epoch",
                steps,
                " ".join(f"{x:.0f}" for x in result["steps"]),
                result["step_commits_per_step"],
            ],
        ],
    )
    return figure(
        "steps",
        members=n_members,
        partitions=partitions,
        rounds=rounds,
        unchanged_cpu_us=round(unchanged, 1),
        step_cpu_us=round(steps, 1),
        step_over_unchanged=round(steps / unchanged, 2),
        unchanged_commits=result["unchanged_commits"],
        commits_per_step=round(result["step_commits_per_step"], 3),
        quick=args.quick,
        history_max_events=args.history_max_events,
        **machine(),
    )


if __name__ == "__main__":
    main()
