"""Leader groups in the pure engine: the leader assignor, and a state machine that
checks single leadership and fencing-token safety (docs/leader-election.md).

The machine drives dynamic members of one leader group through joins, heartbeats
(whose responses may be lost), graceful leaves, crashes (a crashed client keeps
believing it leads: a zombie), drains and undrains, and time (sessions and
rebalance timeouts expire). Each client follows the protocol as
`regroup.client.LeaderElection` does: it is elected when an assignment lists
leadership, with the member epoch of that response as its fencing token, and
steps down when an assignment no longer lists it or the member is fenced.

After every heartbeat and timer pass: the coordinator never has two members
holding leadership (assigned or still revoking). After every step, every client
that believes it leads (zombies included) writes to a fenced sink that accepts a
token at least as high as the highest it saw; the sink must never accept writes
from a leader after it accepted a newer leader's (each takeover strictly raises
the token).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from regroup.reconciler import ApiError, ConsumerGroupHeartbeat, Context, ErrorCode, GroupConfig, Result
from regroup.reconciler.assignors import GroupSpec, LeaderAssignor, MemberSpec
from regroup.reconciler.assignors.leader import LEADERSHIP, holds_leadership
from regroup.reconciler.drain import drain_member
from regroup.reconciler.model import EMPTY_ASSIGNMENT, Assignment
from regroup.reconciler.target_assignment import group_spec
from regroup.reconciler.topics import LEADERSHIP_TOPIC_ID, LEADERSHIP_TOPIC_NAME, TopicsImage
from tests.support.depth import examples, steps
from tests.support.engine import EngineHarness, beat, owned

GROUP = "lg"
CONFIG = GroupConfig()
INTERVAL_MS = CONFIG.heartbeat_interval_ms
SESSION_MS = CONFIG.session_timeout_ms
REBALANCE_MS = 4 * INTERVAL_MS


def _spec(*members: MemberSpec, withheld: dict[str, Assignment] | None = None) -> GroupSpec:
    return GroupSpec(members={m.member_id: m for m in members}, topics={}, withheld=withheld or {})


def _member(
    member_id: str, current: Assignment = EMPTY_ASSIGNMENT, instance_id: str | None = None
) -> MemberSpec:
    return MemberSpec(member_id, instance_id, None, frozenset(), current)


def _leaders(targets: Any) -> list[str]:
    return [m for m, a in dict(targets).items() if holds_leadership(a)]


# -- the assignor -------------------------------------------------------------


def test_an_empty_group_has_no_leader() -> None:
    assert dict(LeaderAssignor().assign(_spec())) == {}


def test_exactly_one_member_leads_and_the_others_get_nothing() -> None:
    targets = dict(LeaderAssignor().assign(_spec(_member("b"), _member("a"), _member("c"))))
    assert targets == {"a": LEADERSHIP, "b": {}, "c": {}}


def test_the_leader_keeps_leadership_while_it_is_a_member() -> None:
    targets = LeaderAssignor().assign(_spec(_member("a"), _member("b"), _member("c", LEADERSHIP)))
    assert _leaders(targets) == ["c"]
    # Unchanged targets are the very objects given (the coordinator skips comparing them).
    assert targets["c"] is not None and dict(targets)["c"] == LEADERSHIP


def test_static_members_are_elected_first_by_instance_id() -> None:
    spec = _spec(_member("a"), _member("z2", instance_id="i2"), _member("z1", instance_id="i1"))
    assert _leaders(LeaderAssignor().assign(spec)) == ["z1"]


def test_a_draining_leader_is_withheld_and_another_member_is_elected() -> None:
    spec = _spec(_member("b"), _member("c"), withheld={"a": LEADERSHIP})
    assert _leaders(LeaderAssignor().assign(spec)) == ["b"]


def test_leadership_is_shown_under_its_reserved_name_and_never_matches_a_subscription() -> None:
    image = TopicsImage()
    assert image.name_of(LEADERSHIP_TOPIC_ID) == LEADERSHIP_TOPIC_NAME
    assert LEADERSHIP_TOPIC_NAME not in image.by_name


def test_only_the_leader_assignor_gets_leadership_in_its_input() -> None:
    h = EngineHarness()
    h.create_topic("orders", 2)
    h.heartbeat(_join("a", assignor="uniform", topics=("orders",)))
    group = h.groups[GROUP]
    spec = group_spec(group.members, group.target, h.image)
    assert LEADERSHIP_TOPIC_ID not in spec.topics
    assert not any(holds_leadership(a) for a in group.target.values())


# -- the engine ---------------------------------------------------------------


def _join(member_id: str, assignor: str = "leader", topics: tuple[str, ...] = ()) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=GROUP,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=REBALANCE_MS,
        subscribed_topic_names=topics,
        server_assignor=assignor,
        owned_topic_partitions=(),
    )


def test_a_second_member_leads_only_after_the_first_leaves() -> None:
    h = EngineHarness()
    a = h.heartbeat(_join("a"))
    assert a.assignment == LEADERSHIP
    b = h.heartbeat(_join("b"))
    assert b.assignment in (None, {})
    h.heartbeat(beat(GROUP, "a", -1))
    b = h.heartbeat(beat(GROUP, "b", b.member_epoch, {}))
    assert b.assignment == LEADERSHIP and b.member_epoch > a.member_epoch


def test_a_crashed_leader_is_replaced_once_its_session_expires_with_a_higher_token() -> None:
    h = EngineHarness()
    a = h.heartbeat(_join("a"))
    b = h.heartbeat(_join("b"))
    for _ in range(SESSION_MS // INTERVAL_MS - 1):
        h.advance(INTERVAL_MS)
        b = h.heartbeat(beat(GROUP, "b", b.member_epoch, {}))
        assert b.assignment in (None, {})  # a's session has not expired: no second leader
    h.advance(INTERVAL_MS + 1)
    b = h.heartbeat(beat(GROUP, "b", b.member_epoch, {}))
    assert b.assignment == LEADERSHIP and b.member_epoch > a.member_epoch


def test_a_drained_leader_hands_over_only_after_it_revoked() -> None:
    h = EngineHarness()
    a = h.heartbeat(_join("a"))
    b = h.heartbeat(_join("b"))
    h.apply(GROUP, drain_member(h.groups[GROUP], GROUP, "a", "", False, h.ctx()))
    h.advance(CONFIG.assignment_interval_ms)
    b = h.heartbeat(beat(GROUP, "b", b.member_epoch, {}))
    assert not b.assignment  # a still holds it
    a = h.heartbeat(beat(GROUP, "a", a.member_epoch, LEADERSHIP))
    assert a.assignment == {}
    a = h.heartbeat(beat(GROUP, "a", a.member_epoch, {}))
    b = h.heartbeat(beat(GROUP, "b", b.member_epoch, {}))
    assert b.assignment == LEADERSHIP


def test_a_leader_that_changes_its_subscription_keeps_leadership() -> None:
    h = EngineHarness()
    h.create_topic("orders", 2)
    a = h.heartbeat(_join("a"))
    a = h.heartbeat(
        dataclasses.replace(beat(GROUP, "a", a.member_epoch, LEADERSHIP), subscribed_topic_names=("orders",))
    )
    assert a.assignment in (None, LEADERSHIP)
    assert holds_leadership(h.groups[GROUP].members["a"].assigned)
    assert not h.groups[GROUP].members["a"].pending_revocation


def test_a_leader_group_has_one_leader_whatever_replicas_members_ask_for() -> None:
    h = EngineHarness()
    h.heartbeat(dataclasses.replace(_join("a"), replicas=2))
    b = h.heartbeat(dataclasses.replace(_join("b"), replicas=2))
    h.heartbeat(beat(GROUP, "b", b.member_epoch, {}))
    group = h.groups[GROUP]
    assert [m for m, a in group.target.items() if a] == ["a"]
    assert dict(group.target)["a"] == LEADERSHIP


# -- the state machine ----------------------------------------------------------


@dataclass
class Client:
    member_id: str
    epoch: int = 0
    crashed: bool = False
    left: bool = False
    #: The fencing token while it believes it leads, else None.
    token: int | None = None


@dataclass
class Sink:
    """A fenced external store: accepts a write whose token is at least the highest seen."""

    highest: int = -1
    accepted: list[tuple[str, int]] = field(default_factory=list)

    def write(self, writer: str, token: int) -> bool:
        if token < self.highest:
            return False
        self.highest = token
        self.accepted.append((writer, token))
        return True


class _Harness(EngineHarness):
    def __init__(self, machine: LeaderMachine) -> None:
        super().__init__()
        self.machine = machine

    def apply(self, group_id: str, result: Result[Any]) -> None:
        super().apply(group_id, result)
        self.machine.check_single_holder()

    def ctx(self) -> Context:
        return dataclasses.replace(super().ctx(), new_member_id="unused")


class LeaderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = _Harness(self)
        self.clients: list[Client] = []
        self.sink = Sink()
        #: (member id, token) of every tenure, in the order clients were elected.
        self.tenures: list[tuple[str, int]] = []
        self.drained: set[str] = set()

    # -- the invariants ------------------------------------------------------

    def check_single_holder(self) -> None:
        group = self.h.groups.get(GROUP)
        if group is None:
            return
        holders = [
            m.member_id
            for m in group.members.values()
            if holds_leadership(m.assigned) or holds_leadership(m.pending_revocation)
        ]
        assert len(holders) <= 1, f"two members hold leadership: {holders}"
        assert sum(holds_leadership(a) for a in group.target.values()) <= 1

    @invariant()
    def takeovers_raise_the_token(self) -> None:
        tokens = [t for _, t in self.tenures]
        assert tokens == sorted(set(tokens)), f"tenure tokens do not strictly grow: {self.tenures}"

    @invariant()
    def the_sink_never_goes_back_to_an_older_leader(self) -> None:
        # A leader is a tenure, (member, token): a member elected again later is a new leader.
        tenures: list[tuple[str, int]] = []
        for tenure in self.sink.accepted:
            if not tenures or tenures[-1] != tenure:
                assert tenure not in tenures, f"the sink accepted {tenure} again after a newer leader"
                tenures.append(tenure)

    # -- the client ------------------------------------------------------------

    def _live(self) -> list[Client]:
        return [c for c in self.clients if not c.crashed and not c.left]

    def _heartbeat(self, client: Client, lose: bool) -> None:
        if client.epoch == 0:
            req = _join(client.member_id)
        else:
            held = LEADERSHIP if client.token is not None else {}
            req = dataclasses.replace(
                beat(GROUP, client.member_id, client.epoch, held),
                rebalance_timeout_ms=REBALANCE_MS,
                subscribed_topic_names=(),
                server_assignor="leader",
            )
        try:
            resp = self.h.heartbeat(req)
        except ApiError as e:
            assert e.code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID), e
            if not lose:
                client.token = None  # lost: stop leading before rejoining
                client.epoch = 0
            return
        if lose:
            return
        client.epoch = resp.member_epoch
        if resp.assignment is not None:
            leads = holds_leadership(resp.assignment)
            if leads and client.token is None:
                client.token = resp.member_epoch
                self.tenures.append((client.member_id, client.token))
            elif not leads:
                client.token = None

    @rule()
    @precondition(lambda self: len(self.clients) < 6)
    def join(self) -> None:
        client = Client(f"m{len(self.clients)}")
        self.clients.append(client)
        self._heartbeat(client, lose=False)

    @rule(pick=st.integers(0, 5), lose=st.booleans())
    def heartbeat(self, pick: int, lose: bool) -> None:
        live = self._live()
        if live:
            self._heartbeat(live[pick % len(live)], lose)

    @rule(pick=st.integers(0, 5))
    def leave(self, pick: int) -> None:
        live = [c for c in self._live() if c.epoch > 0]
        if not live:
            return
        client = live[pick % len(live)]
        client.token = None  # on_revoked before the leave
        client.left = True
        try:
            self.h.heartbeat(beat(GROUP, client.member_id, -1))
        except ApiError as e:
            assert e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND), e

    @rule(pick=st.integers(0, 5))
    def crash(self, pick: int) -> None:
        live = self._live()
        if live:
            live[pick % len(live)].crashed = True  # keeps its token: a zombie

    @rule(pick=st.integers(0, 5), undrain=st.booleans())
    def drain(self, pick: int, undrain: bool) -> None:
        group = self.h.groups.get(GROUP)
        if group is None or not group.members:
            return
        member_id = sorted(group.members)[pick % len(group.members)]
        self.h.apply(GROUP, drain_member(group, GROUP, member_id, "", undrain, self.h.ctx()))

    @rule(ms=st.sampled_from([INTERVAL_MS, INTERVAL_MS, REBALANCE_MS + 1, SESSION_MS + 1]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)

    @rule()
    def round(self) -> None:
        """A heartbeat interval in which every live client heartbeats."""
        self.h.advance(INTERVAL_MS)
        for client in self._live():
            self._heartbeat(client, lose=False)

    @rule()
    def write(self) -> None:
        for client in self.clients:
            if client.token is not None:
                self.sink.write(client.member_id, client.token)

    def teardown(self) -> None:
        """Once churn stops and dead sessions expired, a live client leads (if any is
        there and not draining) and is the only one the coordinator shows holding it."""
        group = self.h.groups.get(GROUP)
        if group is None:
            return
        for _ in range(SESSION_MS // INTERVAL_MS + 12):
            self.h.advance(INTERVAL_MS)
            for client in self._live():
                self._heartbeat(client, lose=False)
        group = self.h.groups.get(GROUP)
        if group is None:
            return
        in_service = [c for c in self._live() if not group.members[c.member_id].metadata.draining]
        believers = [c.member_id for c in self._live() if c.token is not None]
        if in_service:
            assert len(believers) == 1, (believers, self.tenures)
            assert holds_leadership(group.members[believers[0]].assigned)


LeaderMachine.TestCase.settings = settings(
    max_examples=examples(80),
    stateful_step_count=steps(50),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLeaderMachine = LeaderMachine.TestCase


@pytest.mark.parametrize("assignor", ["leader"])
def test_the_leader_assignor_is_offered_by_default(assignor: str) -> None:
    assert assignor in CONFIG.assignors and CONFIG.default_assignor == "uniform"
    assert owned(LEADERSHIP)[0].topic_id == LEADERSHIP_TOPIC_ID


def test_a_connect_group_cannot_name_the_leader_assignor() -> None:
    h = EngineHarness()
    req = ConsumerGroupHeartbeat(
        group_id="workers",
        member_id="w1",
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=(),
        owned_topic_partitions=(),
        server_assignor="leader",
        group_type="connect",
    )
    with pytest.raises(ApiError) as refused:
        h.heartbeat(req)
    assert refused.value.code is ErrorCode.UNSUPPORTED_ASSIGNOR
    assert refused.value.message == (
        "ServerAssignor leader elects a leader in consumer groups only, not in connect groups."
    )
    assert "workers" not in h.groups
