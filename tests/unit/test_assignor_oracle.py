"""One meaning per assignor name (issue 19): the client-side `uniform` and
`range` assignors must compute exactly the target the server's assignors of
the same name compute for the same group.

The client ones are written plainly, so they serve as a differential oracle for
the server's, which are tuned for 10,000 members x 100,000 partitions. Each
example is one group, run through the real entry points on both sides, so that
a difference in how each side is handed the group counts as much as one in
the assignors themselves:

- server: the group is replayed from its records and its pending target is
  computed by `compute_pending_assignment` (the spec from the group's members
  in id order, the preferred assignor, the target records: what the runtime
  runs inline and in its worker process), and the records are replayed;
- client: the same group, its members offering the client-side assignor of
  that name, goes through the coordinator's choice of a computing member,
  PrepareAssignment (as protobuf bytes, through the member's `ConsumerWire`
  snapshot), the client assignor, and InstallAssignment (validated and
  replayed as the coordinator does).

Both must leave every member with the same target.

The groups: homogeneous and heterogeneous subscriptions (topic names, some of
a topic that does not exist, and regexes), static members, member ids joined in
any order, topic ids in another order than their names, topics with no
partitions, and current targets that hold partitions of deleted topics, past
the end of their topic, or twice. Most are small, for hypothesis to shrink; one
in four is large (see `large_cases`).

Racks and weights (issue 24): in about two groups of three, members have racks
(some none, some a rack no partition has) and topics partition racks (some
topics none), and in about half, members have capacities other than 1, so
that both sides take their rack-aware and weighted paths (and, where a
heterogeneous `uniform` group ignores them, show that they do). The members'
racks and capacities are in their metadata records, as heartbeats leave them,
and the topics' partition racks in the topics image, so that each side gets
them from the real entry points. Settled targets are sometimes the server's
own rack-aware and weighted target, so that the "already balanced and as
local as possible" path runs too. Run with `--hypothesis-show-statistics` for
the mix.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from regroup.client.assignors import RangeAssignor as ClientRangeAssignor
from regroup.client.assignors import UniformAssignor as ClientUniformAssignor
from regroup.client.protocols import ConsumerWire
from regroup.reconciler.assignors import GroupSpec, MemberSpec, UniformAssignor
from regroup.reconciler.client_assignment import install_assignment, plan_computation, prepare_assignment
from regroup.reconciler.context import Context, GroupConfig
from regroup.reconciler.messages import PrepareAssignment
from regroup.reconciler.model import CONSUMER_GROUP_TYPE, Assignment, ClientAssignor, Group, MemberMetadata
from regroup.reconciler.records import (
    GroupMetadataRecord,
    MemberMetadataRecord,
    Record,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
)
from regroup.reconciler.replay import replay_all
from regroup.reconciler.subscription import member_topic_ids
from regroup.reconciler.target_assignment import compute_pending_assignment
from regroup.reconciler.topics import Topic, TopicsImage
from regroup.server.mapping import install_from_pb, prepare_to_pb
from regroup.v1 import coordinator_pb2
from tests.support.depth import examples

GROUP_ID = "g"
#: The group epoch moved ahead of the target's: a new target is due.
GROUP_EPOCH = 5
NOW_MS = 1_000_000
CLIENT_ASSIGNORS = {"uniform": ClientUniformAssignor(), "range": ClientRangeAssignor()}

# Failing examples are kept under the repository's (gitignored) .hypothesis/, wherever pytest runs from.
_DATABASE = DirectoryBasedExampleDatabase(
    str(Path(__file__).resolve().parents[2] / ".hypothesis" / "examples")
)

#: Topic ids are drawn from these, in any order, so that id order (the server's
#: global partition order) and name order (t0, t1, ...) differ.
TOPIC_IDS = ("7c1e", "0b3a", "f0d9", "3e77", "a41c", "58b2")
#: A topic that no longer exists: targets may still hold its partitions.
DELETED_TOPIC_ID = "dead"
#: Ids of members that held partitions once and have left since.
LEAVERS = ("left-1", "zz-left")
REGEXES = (None, None, None, "t[01]", "t.*")
#: Partition racks are drawn from these.
RACKS = ("r1", "r2", "r3")
#: Member racks: those of the partitions, none, and one that no partition has.
MEMBER_RACKS = (None, *RACKS, "r-empty")
#: Capacities of weighted groups: mostly small, now and then the largest accepted.
CAPACITIES = (1, 1, 2, 3, 5, 1000)


@dataclass(frozen=True)
class Joined:
    """A member as it joined: identity and subscription."""

    member_id: str
    instance_id: str | None
    topic_names: tuple[str, ...]
    regex: str | None
    rack_id: str | None = None
    capacity: int = 1
    #: Drained (GroupAdmin.DrainMember): the server leaves it out of the assignment,
    #: the client side must give it nothing and balance the others the same way.
    draining: bool = False


def _drain(members: tuple[Joined, ...], flags: Sequence[bool]) -> tuple[Joined, ...]:
    return tuple(
        dataclasses.replace(m, draining=True) if f else m for m, f in zip(members, flags, strict=True)
    )


@dataclass(frozen=True)
class Case:
    topics: tuple[Topic, ...]
    #: In the order they joined, which is not member id order.
    members: tuple[Joined, ...]
    #: The current targets by member id.
    targets: Mapping[str, Assignment]

    def image(self) -> TopicsImage:
        return TopicsImage(self.topics)


def _assignment(pairs: Mapping[str, set[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in pairs.items() if ps}


def _settled(
    subscriptions: Mapping[str, frozenset[str]],
    topics: Mapping[str, Topic],
    targets: dict[str, dict[str, set[int]]],
    racks: Mapping[str, str | None] | None = None,
    capacities: Mapping[str, int] | None = None,
) -> None:
    """Adds to `targets` the server's own uniform target of members with
    `subscriptions` (member id -> topic ids) over `topics`, with members' `racks`
    and `capacities` when given."""
    racks = racks or {}
    capacities = capacities or {}
    spec = GroupSpec(
        members={
            m: MemberSpec(
                m, None, racks.get(m), frozenset(subscriptions[m] & topics.keys()), {}, capacities.get(m, 1)
            )
            for m in sorted(subscriptions)
        },
        topics={t: topics[t] for t in sorted(topics)},
    )
    for member_id, assignment in UniformAssignor().assign(spec).items():
        for topic_id, partitions in assignment.items():
            targets.setdefault(member_id, {}).setdefault(topic_id, set()).update(partitions)


def _subscriptions(draw: st.DrawFn, topics: Sequence[Topic]) -> list[tuple[tuple[str, ...], str | None]]:
    """One subscription (homogeneous) or a few distinct ones, as real groups have:
    topic names (some of a topic that does not exist) and maybe a regex."""
    names = [t.name for t in topics] + ["missing"]
    subscription = st.tuples(
        st.frozensets(st.sampled_from(names), min_size=1).map(lambda s: tuple(sorted(s))),
        st.sampled_from(REGEXES),
    )
    if draw(st.booleans()):
        return [draw(subscription)]
    return draw(st.lists(subscription, min_size=2, max_size=4, unique=True))


def _members(
    member_ids: Sequence[str],
    choices: Sequence[tuple[tuple[str, ...], str | None]],
    static: Sequence[bool],
    pick: Sequence[int],
    racks: Sequence[str | None] | None = None,
    capacities: Sequence[int] | None = None,
) -> tuple[Joined, ...]:
    """Members in the order of `member_ids`, with distinct instance ids in another
    order, and the given racks and capacities (none and 1 when not given)."""
    numbers = sorted(range(len(member_ids)), key=lambda i: (pick[i], -i))
    members = []
    for n, member_id in enumerate(member_ids):
        # Every subscription has a member; the others pick one.
        topic_names, regex = choices[n] if n < len(choices) else choices[pick[n] % len(choices)]
        members.append(
            Joined(
                member_id,
                f"i{numbers[n]}" if static[n] else None,
                topic_names,
                regex,
                racks[n] if racks is not None else None,
                capacities[n] if capacities is not None else 1,
            )
        )
    return tuple(members)


@st.composite
def small_cases(draw: st.DrawFn) -> Case:
    """Small groups, whose every choice hypothesis can shrink."""
    ids = draw(st.permutations(TOPIC_IDS))[: draw(st.integers(1, 5))]
    counts = [0, 1, 2, 3, 4, 5, 7, 12]
    # Two groups in three with racks, each topic with partition racks or none.
    with_racks = draw(st.integers(0, 2)) > 0
    topics = []
    for i, topic_id in enumerate(ids):
        n = draw(st.sampled_from(counts))
        racks: tuple[str, ...] = ()
        if with_racks and draw(st.integers(0, 3)):
            racks = tuple(draw(st.lists(st.sampled_from(RACKS), min_size=n, max_size=n)))
        topics.append(Topic(topic_id, f"t{i}", n, racks))
    size = draw(st.integers(1, 9))
    member_ids = draw(
        st.lists(
            st.text(alphabet="abmz019-", min_size=1, max_size=3), min_size=size, max_size=size, unique=True
        )
    )
    member_racks = None
    if with_racks:
        member_racks = draw(st.lists(st.sampled_from(MEMBER_RACKS), min_size=size, max_size=size))
    capacities = None
    if draw(st.booleans()):  # weighted, about half
        capacities = draw(st.lists(st.sampled_from(CAPACITIES), min_size=size, max_size=size))
    members = _members(
        member_ids,
        _subscriptions(draw, tuple(topics)),
        draw(st.lists(st.booleans(), min_size=size, max_size=size)),
        draw(st.lists(st.integers(0, 8), min_size=size, max_size=size)),
        member_racks,
        capacities,
    )

    holders = [*member_ids, *LEAVERS]
    targets: dict[str, dict[str, set[int]]] = {}
    if draw(st.booleans()):
        # A settled group (the server's own uniform target, everyone on every topic)
        # that members have joined and left since, whose topics may have been resized or deleted.
        before_ids = [m for m in holders if draw(st.integers(0, 3))]
        before_topics = {
            t.topic_id: Topic(t.topic_id, t.name, draw(st.sampled_from([t.num_partitions, *counts])))
            for t in topics
            if draw(st.integers(0, 3))
        }
        if draw(st.booleans()):
            before_topics[DELETED_TOPIC_ID] = Topic(DELETED_TOPIC_ID, "gone", 3)
        # Settled by racks and capacities too, or only by counts (rack-blind, unweighted).
        aware = draw(st.booleans())
        _settled(
            dict.fromkeys(before_ids, frozenset(before_topics)),
            before_topics,
            targets,
            {m.member_id: m.rack_id for m in members} if aware else None,
            {m.member_id: m.capacity for m in members} if aware else None,
        )
    if draw(st.booleans()):
        # Random holdings: partitions held twice, past the end of their topic (or below
        # its start), of a deleted topic.
        units = [(t.topic_id, p) for t in topics for p in range(-1, t.num_partitions + 2)]
        units += [(DELETED_TOPIC_ID, p) for p in range(3)]
        for topic_id, partition in units:
            for holder in draw(st.lists(st.sampled_from(holders), max_size=2)):
                targets.setdefault(holder, {}).setdefault(topic_id, set()).add(partition)
    # Now and then a member drained, as DrainMember leaves it.
    draws = draw(st.lists(st.integers(0, 4), min_size=len(members), max_size=len(members)))
    members = _drain(members, [d == 0 for d in draws])
    return Case(
        tuple(topics), members, {m: _assignment(a) for m, a in targets.items() if m in member_ids and a}
    )


@st.composite
def large_cases(draw: st.DrawFn) -> Case:
    """Up to 300 members and topics of up to 400 partitions, drawn from a seeded
    random generator: the paths of the server assignors that only larger groups
    take (partial selections by id, many joiners, many members per partition).
    The current target is what the coordinator's events leave: the server's own
    target of the group before members joined or left, topics were resized, or
    subscriptions changed (or none, or the group's own again), sometimes with
    invalid holdings on top."""
    # A plain generator from a drawn seed: a hypothesis Random draws on every call,
    # which made generating these groups most of the test's time.
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    ids = draw(st.permutations(TOPIC_IDS))[: draw(st.integers(1, 5))]
    # Racks in about two groups of three: a few racks, laid out round robin (as
    # topics are usually created), skewed to one rack, or at random.
    rack_count = rng.choice([0, 2, 3, 5]) if rng.random() < 0.67 else 0
    rack_names = [f"r{k}" for k in range(rack_count)]
    shared_layout = rng.random() < 0.5  # topics of a size share one layout, or each has its own

    def layout(n: int, seed: int) -> tuple[str, ...]:
        if not rack_names or rng.random() < 0.2:
            return ()
        local = random.Random(seed if shared_layout else rng.random())
        kind = local.choice(["round robin", "skewed", "random"])
        if kind == "round robin":
            return tuple(rack_names[p % len(rack_names)] for p in range(n))
        if kind == "skewed":
            return tuple(
                rack_names[0] if local.random() < 0.7 else local.choice(rack_names) for _ in range(n)
            )
        return tuple(local.choice(rack_names) for _ in range(n))

    topics = []
    for i, t in enumerate(ids):
        n = rng.choice([0, 1, 3, 40, 100, 400])
        topics.append(Topic(t, f"t{i}", n, layout(n, n)))
    size = rng.choice([20, 60, 150, 300])
    member_ids = [f"{rng.randrange(36**4):x}-{i}" for i in range(size)]
    # Members' racks: mostly the partitions' racks, some none, some a rack no partition has.
    member_racks = [*rack_names, *rack_names, None, "r-empty"] if rack_names else [None]
    weighted = rng.random() < 0.5
    members = _members(
        member_ids,
        _subscriptions(draw, tuple(topics)),
        [rng.random() < 0.3 for _ in member_ids],
        [rng.randrange(size) for _ in member_ids],
        [rng.choice(member_racks) for _ in member_ids],
        [rng.choice(CAPACITIES) if weighted else 1 for _ in member_ids],
    )
    image = TopicsImage(topics)
    now = {m.member_id: member_topic_ids(image, m.topic_names, m.regex) for m in members}
    # Settled by racks and capacities too (the members' own, leavers without), or rack-blind.
    aware = rng.random() < 0.5
    racks_of = {m.member_id: m.rack_id for m in members} if aware else None
    capacities_of = {m.member_id: m.capacity for m in members} if aware else None

    # Joins and leaves of a few members are the coordinator's everyday events.
    events = ["fresh", "again", "join", "join", "join", "leave", "leave", "resize", "resubscribe", "all"]
    event = rng.choice(events)
    targets: dict[str, dict[str, set[int]]] = {}
    if event != "fresh":
        before = dict(now)
        before_topics = {t.topic_id: t for t in topics}
        if event in ("join", "all"):
            for m in rng.sample(member_ids, rng.choice([1, 1, 2, 3, 17, size // 2])):
                del before[m]
        if event in ("leave", "all"):
            for i in range(rng.choice([1, 1, 2, 3, 17, size // 2])):
                before[f"left-{i}"] = frozenset(before_topics)
        if event in ("resize", "all"):
            for t in rng.sample(topics, rng.randint(1, len(topics))):
                count = max(0, t.num_partitions + rng.choice([-1, 1]) * rng.randint(1, 10))
                before_topics[t.topic_id] = Topic(t.topic_id, t.name, count)
            before_topics[DELETED_TOPIC_ID] = Topic(DELETED_TOPIC_ID, "gone", 3)
        if event in ("resubscribe", "all"):
            before = dict.fromkeys(before, frozenset(before_topics))
        _settled(before, before_topics, targets, racks_of, capacities_of)
    if rng.random() < 0.25:
        # Some invalid holdings on top: held twice, past the end of their topic, of a deleted topic.
        units = [(t.topic_id, p) for t in topics for p in range(t.num_partitions + 2)]
        units += [(DELETED_TOPIC_ID, p) for p in range(3)]
        for topic_id, partition in rng.sample(units, min(len(units), rng.randint(1, 30))):
            targets.setdefault(rng.choice(member_ids), {}).setdefault(topic_id, set()).add(partition)
    members = _drain(members, [rng.random() < 0.05 for _ in members])
    return Case(tuple(topics), members, {m: _assignment(a) for m, a in targets.items() if m in now and a})


#: Three small groups for every large one.
cases = st.one_of(small_cases(), small_cases(), small_cases(), large_cases())


def group_records(case: Case, assignor: str, client_side: bool) -> list[Record]:
    """The records of the group: members offering `assignor` server-side or client-side."""
    records: list[Record] = [GroupMetadataRecord(GROUP_EPOCH, 0, CONSUMER_GROUP_TYPE)]
    for m in case.members:
        records.append(
            MemberMetadataRecord(
                m.member_id,
                MemberMetadata(
                    instance_id=m.instance_id,
                    subscribed_topic_names=m.topic_names,
                    subscribed_topic_regex=m.regex,
                    server_assignor=None if client_side else assignor,
                    rebalance_timeout_ms=30_000,
                    client_assignors=(ClientAssignor(assignor, 0, 0),) if client_side else (),
                    rack_id=m.rack_id,
                    capacity=m.capacity,
                    draining=m.draining,
                ),
            )
        )
    records += [TargetAssignmentMemberRecord(m, a) for m, a in case.targets.items()]
    records.append(TargetAssignmentEpochRecord(GROUP_EPOCH - 1))
    return records


def _replayed(group: Group | None, records: Sequence[Record]) -> Group:
    replayed = replay_all(group, GROUP_ID, records)
    assert replayed is not None
    return replayed


def targets_of(group: Group) -> dict[str, Assignment]:
    return {m: dict(group.target_of(m)) for m in sorted(group.members)}


def server_targets(case: Case, assignor: str) -> dict[str, Assignment]:
    ctx = Context(NOW_MS, GroupConfig(), case.image())
    group = _replayed(None, group_records(case, assignor, client_side=False))
    records = compute_pending_assignment(group, ctx)
    assert records, "a target is due"
    return targets_of(_replayed(group, records))


def client_targets(case: Case, assignor: str) -> dict[str, Assignment]:
    image = case.image()
    ctx = Context(NOW_MS, GroupConfig(), image)
    group = _replayed(None, group_records(case, assignor, client_side=True))
    records, computation = plan_computation(group, group.members, ctx)
    assert computation is not None and computation.assignor_name == assignor
    group = _replayed(group, records)
    chosen = computation.member_id

    prepared = prepare_assignment(group, PrepareAssignment(GROUP_ID, chosen, 0), ctx)
    group = _replayed(group, prepared.records)
    wire = prepare_to_pb(prepared.response, image).SerializeToString()
    prep = coordinator_pb2.PrepareAssignmentResponse.FromString(wire)
    plan = CLIENT_ASSIGNORS[prep.assignor_name].assign(ConsumerWire.snapshot(GROUP_ID, prep))
    assert plan.error == 0, plan.error_message

    request = coordinator_pb2.InstallAssignmentRequest(
        group_id=GROUP_ID, member_id=chosen, member_epoch=0, group_epoch=prep.group_epoch
    )
    ConsumerWire.fill_install(request, plan)
    request = coordinator_pb2.InstallAssignmentRequest.FromString(request.SerializeToString())
    installed = install_assignment(group, install_from_pb(request, image, CONSUMER_GROUP_TYPE), ctx)
    return targets_of(_replayed(group, installed.records))


def _describe(case: Case) -> str:
    lines = [f"topics: {[(t.topic_id, t.name, t.num_partitions, t.partition_racks) for t in case.topics]}"]
    lines += [f"member {m}" for m in case.members]
    lines += [f"target {m}: {sorted((t, sorted(p)) for t, p in a.items())}" for m, a in case.targets.items()]
    return "\n".join(lines)


def _mix(case: Case) -> str:
    """Which of the server's paths the group can take: its subscriptions, racks, weights."""
    image = case.image()
    subscriptions = {member_topic_ids(image, m.topic_names, m.regex) for m in case.members}
    subscribed = set().union(*subscriptions)
    racks = any(m.rack_id is not None for m in case.members) and any(
        image.by_id[t].partition_racks for t in subscribed
    )
    weighted = any(m.capacity != 1 for m in case.members)
    kind = "homogeneous" if len(subscriptions) == 1 else "heterogeneous"
    return f"{kind}, {'racks' if racks else 'no racks'}, {'weighted' if weighted else 'unweighted'}"


@settings(
    max_examples=examples(300),
    deadline=None,
    database=_DATABASE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@pytest.mark.parametrize("assignor", sorted(CLIENT_ASSIGNORS))
@given(case=cases)
def test_client_and_server_assignors_of_one_name_give_the_same_target(assignor: str, case: Case) -> None:
    event(_mix(case))
    server = server_targets(case, assignor)
    client = client_targets(case, assignor)
    assert client == server, _describe(case)


@pytest.mark.parametrize("weighted", [False, True])
def test_fresh_groups_big_enough_to_share_blocks_give_the_client_target(
    weighted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a fresh group, the server hands a rack's partitions out by runs of
    equal blocks (frozensets shared between topics, blocks.py) when members'
    blocks are shorter than the rack's part of every topic. Big groups of that
    shape (450 members, 1,200 partitions, three racks), weighted or not, must
    get exactly the client's plain target, and must take that path."""
    from regroup.reconciler.assignors import uniform_quota

    taken: list[int] = []
    runs = uniform_quota._Build._hand_out_runs

    def counted(self: uniform_quota._Build, takers: list[int], segments: object, record: bool = True) -> int:
        taken.append(len(takers))
        return runs(self, takers, segments, record)  # type: ignore[arg-type]

    monkeypatch.setattr(uniform_quota._Build, "_hand_out_runs", counted)
    rng = random.Random(24)
    layout = tuple(RACKS[p % len(RACKS)] for p in range(100))
    topics = tuple(Topic(f"{k:02x}", f"t{k}", 100, layout) for k in range(12))
    member_ids = [f"{rng.randrange(36**6):x}-{i}" for i in range(450)]
    members = _members(
        member_ids,
        [(tuple(t.name for t in topics), None)],
        [False] * len(member_ids),
        list(range(len(member_ids))),
        [RACKS[i % len(RACKS)] for i in range(len(member_ids))],
        [rng.choice((1, 4)) if weighted else 1 for _ in member_ids],
    )
    case = Case(topics, members, {})
    assert client_targets(case, "uniform") == server_targets(case, "uniform")
    assert taken, "the rack handout by runs did not run"
