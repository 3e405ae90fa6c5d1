"""The simulated group of the engine's randomized tests (hypothesis), shared by the
state machines of tests/unit/reconciler (test_properties.py and the machines built on it).

`GroupMachine` drives up to eight simulated clients of one group through
joins (dynamic and static, client- or server-generated member ids),
heartbeats, leaves (-1), static temporary leaves (-2), static rejoins, crashes,
lost responses, topic creation, growth and deletion, subscription changes (names
and regex), server assignor switches, drains and undrains (GroupAdmin.DrainMember)
and time. Every client follows the protocol as a
real consumer does: it uses an assignment the moment it sees it, revokes what
the assignment no longer lists, reports what it owns, sends a full request
after a lost response, and after FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID drops
everything and rejoins at epoch 0 with the same member id.

The safety invariants (see `_check_safety`) are checked after every single
heartbeat and timer pass, not only after every step; after every step the group
rebuilt from all records must also equal the one in memory (`_check_reload`).
When churn stops the group must converge (see `_converge`), in a `settle` rule
and in teardown.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from regroup.reconciler import (
    ApiError,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    Context,
    ErrorCode,
    Group,
    GroupConfig,
    GroupState,
    Record,
    Result,
    Topic,
    replay_all,
)
from regroup.reconciler import heartbeat as heartbeat_module
from regroup.reconciler.assignors import BUILTIN_ASSIGNORS, LeaderAssignor
from regroup.reconciler.drain import DRAINED, drain_member, drain_state
from regroup.reconciler.model import MemberState
from regroup.reconciler.offsets import OffsetToCommit, commit_offsets
from regroup.reconciler.records import TargetAssignmentEpochRecord
from regroup.reconciler.replicas import collapse, copy_held, expand_owned, group_replicas, split
from regroup.reconciler.target_assignment import preferred_assignor
from tests.support.depth import examples, steps
from tests.support.engine import EngineHarness, owned

GROUP = "g"
MAX_LIVE = 8
TOPICS = ("t0", "t1", "t2")
#: Most clients subscribe to this, so that homogeneous groups (whose balance is checked) are common.
DEFAULT_TOPICS = ("t0", "t1")
INSTANCES = ("s0", "s1", "s2")
MAX_PARTITIONS = 12

_CONFIG = GroupConfig()
SESSION_TIMEOUT_MS = _CONFIG.session_timeout_ms
HEARTBEAT_INTERVAL_MS = _CONFIG.heartbeat_interval_ms
#: Responses a client may lose in a row, at most; the next one always gets through.
MAX_LOSSES = 4
#: Rebalance timeouts to draw from; the shortest allows two losses in a row (see `Client.max_losses`).
REBALANCE_TIMEOUTS_MS = (4 * HEARTBEAT_INTERVAL_MS, 60_000, 300_000)
#: Rounds for the coordinator to learn of every crash (the session timeout).
EXPIRY_ROUNDS = -(-SESSION_TIMEOUT_MS // HEARTBEAT_INTERVAL_MS) + 1
#: Rounds in which a churn-free group must become STABLE once no dead member remains.
CONVERGENCE_ROUNDS = 10

TP = tuple[str, int]

NAMES = st.one_of(st.just(DEFAULT_TOPICS), st.sets(st.sampled_from(TOPICS)).map(lambda s: tuple(sorted(s))))
#: Mostly none, again for homogeneous groups; a regex also follows topic creation and deletion.
REGEXES = st.sampled_from([None, None, None, "t[12]", "t.*"])
#: (topic names, regex)
Subscription = tuple[tuple[str, ...], str | None]
SUBSCRIPTIONS: st.SearchStrategy[Subscription] = st.tuples(NAMES, REGEXES)
#: The assignors that share partitions; leader groups have their own machine (test_leader.py).
PARTITION_ASSIGNORS = sorted(n for n in BUILTIN_ASSIGNORS if n != LeaderAssignor.name)
ASSIGNORS = st.one_of(st.none(), st.sampled_from(PARTITION_ASSIGNORS))
PICK = st.integers(0, MAX_LIVE - 1)

# Failing examples are kept under the repository's (gitignored) .hypothesis/, wherever pytest runs from.
_DATABASE = DirectoryBasedExampleDatabase(
    str(Path(__file__).resolve().parents[2] / ".hypothesis" / "examples")
)


def _pairs(a: Mapping[str, Iterable[int]]) -> set[TP]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _norm(a: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    return {t: frozenset(p) for t, p in a.items() if p}


@dataclass
class _Harness(EngineHarness):
    #: Every record applied, in order: what a store would hold.
    log: list[Record] = field(default_factory=list)

    def ctx(self) -> Context:
        # Server-generated member ids must be the same on every replay of an
        # example, or hypothesis cannot shrink (the uniform assignor orders by id).
        return dataclasses.replace(super().ctx(), new_member_id=f"srv{next(self._ids)}")

    def apply(self, group_id: str, result: Result[Any]) -> None:
        assert group_id == GROUP
        self.log.extend(result.records)
        super().apply(group_id, result)


class Phase(enum.Enum):
    #: Running; possibly not accepted yet (epoch 0).
    LIVE = "live"
    #: Left for good with epoch -1.
    LEFT = "left"
    #: A static member that left temporarily with epoch -2.
    AWAY = "away"
    #: Stopped without a word: only the session timeout tells the coordinator.
    CRASHED = "crashed"


@dataclass
class Client:
    """A consumer following the protocol, with what it holds right now."""

    name: str
    #: Empty until the coordinator names it (server-generated ids).
    member_id: str
    instance_id: str | None
    #: What the client wants; each is sent when it differs from what was last sent.
    topics: tuple[str, ...]
    assignor: str | None
    rebalance_timeout_ms: int
    regex: str | None = None
    phase: Phase = Phase.LIVE
    epoch: int = 0
    #: Partitions the client may consume from: given to it and not yet revoked.
    held: dict[str, frozenset[int]] = field(default_factory=dict)
    #: Send every field next time (after an error or a lost response).
    full: bool = True
    sent_topics: tuple[str, ...] | None = None
    sent_regex: str | None = None
    sent_assignor: str | None = None
    sent_owned: dict[str, frozenset[int]] | None = None
    losses: int = 0
    #: What a crashed client held when it died: a zombie keeps committing it.
    last_held: dict[str, frozenset[int]] = field(default_factory=dict)
    #: A join may be answered at epoch 0, with nothing, while the group has no target
    #: yet (when targets are computed later, not in the heartbeat).
    unassigned_join_ok: bool = False
    #: The copies of each partition it asks the group for (redundant assignment).
    replicas: int = 1

    @property
    def live(self) -> bool:
        return self.phase is Phase.LIVE

    @property
    def max_losses(self) -> int:
        """Responses this client may lose in a row.

        Time passes only in ticks, in which every live client heartbeats. After
        L lost responses in a row the client sees a revocation at most L ticks
        after the coordinator asked for it, and acknowledges it in the next
        tick; the rebalance timeout must not expire before that, or an honest
        client would be fenced while it still holds the partitions: L + 1 ticks
        must stay under the timeout.
        """
        return min(MAX_LOSSES, self.rebalance_timeout_ms // HEARTBEAT_INTERVAL_MS - 2)

    def request(self) -> ConsumerGroupHeartbeat:
        joining = self.epoch == 0
        assert not (joining and self.held), f"{self.name} holds partitions without an epoch"
        # Incremental, like Kafka's consumer: a field goes out when it changed
        # since it was last sent, or always in a full request.
        full = joining or self.full
        return ConsumerGroupHeartbeat(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else None,
            subscribed_topic_names=self.topics if full or self.topics != self.sent_topics else None,
            # "" removes a regex; None would leave the coordinator's as it is.
            subscribed_topic_regex=(self.regex or "") if full or self.regex != self.sent_regex else None,
            server_assignor=self.assignor if full or self.assignor != self.sent_assignor else None,
            owned_topic_partitions=owned(self.held) if full or self.held != self.sent_owned else None,
            replicas=self.replicas if full and self.replicas > 1 else None,
        )

    def on_response(self, req: ConsumerGroupHeartbeat, resp: ConsumerGroupHeartbeatResponse) -> None:
        if self.member_id:
            assert resp.member_id == self.member_id, (self.name, resp.member_id)
        self.member_id = resp.member_id
        if req.owned_topic_partitions is not None:
            self.sent_owned = dict(self.held)
        if req.subscribed_topic_names is not None:
            self.sent_topics = req.subscribed_topic_names
        if req.subscribed_topic_regex is not None:
            self.sent_regex = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            self.sent_assignor = req.server_assignor
        if req.member_epoch == 0 or self.full:
            assert resp.assignment is not None, f"{self.name}: a full request must get the full assignment"
        assert resp.member_epoch > 0 or (self.unassigned_join_ok and resp.assignment == {}), (self.name, resp)
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            # Revoke what is no longer listed; what is new may be used at once.
            self.held = _norm(resp.assignment)
        self.full = False
        self.losses = 0

    def on_lost(self) -> None:
        # The coordinator processed the request; the client saw nothing and
        # retries with its old epoch and owned set, sending every field.
        self.losses += 1
        self.full = True

    def reset(self) -> None:
        """Fenced: give up every partition and rejoin at epoch 0 (same member id)."""
        self.held = {}
        self.epoch = 0
        self.full = True
        self.sent_topics = self.sent_regex = self.sent_assignor = self.sent_owned = None


class GroupMachine(RuleBasedStateMachine):
    #: The copies each new client asks for, by client number (redundant assignment).
    REPLICAS: tuple[int, ...] = (1,)

    def __init__(self) -> None:
        super().__init__()
        self.h = _Harness()
        self.clients: list[Client] = []
        #: The latest incarnation of each static instance id.
        self.instances: dict[str, Client] = {}
        self._topic_ids = itertools.count()
        #: False from the start of a step until its invariants passed; teardown
        #: only checks convergence after a clean step, never over a failure.
        self._clean = True
        #: The assignor of the latest target computation.
        self.target_assignor: str | None = None
        #: Nothing happened since the last `settle`, which would only repeat itself.
        self._settled = False

    # -- helpers -----------------------------------------------------------

    @property
    def group(self) -> Group | None:
        return self.h.groups.get(GROUP)

    def live(self) -> list[Client]:
        return [c for c in self.clients if c.live]

    def _step(self) -> None:
        self._clean = False
        self._settled = False

    def _set_topic(self, name: str, partitions: int) -> None:
        existing = self.h.image.by_name.get(name)
        # Kafka gives a recreated topic a new id; keep the id when it grows.
        topic_id = existing.topic_id if existing is not None else f"{name}.{next(self._topic_ids)}"
        self.h.image = self.h.image.with_topic(Topic(topic_id, name, partitions))
        self.h.refresh_all()

    def _exchange(self, client: Client, lose: bool = False) -> None:
        """One heartbeat of `client`; `lose` drops the response (the request is processed)."""
        req = client.request()
        try:
            resp = self.h.heartbeat(req)
        except ApiError as e:
            self._on_error(client, req, e)
            return
        if any(isinstance(r, TargetAssignmentEpochRecord) for r in self.h.last_records):
            # The assignor that computed the target now in force, for the balance checks.
            group = self.group
            assert group is not None
            self.target_assignor = preferred_assignor(group.server_assignor_counts(), self.h.config)
        self._deliver(client, req, resp, lose)
        # Check after every exchange, not only after every step: a double hold
        # that a later heartbeat of the same tick would resolve is still one.
        self._check_safety()

    def _deliver(
        self, client: Client, req: ConsumerGroupHeartbeat, resp: ConsumerGroupHeartbeatResponse, lose: bool
    ) -> None:
        if lose and client.losses < client.max_losses:
            client.on_lost()
            # Events (see --hypothesis-show-statistics) show which corners the runs reach.
            member = self.group.members.get(resp.member_id) if self.group is not None else None
            if member is not None and member.state is MemberState.UNREVOKED_PARTITIONS:
                event("response lost while revoking")
            else:
                event("response lost")
        else:
            client.on_response(req, resp)

    def _on_error(self, client: Client, req: ConsumerGroupHeartbeat, e: ApiError) -> None:
        event(f"error {e.code.name}")
        if req.member_epoch != 0 and e.code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            client.reset()
            self._exchange(client)
            return
        if req.member_epoch == 0 and e.code is ErrorCode.UNRELEASED_INSTANCE_ID:
            # Only right while another member holds the instance id and has not left temporarily.
            assert client.instance_id is not None and self.group is not None
            holder = self.group.member_by_instance_id(client.instance_id)
            assert holder is not None and holder.member_id != client.member_id, e.message
            assert holder.member_epoch != -2, e.message
            return
        raise AssertionError(f"{client.name}: unexpected {e.code.name}: {e.message}\n{self._describe()}")

    def _advance(self) -> None:
        due = self.h.now_ms + HEARTBEAT_INTERVAL_MS
        revoking = {m for (_, m), (deadline, _) in self.h.rebalances.items() if deadline <= due}
        fenced = self.h.advance(HEARTBEAT_INTERVAL_MS)
        if self.h.timer_computations:
            # A timeout bumped the epoch and the assignment timer computed the target.
            self.target_assignor = self.h.timer_computations[-1][1]
            self.h.timer_computations.clear()
        self._check_safety()
        for _, member_id in fenced:
            event(
                "rebalance timeout fenced a member"
                if member_id in revoking
                else "session timeout fenced a member"
            )
        live_ids = {c.member_id for c in self.live() if c.member_id}
        wrongly = [member_id for _, member_id in fenced if member_id in live_ids]
        assert not wrongly, f"timers fenced live members {wrongly}\n{self._describe()}"

    def _leave(self, client: Client, epoch: int) -> ConsumerGroupHeartbeatResponse | None:
        """Sends a leave; None when the coordinator did not know the member (it must say so)."""
        group = self.group
        known = group is not None and client.member_id in group.members
        # Like the consumer's onPartitionsRevoked: everything is released before leaving.
        client.held = {}
        req = ConsumerGroupHeartbeat(
            group_id=GROUP, member_id=client.member_id, member_epoch=epoch, instance_id=client.instance_id
        )
        try:
            resp = self.h.heartbeat(req)
        except ApiError as e:
            assert not known, f"{client.name}: leave refused with {e.code.name}: {e.message}"
            assert e.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID), e.message
            return None
        assert known, f"{client.name}: leave of an unknown member accepted"
        assert resp.member_epoch == epoch
        return resp

    def _describe(self) -> str:
        lines = [f"now={self.h.now_ms}"]
        group = self.group
        if group is not None:
            lines.append(
                f"group epoch={group.group_epoch} assignment epoch={group.assignment_epoch} "
                f"state={group.state().value}"
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id):
                lines.append(
                    f"  {m.member_id} inst={m.instance_id} {m.state.name} epoch={m.member_epoch} "
                    f"prev={m.previous_member_epoch} assigned={sorted(_pairs(m.assigned))} "
                    f"pending={sorted(_pairs(m.pending_revocation))} "
                    f"target={sorted(_pairs(group.target_of(m.member_id)))} "
                    f"subs={m.subscribed_topic_names}/{m.subscribed_topic_regex} assignor={m.server_assignor}"
                )
        for c in self.clients:
            lines.append(
                f"  client {c.name} id={c.member_id} inst={c.instance_id} {c.phase.value} epoch={c.epoch} "
                f"held={sorted(_pairs(c.held))} subs={c.topics}/{c.regex} assignor={c.assignor}"
            )
        return "\n".join(lines)

    # -- rules -------------------------------------------------------------

    @initialize(p0=st.integers(1, 6), p1=st.integers(1, 4))
    def topics(self, p0: int, p1: int) -> None:
        self._step()
        self._set_topic("t0", p0)
        self._set_topic("t1", p1)

    @initialize(founders=st.lists(st.tuples(SUBSCRIPTIONS, ASSIGNORS, st.booleans()), min_size=1, max_size=4))
    def found_group(self, founders: list[tuple[Subscription, str | None, bool]]) -> None:
        """A few members to start with, so that every example exercises a group."""
        self._step()
        for n, ((topics, regex), assignor, static) in enumerate(founders):
            instance_id = INSTANCES[n] if static and n < len(INSTANCES) else None
            client = Client(f"c{n}", f"m{n}", instance_id, topics, assignor, REBALANCE_TIMEOUTS_MS[-1], regex)
            client.replicas = self.REPLICAS[n % len(self.REPLICAS)]
            self.clients.append(client)
            if instance_id is not None:
                self.instances[instance_id] = client
            self._exchange(client)

    @precondition(lambda self: len(self.live()) < MAX_LIVE)
    @rule(
        sub=SUBSCRIPTIONS,
        assignor=ASSIGNORS,
        timeout=st.sampled_from(REBALANCE_TIMEOUTS_MS),
        server_id=st.booleans(),
        lose=st.booleans(),
    )
    def join(
        self, sub: Subscription, assignor: str | None, timeout: int, server_id: bool, lose: bool
    ) -> None:
        self._step()
        n = len(self.clients)
        client = Client(f"c{n}", "" if server_id else f"m{n}", None, sub[0], assignor, timeout, sub[1])
        client.replicas = self.REPLICAS[n % len(self.REPLICAS)]
        self.clients.append(client)
        self._exchange(client, lose)

    @precondition(
        lambda self: (
            len(self.live()) < MAX_LIVE
            and any(i not in self.instances or not self.instances[i].live for i in INSTANCES)
        )
    )
    @rule(
        pick=PICK,
        sub=SUBSCRIPTIONS,
        assignor=ASSIGNORS,
        timeout=st.sampled_from(REBALANCE_TIMEOUTS_MS),
        server_id=st.booleans(),
        lose=st.booleans(),
    )
    def join_static(
        self,
        pick: int,
        sub: Subscription,
        assignor: str | None,
        timeout: int,
        server_id: bool,
        lose: bool,
    ) -> None:
        """A static member joins: a first incarnation, or a restart (new member id) after a
        temporary leave, a leave or a crash of the previous one."""
        self._step()
        free = [i for i in INSTANCES if i not in self.instances or not self.instances[i].live]
        instance_id = free[pick % len(free)]
        n = len(self.clients)
        client = Client(f"c{n}", "" if server_id else f"m{n}", instance_id, sub[0], assignor, timeout, sub[1])
        client.replicas = self.REPLICAS[n % len(self.REPLICAS)]
        self.clients.append(client)
        self.instances[instance_id] = client
        previous = self.group.member_by_instance_id(instance_id) if self.group is not None else None
        if previous is not None:
            event(
                "static rejoin, previous member "
                + ("away" if previous.member_epoch == -2 else "not released")
            )
        self._exchange(client, lose)

    def _away(self) -> list[Client]:
        return [c for c in self.instances.values() if c.phase is Phase.AWAY]

    @precondition(lambda self: len(self.live()) < MAX_LIVE and bool(self._away()))
    @rule(pick=PICK, lose=st.booleans())
    def resume_static(self, pick: int, lose: bool) -> None:
        """A static member back from a temporary leave, with the same member id."""
        self._step()
        away = self._away()
        client = away[pick % len(away)]
        client.phase = Phase.LIVE
        client.reset()
        self._exchange(client, lose)

    @precondition(lambda self: bool(self.live()))
    @rule(pick=PICK, lose=st.booleans())
    def heartbeat(self, pick: int, lose: bool) -> None:
        self._step()
        live = self.live()
        self._exchange(live[pick % len(live)], lose)

    @rule(lose_mask=st.integers(0, 2**MAX_LIVE - 1))
    def tick(self, lose_mask: int) -> None:
        """Every live client heartbeats, then a heartbeat interval passes."""
        self._step()
        for i, client in enumerate(self.live()):
            self._exchange(client, lose=bool(lose_mask >> i & 1))
        self._advance()

    @precondition(lambda self: any(c.member_id for c in self.live()))
    @rule(pick=PICK)
    def leave(self, pick: int) -> None:
        self._step()
        named = [c for c in self.live() if c.member_id]
        client = named[pick % len(named)]
        before = self.group
        epoch_before = before.group_epoch if before is not None else 0
        if self._leave(client, -1) is not None:
            group = self.group
            assert group is not None and client.member_id not in group.members
            assert group.group_epoch == epoch_before + 1, "a leave bumps the group epoch"
        client.phase = Phase.LEFT

    @precondition(lambda self: any(c.member_id and c.instance_id for c in self.live()))
    @rule(pick=PICK)
    def leave_static_temporarily(self, pick: int) -> None:
        self._step()
        named = [c for c in self.live() if c.member_id and c.instance_id]
        client = named[pick % len(named)]
        before = self.group
        epoch_before = before.group_epoch if before is not None else 0
        if self._leave(client, -2) is not None:
            group = self.group
            assert group is not None
            member = group.members[client.member_id]
            assert member.member_epoch == -2 and not member.pending_revocation
            assert group.group_epoch == epoch_before, "a temporary leave does not bump the group epoch"
        client.phase = Phase.AWAY

    @precondition(lambda self: bool(self.live()))
    @rule(pick=PICK)
    def crash(self, pick: int) -> None:
        self._step()
        live = self.live()
        client = live[pick % len(live)]
        client.phase = Phase.CRASHED
        client.last_held = client.held
        client.held = {}

    @precondition(lambda self: any(c.member_id for c in self.clients))
    @rule(pick=PICK, extra=st.integers(0, 5))
    def commit(self, pick: int, extra: int) -> None:
        """Any client, zombies included, commits what it believes it holds (and one
        partition it may not): a commit is accepted only from the partition's owner
        at the owner's current epoch, so no former owner's commit lands after a move."""
        self._step()
        named = [c for c in self.clients if c.member_id]
        client = named[pick % len(named)]
        believed = client.held or client.last_held
        pairs = sorted(_pairs(believed))
        topics = sorted(self.h.image.by_id.values(), key=lambda t: t.topic_id)
        if topics:
            topic = topics[extra % len(topics)]
            pairs.append((topic.topic_id, extra % topic.num_partitions))
        offsets = [OffsetToCommit(t, p, 7, "") for t, p in pairs]
        try:
            result = commit_offsets(self.group, GROUP, client.member_id, client.epoch, offsets, self.h.ctx())
        except ApiError as e:
            assert e.code in (
                ErrorCode.GROUP_ID_NOT_FOUND,
                ErrorCode.UNKNOWN_MEMBER_ID,
                ErrorCode.STALE_MEMBER_EPOCH,
            )
            event(f"commit refused: {e.code.name}")
            return
        group = self.group
        assert group is not None
        member = group.members[client.member_id]
        assert member.member_epoch == client.epoch
        for outcome in result.response:
            key = (outcome.topic_id, outcome.partition)
            # Per copy in a redundant group: the copy the committing member holds.
            copy = copy_held(member, outcome.topic_id, outcome.partition)
            owners = [
                m.member_id
                for m in group.members.values()
                if outcome.partition in m.assigned.get(copy, ())
                or outcome.partition in m.pending_revocation.get(copy, ())
            ]
            if outcome.error is ErrorCode.NONE:
                assert owners == [client.member_id], f"{key} committed by {client.name}, owned by {owners}"
                event("commit accepted")
            else:
                assert client.member_id not in owners or outcome.error is not ErrorCode.PARTITION_NOT_OWNED
                event(f"partition commit refused: {outcome.error.name}")
        self.h.apply(GROUP, result)
        for outcome in result.response:
            if outcome.error is ErrorCode.NONE:
                copy = copy_held(member, outcome.topic_id, outcome.partition)
                committed = group.offsets[(copy, outcome.partition)]
                assert (committed.offset, committed.member_epoch) == (7, client.epoch)

    @precondition(lambda self: self.group is not None and bool(self.group.members))
    @rule(pick=PICK, undrain=st.booleans(), by_instance=st.booleans())
    def drain(self, pick: int, undrain: bool, by_instance: bool) -> None:
        """An admin drains a member (or puts it back): the assignor gives a draining member
        nothing, so its partitions move by the usual revocation, between any other steps."""
        self._step()
        group = self.group
        assert group is not None
        ids = sorted(group.members)
        member = group.members[ids[pick % len(ids)]]
        instance_id = member.instance_id if by_instance and member.instance_id is not None else ""
        result = drain_member(
            group, GROUP, "" if instance_id else member.member_id, instance_id, undrain, self.h.ctx()
        )
        assert result.response.member_id == member.member_id
        assert bool(result.records) == (member.draining == undrain), "only a change writes"
        self.h.apply(GROUP, result)
        after = self.group
        assert after is not None and after.members[member.member_id].draining is not undrain
        event("undrain" if undrain else "drain")

    @precondition(lambda self: bool(self.live()))
    @rule(pick=PICK, sub=SUBSCRIPTIONS)
    def resubscribe(self, pick: int, sub: Subscription) -> None:
        """The client changes its subscription; its next heartbeat carries it."""
        self._step()
        live = self.live()
        client = live[pick % len(live)]
        client.topics, client.regex = sub

    @precondition(lambda self: bool(self.live()))
    @rule(pick=PICK, assignor=st.sampled_from(PARTITION_ASSIGNORS))
    def switch_assignor(self, pick: int, assignor: str) -> None:
        """The client asks for another server assignor; it counts from the next target computation."""
        self._step()
        live = self.live()
        live[pick % len(live)].assignor = assignor

    @precondition(lambda self: len(self.h.image.by_name) < len(TOPICS))
    @rule(pick=st.integers(0, len(TOPICS) - 1), partitions=st.integers(1, 6))
    def create_topic(self, pick: int, partitions: int) -> None:
        self._step()
        missing = [t for t in TOPICS if t not in self.h.image.by_name]
        self._set_topic(missing[pick % len(missing)], partitions)

    @precondition(lambda self: any(t.num_partitions < MAX_PARTITIONS for t in self.h.image.by_id.values()))
    @rule(pick=st.integers(0, len(TOPICS) - 1), more=st.integers(1, 3))
    def grow_topic(self, pick: int, more: int) -> None:
        self._step()
        growable = sorted(t.name for t in self.h.image.by_id.values() if t.num_partitions < MAX_PARTITIONS)
        name = growable[pick % len(growable)]
        self._set_topic(name, min(MAX_PARTITIONS, self.h.image.by_name[name].num_partitions + more))

    @precondition(lambda self: bool(self.h.image.by_name))
    @rule(pick=st.integers(0, len(TOPICS) - 1))
    def delete_topic(self, pick: int) -> None:
        self._step()
        names = sorted(self.h.image.by_name)
        self.h.delete_topic(names[pick % len(names)])

    @precondition(lambda self: not self._settled)
    @rule()
    def settle(self) -> None:
        """Churn stops for a while: the group must converge (and churn may resume)."""
        self._step()
        self._converge()
        self._settled = True

    # -- invariants --------------------------------------------------------

    @invariant()
    def safe(self) -> None:
        self._check_safety()
        self._check_reload()
        self._check_unchanged_shortcut()
        self._clean = True

    def _check_unchanged_shortcut(self) -> None:
        """Every plain heartbeat the shortcut answers (any member, its current
        epoch and the ones around it) gets exactly the general path's answer."""
        group = self.group
        if group is None:
            return
        ctx = self.h.ctx()
        for member in group.members.values():
            for epoch in (member.member_epoch - 1, member.member_epoch, member.member_epoch + 1):
                req = ConsumerGroupHeartbeat(GROUP, member.member_id, epoch)
                shortcut = heartbeat_module._unchanged(group, req, ctx)
                if shortcut is None:
                    continue
                event("a plain heartbeat took the shortcut")
                assert shortcut == heartbeat_module._heartbeat(group, req, ctx), member

    def teardown(self) -> None:
        if self._clean:
            self._converge()

    def _check_safety(self) -> None:
        group = self.group
        live = self.live()

        # 2. Client-side safety: no partition (in a redundant group: no copy of a
        # partition, the one the coordinator accounts the client's holding to) held
        # by two live clients at once.
        holder: dict[TP, Client] = {}
        for client in live:
            member = group.members.get(client.member_id) if group is not None and client.member_id else None
            for tp in _pairs(client.held if member is None else expand_owned(client.held, member)):
                other = holder.setdefault(tp, client)
                assert other is client, f"{tp} held by {other.name} and {client.name}\n{self._describe()}"
        if group is None:
            assert not holder, "clients hold partitions of a group that does not exist"
            return

        # 4. Epochs: no member (nor the target) is ahead of the group.
        assert group.assignment_epoch <= group.group_epoch, self._describe()
        # ... and the target names only members (a left member's target goes with it).
        assert set(group.target) <= set(group.members), f"targets of non-members\n{self._describe()}"
        for m in group.members.values():
            if m.state is not MemberState.STABLE:
                event(f"member state {m.state.name}")
            assert m.member_epoch <= group.assignment_epoch <= group.group_epoch, self._describe()
            assert m.member_epoch >= 0 or (m.member_epoch == -2 and m.instance_id is not None), m

        # 1. Coordinator single ownership, from the members themselves (per copy in a
        # redundant group), and no member with two copies of one partition.
        owner: dict[TP, str] = {}
        for m in group.members.values():
            assigned, pending = _pairs(m.assigned), _pairs(m.pending_revocation)
            assert not assigned & pending, f"{m.member_id} both owns and revokes {assigned & pending}"
            plain = [(split(t)[0], p) for t, p in assigned | pending]
            assert len(plain) == len(set(plain)), f"{m.member_id} holds two copies\n{self._describe()}"
            for tp in assigned | pending:
                first = owner.setdefault(tp, m.member_id)
                assert first == m.member_id, f"{tp} owned by {first} and {m.member_id}\n{self._describe()}"
        # ... and the replayed ownership index agrees with the members.
        for (topic_id, partition), member_id in owner.items():
            assert group.partition_epoch(topic_id, partition) == group.members[member_id].member_epoch
        for topic in self.h.image.by_id.values():
            for partition in range(topic.num_partitions):
                if (topic.topic_id, partition) not in owner:
                    assert group.partition_epoch(topic.topic_id, partition) == -1

        # ... and the state indexes agree with the members: the group's state as read by
        # passing over them, and the members waiting for partitions.
        naive = GroupState.STABLE
        if not group.members:
            naive = GroupState.EMPTY
        elif group.group_epoch > group.assignment_epoch:
            naive = GroupState.ASSIGNING
        elif any(not m.is_reconciled_to(group.assignment_epoch) for m in group.members.values()):
            naive = GroupState.RECONCILING
        assert group.state() is naive, self._describe()
        waiting = {
            m.member_id for m in group.members.values() if m.state is MemberState.UNRELEASED_PARTITIONS
        }
        assert set(group.unreleased_member_ids()) == waiting, self._describe()

        # 3. Revoke before assign: a partition listed in a member's assigned
        # set is held by no other live client.
        for m in group.members.values():
            for tp in _pairs(m.assigned):
                held_by = holder.get(tp)
                assert held_by is None or held_by.member_id == m.member_id, (
                    f"{tp} assigned to {m.member_id} while {held_by.name} still holds it\n{self._describe()}"
                )

        # The root of client safety: the coordinator accounts for everything a
        # live client holds, at an epoch the client has not run ahead of.
        for client in live:
            member = group.members.get(client.member_id) if client.member_id else None
            if client.epoch > 0:
                assert member is not None, f"{client.name} is live but its member is gone\n{self._describe()}"
                assert client.epoch <= member.member_epoch, self._describe()
            if client.held:
                assert member is not None
                unknown = (
                    _pairs(client.held)
                    - _pairs(collapse(member.assigned))
                    - _pairs(collapse(member.pending_revocation))
                )
                assert not unknown, (
                    f"{client.name} holds {unknown} unknown to the coordinator\n{self._describe()}"
                )

    def _check_reload(self) -> None:
        """A coordinator that loads the stored records gets the group it had in memory:
        operations change a group only through their records, and replay is deterministic."""
        group = self.group
        loaded = replay_all(None, GROUP, self.h.log)
        if group is None or loaded is None:
            assert group is loaded is None
            return
        assert (loaded.group_epoch, loaded.assignment_epoch, loaded.metadata_hash) == (
            group.group_epoch,
            group.assignment_epoch,
            group.metadata_hash,
        )
        assert loaded.members == group.members
        # The id-ordered index assignors read follows joins and leaves.
        assert list(group.member_ids_in_order()) == sorted(group.members)
        assert list(loaded.member_ids_in_order()) == sorted(group.members)
        assert {m: _norm(a) for m, a in loaded.target.items()} == {
            m: _norm(a) for m, a in group.target.items()
        }
        assert loaded.subscribed_topic_names() == group.subscribed_topic_names()
        assert loaded.subscribed_regexes() == group.subscribed_regexes()
        assert loaded.server_assignor_counts() == group.server_assignor_counts()
        for instance_id in INSTANCES:
            assert loaded.member_by_instance_id(instance_id) == group.member_by_instance_id(instance_id)
        owned_now = {
            tp for m in group.members.values() for tp in _pairs(m.assigned) | _pairs(m.pending_revocation)
        }
        for topic_id, partition in owned_now:
            assert loaded.partition_epoch(topic_id, partition) == group.partition_epoch(topic_id, partition)

    # -- convergence -------------------------------------------------------

    def _round(self) -> None:
        for client in self.live():
            self._exchange(client)
        self._advance()

    def _strangers(self) -> list[str]:
        """Members no live client stands for: crashed, away or orphaned by a lost join."""
        group = self.group
        if group is None:
            return []
        live_ids = {c.member_id for c in self.live()}
        return sorted(m for m in group.members if m not in live_ids)

    def _converged(self) -> bool:
        group = self.group
        live = self.live()
        if not live:
            return group is None or group.state() is GroupState.EMPTY
        if group is None or group.state() is not GroupState.STABLE or len(group.members) != len(live):
            return False
        for client in live:
            member = group.members.get(client.member_id)
            if (
                member is None
                # Everything the client asked for reached the coordinator.
                or member.subscribed_topic_names != client.topics
                or member.subscribed_topic_regex != client.regex
                or (client.assignor is not None and member.server_assignor != client.assignor)
                or client.epoch != member.member_epoch
                or client.held != _norm(collapse(member.assigned))
                or _norm(member.assigned) != _norm(group.target_of(member.member_id))
            ):
                return False
        return True

    def _converge(self) -> None:
        for _ in range(EXPIRY_ROUNDS):
            if not self._strangers():
                break
            self._round()
        assert not self._strangers(), f"dead members outlived their session\n{self._describe()}"
        for n in range(CONVERGENCE_ROUNDS):
            if self._converged():
                event(f"converged after {n} rounds")
                break
            self._round()
        assert self._converged(), f"no convergence in {CONVERGENCE_ROUNDS} rounds\n{self._describe()}"
        self._check_converged_assignment()

    def _check_converged_assignment(self) -> None:
        group = self.group
        live = self.live()
        if group is None or not live:
            return
        subscribed: dict[str, frozenset[str]] = {}
        for client in live:
            member = group.members[client.member_id]
            assert member.state is MemberState.STABLE and not member.pending_revocation
            if member.draining:
                # Drained: it owns nothing, and the others share everything as if it had left.
                assert not member.assigned, f"{client.name} is drained but owns {member.assigned}"
                assert drain_state(member) == DRAINED
                event("converged with a drained member")
                continue
            subscribed[client.member_id] = frozenset(
                t.topic_id
                for t in self.h.image.by_id.values()
                if t.name in client.topics
                or (client.regex is not None and re.fullmatch(client.regex, t.name))
            )
            assert set(collapse(member.assigned)) <= subscribed[client.member_id], (
                f"{client.name} owns unsubscribed topics"
            )

        # Every subscribed partition in min(replicas, subscribers) copies, each copy once
        # and numbered below `replicas`; which numbers is the holders' (a holder keeps its
        # copy: copy 1 may stay without copy 0, docs/assignment.md).
        replicas = group_replicas(group.members.values())
        counts = Counter(tp for m in group.members.values() for tp in _pairs(m.assigned))
        topics = frozenset().union(*subscribed.values())
        expected = Counter(
            {
                (t, p): min(replicas, sum(t in ids for ids in subscribed.values()))
                for t in topics
                for p in range(self.h.image.by_id[t].num_partitions)
            }
        )
        copies = Counter((split(t)[0], p) for t, p in counts)
        assert copies == expected, (
            f"assigned {sorted(counts)}, expected {sorted(expected.items())}\n{self._describe()}"
        )
        assert all(split(t)[1] < replicas for t, _ in counts), f"assigned {sorted(counts)}"
        assert all(n == 1 for n in counts.values()), counts

        sizes = {mid: len(_pairs(group.members[mid].assigned)) for mid in subscribed}
        if replicas > 1:
            event(f"converged with {replicas} copies")
            if len(set(subscribed.values())) == 1:
                assert max(sizes.values()) - min(sizes.values()) <= 1, (
                    f"unbalanced: {sizes}\n{self._describe()}"
                )
            return
        assignor = self.target_assignor
        if assignor == "uniform" and len(set(subscribed.values())) == 1:
            assert max(sizes.values()) - min(sizes.values()) <= 1, f"unbalanced: {sizes}\n{self._describe()}"
        if assignor == "range":
            for topic_id in topics:
                per_member = [
                    len(group.members[mid].assigned.get(topic_id, ()))
                    for mid, ids in subscribed.items()
                    if topic_id in ids
                ]
                assert max(per_member) - min(per_member) <= 1, f"range unbalanced on {topic_id}: {per_member}"


def machine_settings(max_examples: int) -> settings:
    return settings(
        max_examples=examples(max_examples),
        stateful_step_count=steps(60),
        deadline=None,
        database=_DATABASE,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# About 20 s on a 2-core machine; a soak of 4000 examples x 100 steps (about 3 minutes) found nothing more.
GroupMachine.TestCase.settings = machine_settings(500)
