"""Benchmark: the server-side assignors against a bare pass over the partitions.

For `uniform` and `range`, a full assignment (no member has a current target)
and an incremental one (the full result fed back as every member's current
target, plus one member joining with none), over members {100, 1,000, 5,000,
10,000} x partitions {10,000, 100,000} x topics {10, 1,000}. Each point is
compared with a baseline measured in the same run, alternating with it: a bare
pass that creates one list per member and appends every partition id to them
round robin, the least any assignor must do. The target (issue 3) is at most 3x
the baseline at every point; ratios, not times, are what carry across
machines.

The inputs are what the coordinator gives the assignors: member and topic ids
are UUID strings, members and topics are in id order (the group keeps its
member ids sorted as members join and leave, `Group.member_ids_in_order`), and
all members with the same subscription share one frozenset of topic ids, and
the spec states whether the group is homogeneous (Kafka's subscription type),
as `compute_target_assignment` builds them. Specs are built outside the timed
region; each timing runs after gc.collect() with the collector disabled, and
the best of k runs is kept.

For information only (no target): the grid's sizes are multiples of each
other, which lets the uniform assignor share frozensets between topics, so a
few points with a prime member count show the cost without that; heterogeneous
subscriptions (half the members subscribe to every topic, half to every other
topic), which take the uniform assignor's slower general path; the whole
`compute_target_assignment` for the largest points, which is what a heartbeat
that triggers a new target pays; and the client-side `uniform` and `range`
(regroup.client.assignors), which compute the same targets as the server's,
written plainly (they are the oracle of the server's in the tests): their time
for 1,000 members x 10,000 partitions, against the same baseline and next to
the server assignor on the same group, as a member computes it from the
`GroupSnapshot` it builds out of PrepareAssignment.

Rack-aware and weighted variants (issue 24), on the same points and with the
same target: `uniform+racks`, `range+racks` (partition p of every topic in
rack p mod 3 of three racks, members spread over them by id),
`uniform+weights` (capacities 1, 2, 4 by id) and both at once. The
incremental spec is the variant's own full result plus a newcomer; each row
also gives the rack locality achieved against the best balance allows
(`regroup.reconciler.rack_locality`). For information, `skeleton` times
only the per-member steps no implementation of the rack-aware weighted rules
can skip for a fresh target, a lower bound to read the variants' figures by.

    python -m bench.assignors [--quick|--full]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from itertools import compress
from operator import add
from typing import Any

from bench.report import figure, machine, table
from regroup.client.assignors import AssignorMember, ClientAssignor, GroupSnapshot, TopicInfo
from regroup.client.assignors import RangeAssignor as ClientRangeAssignor
from regroup.client.assignors import UniformAssignor as ClientUniformAssignor
from regroup.client.types import TopicPartition
from regroup.reconciler import Topic
from regroup.reconciler.assignors import (
    BUILTIN_ASSIGNORS,
    Assignor,
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    SubscriptionType,
)
from regroup.reconciler.context import GroupConfig
from regroup.reconciler.model import EMPTY_ASSIGNMENT, Assignment, Member, MemberMetadata
from regroup.reconciler.rack_locality import rack_locality
from regroup.reconciler.target_assignment import compute_target_assignment
from regroup.reconciler.target_summary import ComputedSummary, TargetSummaryKeeper
from regroup.reconciler.topics import TopicsImage

TARGET_RATIO = 3.0
MEMBERS = (100, 1_000, 5_000, 10_000)
PARTITIONS = (10_000, 100_000)
TOPICS = (10, 1_000)
QUICK_POINTS = ((100, 10_000, 10), (1_000, 10_000, 1_000))
MODES = ("full", "incremental")


def _ids(rng: random.Random, n: int) -> list[str]:
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


def make_topics(rng: random.Random, partitions: int, topics: int) -> dict[str, Topic]:
    """`topics` topics sharing `partitions` as evenly as possible, sorted by id
    as compute_target_assignment passes them."""
    base, extra = divmod(partitions, topics)
    ids = _ids(rng, topics)
    made = {t: Topic(t, f"topic-{i}", base + (i < extra)) for i, t in enumerate(ids)}
    return {t: made[t] for t in sorted(made)}


def subscriptions(
    topics: dict[str, Topic], member_ids: Sequence[str], mixed: bool
) -> dict[str, frozenset[str]]:
    """Everyone on every topic; or (`mixed`) every other member on every other topic."""
    everything = frozenset(topics)
    if not mixed:
        return dict.fromkeys(member_ids, everything)
    half = frozenset(sorted(topics)[::2])
    return {m: (half if i % 2 else everything) for i, m in enumerate(member_ids)}


def group_spec(
    topics: dict[str, Topic], subscribed: dict[str, frozenset[str]], current: dict[str, Assignment]
) -> GroupSpec:
    members = {
        m: MemberSpec(m, None, None, subscribed[m], current.get(m, EMPTY_ASSIGNMENT))
        for m in sorted(subscribed)
    }
    # The coordinator states the subscription type (it resolves each distinct subscription once).
    distinct = len(set(subscribed.values()))
    kind = SubscriptionType.HOMOGENEOUS if distinct <= 1 else SubscriptionType.HETEROGENEOUS
    # And whether any member is weighted, which it knows as it builds each MemberSpec,
    # and that members come in id order, which they do as it builds them from sorted ids.
    return GroupSpec(
        members=members, topics=topics, subscription_type=kind, weighted=False, members_in_id_order=True
    )


def specs(
    assignor: Assignor, num_members: int, partitions: int, num_topics: int, mixed: bool = False, seed: int = 0
) -> dict[str, GroupSpec]:
    """The full spec, and the incremental one: its result as current, plus a newcomer."""
    rng = random.Random(seed)
    topics = make_topics(rng, partitions, num_topics)
    member_ids = _ids(rng, num_members + 1)
    subscribed = subscriptions(topics, member_ids, mixed)
    newcomer = member_ids[-1]  # joins with no current target
    full = group_spec(topics, {m: s for m, s in subscribed.items() if m != newcomer}, {})
    return {"full": full, "incremental": group_spec(topics, subscribed, assignor.assign(full))}


def baseline(num_members: int, sizes: Sequence[int]) -> list[list[int]]:
    """The bare pass: one list per member, every partition id appended round robin."""
    lists: list[list[int]] = [[] for _ in range(num_members)]
    i = 0
    for n in sizes:
        for p in range(n):
            lists[i].append(p)
            i += 1
            if i == num_members:
                i = 0
    return lists


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        gc.enable()


def compare(fn: Callable[[], object], base: Callable[[], object], runs: int) -> tuple[float, float]:
    """Best of `runs` of each, in ms, alternating so that both see the same machine."""
    fn()
    base()  # warm up: first-call allocations are not what a running coordinator pays
    best_fn = best_base = float("inf")
    for _ in range(runs):
        best_base = min(best_base, _timed(base))
        best_fn = min(best_fn, _timed(fn))
    return best_fn * 1e3, best_base * 1e3


def bench_point(
    name: str, num_members: int, partitions: int, num_topics: int, runs: int, mixed: bool = False
) -> list[dict[str, Any]]:
    assignor = BUILTIN_ASSIGNORS[name]
    built = specs(assignor, num_members, partitions, num_topics, mixed)
    out = []
    for mode in MODES:
        spec = built[mode]
        sizes = [t.num_partitions for t in spec.topics.values()]
        count = len(spec.members)
        assignor_ms, baseline_ms = compare(
            partial(assignor.assign, spec), partial(baseline, count, sizes), runs
        )
        out.append(
            {
                "assignor": name,
                "mode": mode,
                "members": num_members,
                "partitions": partitions,
                "topics": num_topics,
                "baseline_ms": round(baseline_ms, 3),
                "assignor_ms": round(assignor_ms, 3),
                "ratio": round(assignor_ms / baseline_ms, 2),
            }
        )
    return out


#: Rack-aware and weighted variants (issue 24): (assignor, racks, weights).
VARIANTS = {
    "uniform+racks": ("uniform", True, False),
    "uniform+weights": ("uniform", False, True),
    "uniform+racks+weights": ("uniform", True, True),
    "range+racks": ("range", True, False),
}
RACKS = ("rack-a", "rack-b", "rack-c")
CAPACITIES = (1, 2, 4)


def _bucket(member_id: str) -> int:
    """A member's rack or weight class from its id, so that it stays the same
    when another member joins (an index in id order would not)."""
    return int(member_id[:8], 16) % 3


def with_variant(spec: GroupSpec, racks: bool, weights: bool) -> GroupSpec:
    """`spec` with racks (partition p of every topic in rack p mod 3, Kafka's
    round-robin replica placement over three racks; members spread over the
    three racks by id) and/or capacities 1, 2 or 4 (by id)."""
    topics = spec.topics
    if racks:
        layouts: dict[int, tuple[str, ...]] = {}
        for topic in topics.values():
            if topic.num_partitions not in layouts:
                layouts[topic.num_partitions] = tuple(RACKS[p % 3] for p in range(topic.num_partitions))
        topics = {
            t: replace(topic, partition_racks=layouts[topic.num_partitions]) for t, topic in topics.items()
        }
    members = {
        m: replace(
            s,
            rack_id=RACKS[_bucket(m)] if racks else None,
            capacity=CAPACITIES[_bucket(m)] if weights else 1,
        )
        for m, s in spec.members.items()
    }
    return replace(spec, members=members, topics=topics, weighted=weights)


def variant_specs(variant: str, num_members: int, partitions: int, num_topics: int) -> dict[str, GroupSpec]:
    """`specs` for a variant: its full spec, and its result fed back plus a newcomer."""
    name, racks, weights = VARIANTS[variant]
    assignor = BUILTIN_ASSIGNORS[name]
    rng = random.Random(0)
    topics = make_topics(rng, partitions, num_topics)
    member_ids = _ids(rng, num_members + 1)
    subscribed = subscriptions(topics, member_ids, False)
    newcomer = member_ids[-1]
    base = group_spec(topics, {m: s for m, s in subscribed.items() if m != newcomer}, {})
    full = with_variant(base, racks, weights)
    result = assignor.assign(full)
    incremental = with_variant(group_spec(topics, subscribed, dict(result)), racks, weights)
    if isinstance(result, GroupAssignment) and result.summary is not None:
        # Whoever keeps the targets keeps the summary of the ones it computed and
        # hands it back with them (reconciler/target_summary.py): the group for
        # a target computed inline, the worker's copy for a big group's.
        keeper = TargetSummaryKeeper()
        keeper.computed(ComputedSummary(result.member_ids, result.summary, "topics"))
        keeper.joined(newcomer)  # as replaying its join tells the group's keeper
        summary = keeper.summary(list(incremental.members), "topics")
        incremental = replace(incremental, current_summary=summary)
    return {"full": full, "incremental": incremental}


def bench_variant(
    variant: str, num_members: int, partitions: int, num_topics: int, runs: int
) -> list[dict[str, Any]]:
    """A variant against the baseline, with its rack locality against the optimum."""
    name, racks, _ = VARIANTS[variant]
    assignor = BUILTIN_ASSIGNORS[name]
    built = variant_specs(variant, num_members, partitions, num_topics)
    out = []
    for mode in MODES:
        spec = built[mode]
        sizes = [t.num_partitions for t in spec.topics.values()]
        assignor_ms, baseline_ms = compare(
            partial(assignor.assign, spec), partial(baseline, len(spec.members), sizes), runs
        )
        locality = rack_locality(spec, assignor.assign(spec), name)
        out.append(
            {
                "assignor": variant,
                "mode": mode,
                "members": num_members,
                "partitions": partitions,
                "topics": num_topics,
                "baseline_ms": round(baseline_ms, 3),
                "assignor_ms": round(assignor_ms, 3),
                "ratio": round(assignor_ms / baseline_ms, 2),
                "local": locality.local_partitions if racks else None,
                "best_local": locality.best_achievable if racks else None,
                "known_racks": locality.partitions_with_known_racks if racks else None,
            }
        )
    return out


def bench_target_assignment(
    name: str, num_members: int, partitions: int, num_topics: int, runs: int
) -> list[dict[str, Any]]:
    """The whole compute_target_assignment: specs from members, the assignor, the diff."""
    assignor = BUILTIN_ASSIGNORS[name]
    built = specs(assignor, num_members, partitions, num_topics)
    image = TopicsImage(next(iter(built.values())).topics.values())
    names = tuple(sorted(t.name for t in image.by_id.values()))
    config = replace(GroupConfig(), assignors=BUILTIN_ASSIGNORS)
    out = []
    for mode in MODES:
        spec = built[mode]
        members = {
            m: Member(m, MemberMetadata(subscribed_topic_names=names, server_assignor=name))
            for m in spec.members
        }
        current = {m: s.current for m, s in spec.members.items() if s.current}
        sizes = [t.num_partitions for t in spec.topics.values()]
        count = len(members)
        order = sorted(members)  # the group's index of its member ids
        total_ms, baseline_ms = compare(
            partial(compute_target_assignment, members, current, image, name, config, 2, None, order),
            partial(baseline, count, sizes),
            runs,
        )
        assignor_ms, _ = compare(partial(assignor.assign, spec), lambda: None, runs)
        out.append(
            {
                "assignor": name,
                "mode": mode,
                "members": num_members,
                "partitions": partitions,
                "topics": num_topics,
                "baseline_ms": round(baseline_ms, 3),
                "assignor_ms": round(assignor_ms, 3),
                "compute_target_assignment_ms": round(total_ms, 3),
                "ratio": round(total_ms / baseline_ms, 2),
            }
        )
    return out


def skeleton(spec: GroupSpec) -> list[Assignment]:
    """A lower bound for a fresh rack-aware weighted target (information,
    issue 24): only the steps every implementation of uniform_quota's rules
    takes for every member, each in its fastest form, and nothing else.

    It reads each member's id, rack and capacity, looks its floor up per
    capacity, files the members by rack, marks the members that get one
    partition more (a store each; here the first ones of each rack, where the
    rules also weigh the racks' gains), orders each rack's members by quota,
    most first (the rules' order of handing out), and gives each member with
    a quota a dict holding one shared frozenset, in member order. It leaves
    out the gains, the rules' choice of extras, the partitions themselves (a
    real target needs a frozenset of its own wherever partitions differ),
    the last handout and the summary: no implementation of the rules does
    less, so none is faster in this interpreter with targets as dicts."""
    member_ids = list(spec.members)
    members = list(spec.members.values())
    racks = [m.rack_id for m in members]
    capacities = [m.capacity for m in members]
    total = sum(t.num_partitions for t in spec.topics.values())
    weight = sum(capacities)
    floor_of = {c: total * c // weight for c in set(capacities)}
    floors = list(map(floor_of.__getitem__, capacities))
    groups: dict[str | None, list[int]] = {rack: [] for rack in set(racks)}
    deque(map(list.append, map(groups.__getitem__, racks), range(len(racks))), maxlen=0)
    chosen = [False] * len(members)
    share = (total - sum(floors)) // len(groups)
    for group in groups.values():
        for i in group[:share]:
            chosen[i] = True
    quotas = list(map(add, floors, chosen))
    topic_id = next(iter(spec.topics))
    piece = frozenset((0,))
    out: list[Assignment] = [EMPTY_ASSIGNMENT] * len(member_ids)
    for group in groups.values():
        rooms = list(map(quotas.__getitem__, group))
        for quota in sorted(set(rooms), reverse=True):
            if quota:
                for i in compress(group, map(quota.__eq__, rooms)):
                    out[i] = {topic_id: piece}
    return out


def bench_skeleton(num_members: int, partitions: int, num_topics: int, runs: int) -> dict[str, Any]:
    """`skeleton` and the uniform assignor on the fresh uniform+racks+weights
    spec, both against the baseline."""
    spec = variant_specs("uniform+racks+weights", num_members, partitions, num_topics)["full"]
    sizes = [t.num_partitions for t in spec.topics.values()]
    base = partial(baseline, len(spec.members), sizes)
    skeleton_ms, baseline_ms = compare(partial(skeleton, spec), base, runs)
    assignor_ms, assignor_baseline_ms = compare(
        partial(BUILTIN_ASSIGNORS["uniform"].assign, spec), base, runs
    )
    return {
        "members": num_members,
        "partitions": partitions,
        "topics": num_topics,
        "baseline_ms": round(baseline_ms, 3),
        "skeleton_ms": round(skeleton_ms, 3),
        "skeleton_ratio": round(skeleton_ms / baseline_ms, 2),
        "assignor_ms": round(assignor_ms, 3),
        "ratio": round(assignor_ms / assignor_baseline_ms, 2),
    }


CLIENT_ASSIGNORS: dict[str, ClientAssignor] = {
    "uniform": ClientUniformAssignor(),
    "range": ClientRangeAssignor(),
}


def snapshot(spec: GroupSpec, assignor: str) -> GroupSnapshot:
    """The group as a member sees it to compute the target client-side: the
    GroupSnapshot that ConsumerWire builds from PrepareAssignment."""
    topics = spec.topics
    members = tuple(
        AssignorMember(
            m.member_id,
            instance_id=m.instance_id,
            subscribed_topics=frozenset(topics[t].name for t in m.subscribed_topic_ids),
            assignment=frozenset(
                TopicPartition(topics[t].name, p, t) for t, ps in m.current.items() if t in topics for p in ps
            ),
        )
        for m in spec.members.values()
    )
    infos = tuple(TopicInfo(t.topic_id, t.name, t.num_partitions) for t in topics.values())
    return GroupSnapshot("bench", "consumer", 1, assignor, members, infos)


def bench_client_point(
    name: str, num_members: int, partitions: int, num_topics: int, runs: int, mixed: bool = False
) -> list[dict[str, Any]]:
    """The client assignor of `name` against the baseline, with the server's on the same group."""
    server = BUILTIN_ASSIGNORS[name]
    client = CLIENT_ASSIGNORS[name]
    built = specs(server, num_members, partitions, num_topics, mixed)
    out = []
    for mode in MODES:
        spec = built[mode]
        group = snapshot(spec, name)
        sizes = [t.num_partitions for t in spec.topics.values()]
        client_ms, baseline_ms = compare(
            partial(client.assign, group), partial(baseline, len(spec.members), sizes), runs
        )
        server_ms, _ = compare(partial(server.assign, spec), lambda: None, runs)
        out.append(
            {
                "assignor": name,
                "mode": mode,
                "subscriptions": "two" if mixed else "one",
                "members": num_members,
                "partitions": partitions,
                "topics": num_topics,
                "baseline_ms": round(baseline_ms, 3),
                "client_ms": round(client_ms, 3),
                "server_ms": round(server_ms, 3),
                "ratio": round(client_ms / baseline_ms, 2),
            }
        )
    return out


#: The columns every assignor table starts with, and the row keys they show.
_TIME_COLUMNS = {
    "assignor": "assignor",
    "mode": "mode",
    "members": "members",
    "partitions": "partitions",
    "topics": "topics",
    "baseline_ms": "baseline ms",
    "assignor_ms": "assignor ms",
    "ratio": "ratio",
}


def _within(r: dict[str, Any]) -> str:
    return "yes" if r["ratio"] <= TARGET_RATIO else "NO"


def _report(title: str, rows: list[dict[str, Any]], kind: str, targeted: bool) -> None:
    table(
        title,
        [*_TIME_COLUMNS.values(), "<= 3x"],
        [[*(r[k] for k in _TIME_COLUMNS), _within(r) if targeted else "-"] for r in rows],
    )
    for r in rows:
        figure(
            "assignors", kind=kind, **r, **({"within_target": r["ratio"] <= TARGET_RATIO} if targeted else {})
        )


def _report_variant(title: str, rows: list[dict[str, Any]]) -> None:
    """A variant's table: time against the baseline, and rack locality
    achieved / best achievable under balance (of the partitions with racks)."""
    table(
        title,
        [*_TIME_COLUMNS.values(), "<= 3x", "local / best"],
        [
            [
                *(r[k] for k in _TIME_COLUMNS),
                _within(r),
                "-" if r["local"] is None else f"{r['local']} / {r['best_local']}",
            ]
            for r in rows
        ],
    )
    for r in rows:
        figure("assignors", kind="variant", **r, within_target=r["ratio"] <= TARGET_RATIO)


def _columns(title: str, rows: list[dict[str, Any]], kind: str, **headers: str) -> None:
    """Prints `rows` as a table (each keyword names a row key, its value the
    column header) and records each row as a figure of `kind`."""
    table(title, list(headers.values()), [[r[key] for key in headers] for r in rows])
    for r in rows:
        figure("assignors", kind=kind, **r)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a couple of small points (a few seconds)")
    mode.add_argument("--full", action="store_true", help="the whole grid (the default)")
    parser.add_argument("--runs", type=int, help="timed runs per figure, the best is kept")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 7)
    points = (
        list(QUICK_POINTS) if args.quick else [(m, n, t) for t in TOPICS for n in PARTITIONS for m in MEMBERS]
    )
    print(f"assignors: {machine()}, best of {runs}", flush=True)

    grid: list[dict[str, Any]] = []
    for name in ("uniform", "range"):
        rows = [r for point in points for r in bench_point(name, *point, runs=runs)]
        _report(f"{name}: assignor vs baseline (target <= {TARGET_RATIO:g}x)", rows, "grid", True)
        grid += rows

    variant_rows: list[dict[str, Any]] = []
    for variant in VARIANTS:
        rows = [r for point in points for r in bench_variant(variant, *point, runs=runs)]
        _report_variant(f"{variant}: assignor vs baseline (target <= {TARGET_RATIO:g}x)", rows)
        variant_rows += rows

    unaligned = (
        [(97, 10_000, 10)]
        if args.quick
        else [(9_973, 100_000, 10), (9_973, 100_000, 1_000), (9_973, 10_000, 1_000)]
    )
    rows = [r for point in unaligned for r in bench_point("uniform", *point, runs=runs)]
    _report(
        "uniform, member counts that do not divide the partitions (information)", rows, "unaligned", False
    )

    mixed = (
        [(100, 10_000, 10)]
        if args.quick
        else [(1_000, 100_000, 10), (1_000, 100_000, 1_000), (10_000, 100_000, 10), (10_000, 100_000, 1_000)]
    )
    rows = [r for point in mixed for r in bench_point("uniform", *point, runs=max(1, runs // 2), mixed=True)]
    _report(
        "uniform, two distinct subscriptions (heterogeneous path; information)", rows, "heterogeneous", False
    )

    largest = [(1_000, 10_000, 10)] if args.quick else [(10_000, 100_000, 10), (10_000, 100_000, 1_000)]
    rows = [
        r
        for name in ("uniform", "range")
        for point in largest
        for r in bench_target_assignment(name, *point, runs=runs)
    ]
    _columns(
        "compute_target_assignment (what a heartbeat that computes a new target pays; information)",
        rows,
        "compute_target_assignment",
        assignor="assignor",
        mode="mode",
        members="members",
        partitions="partitions",
        topics="topics",
        baseline_ms="baseline ms",
        assignor_ms="assignor ms",
        compute_target_assignment_ms="total ms",
        ratio="ratio",
    )

    client_points = [(1_000, 10_000, 10)] if args.quick else [(1_000, 10_000, 10), (1_000, 10_000, 1_000)]
    rows = [
        r
        for name in ("uniform", "range")
        for point in client_points
        for mixed in (False, True)
        for r in bench_client_point(name, *point, runs=max(1, runs // 2), mixed=mixed)
    ]
    _columns(
        "client-side assignors, the plain oracle of the server's (information; server ms: the same group)",
        rows,
        "client",
        assignor="assignor",
        mode="mode",
        subscriptions="subscriptions",
        members="members",
        partitions="partitions",
        topics="topics",
        baseline_ms="baseline ms",
        client_ms="client ms",
        server_ms="server ms",
        ratio="ratio",
    )

    skeleton_points = (
        [(1_000, 10_000, 10)]
        if args.quick
        else [(5_000, 10_000, 10), (10_000, 10_000, 10), (5_000, 10_000, 1_000), (10_000, 10_000, 1_000)]
    )
    rows = [bench_skeleton(*point, runs=runs) for point in skeleton_points]
    _columns(
        "uniform+racks+weights, full: the least any implementation does (skeleton), and the assignor"
        " (information)",
        rows,
        "skeleton",
        members="members",
        partitions="partitions",
        topics="topics",
        baseline_ms="baseline ms",
        skeleton_ms="skeleton ms",
        skeleton_ratio="skeleton ratio",
        assignor_ms="assignor ms",
        ratio="assignor ratio",
    )

    misses = [r for r in grid if r["ratio"] > TARGET_RATIO]
    print(
        f"{len(grid) - len(misses)}/{len(grid)} grid figures within {TARGET_RATIO:g}x the baseline",
        flush=True,
    )
    variant_misses = [r for r in variant_rows if r["ratio"] > TARGET_RATIO]
    optimal = [r for r in variant_rows if r["local"] is not None and r["local"] == r["best_local"]]
    print(
        f"{len(variant_rows) - len(variant_misses)}/{len(variant_rows)} rack-aware and weighted figures "
        f"within {TARGET_RATIO:g}x the baseline; rack locality at the optimum in {len(optimal)}/"
        f"{sum(r['local'] is not None for r in variant_rows)}",
        flush=True,
    )
    return grid


if __name__ == "__main__":
    main()
