"""Randomized safety of the coordinator runtime through store outages (hypothesis).

The real `Coordinator` on the in-memory store (`server/memstore.py`) and a manual
clock. Clients follow the protocol as the Python client does, including its own
session rule: a member gives up what it holds once its session could have
expired on the coordinator (counted from the sending of its last answered
heartbeat, minus a safety margin), and a COORDINATOR_NOT_AVAILABLE with
`session_renewed` at its epoch counts as answered. In between, the store goes
away and comes back, writes commit and then fail (in doubt), the store watch
notices or not, responses are lost, clients crash, leave and rejoin, and time
passes.

After every step: no partition is held by two clients. When the churn stops and
the store is back, the group converges and every live client keeps its session.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from regroup.reconciler import ApiError, ConsumerGroupHeartbeat, ErrorCode, GroupConfig, GroupState, Topic
from regroup.reconciler.errors import CoordinatorNotAvailable
from regroup.reconciler.messages import OwnedTopicPartitions
from regroup.server.clock import ManualClock
from regroup.server.memstore import MemoryStore
from regroup.server.runtime import Coordinator
from regroup.server.storewatch import StoreWatch
from tests.support.depth import examples, steps
from tests.support.leases import MANUAL_LEASES

GROUP = "g"
TOPIC = "t"
PARTITIONS = 6
CLIENTS = 4
SESSION_MS = 3_000
INTERVAL_MS = 1_000
#: Far beyond what a client that keeps heartbeating can miss (see `Client.losses`).
REBALANCE_TIMEOUT_MS = 60_000
#: The Python client's session_safety_margin_ms, as capped at half the session.
MARGIN_MS = 300
#: Responses a client may lose in a row; the next one gets through.
MAX_LOSSES = 2


async def _nothing(available: bool) -> None:
    pass


@dataclass
class Client:
    member_id: str
    epoch: int = 0
    held: frozenset[int] = frozenset()
    #: When the last answered heartbeat was sent (the manual clock's ms).
    answered_at: int = 0
    session_ms: int = 0
    losses: int = 0
    #: After a lost response or a refusal the next request is a full one (as the client does).
    full: bool = True
    #: Whether a response was lost since the client joined (only then may it be fenced
    #: while its own session still runs: an epoch it never heard of).
    lost_since_join: bool = False
    crashed: bool = False
    left: bool = False
    events: list[str] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return not self.crashed and not self.left

    def expire_if_due(self, now: int) -> None:
        """The client's own session rule: it stops working before the coordinator may fence it."""
        if self.epoch > 0 and now >= self.answered_at + self.session_ms - MARGIN_MS:
            self.drop("expired")

    def drop(self, why: str) -> None:
        self.events.append(why)
        self.epoch, self.held, self.full, self.lost_since_join = 0, frozenset(), True, False


class OutageMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.store = MemoryStore()
        config = GroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS)
        self.coordinator = Coordinator(self.store, config, self.clock, run_timers=False, leases=MANUAL_LEASES)
        self.watch = self.coordinator.watch = StoreWatch(self.store.ping, _nothing, interval_s=1.0)
        # A fixed topic id: a drawn one would change set orders between runs of an example.
        self.topic_id = "t-id"
        self._run(self.store.put_topic(Topic(self.topic_id, TOPIC, PARTITIONS)))
        self._run(self.coordinator.start())
        self.clients = [Client(f"m{i}") for i in range(CLIENTS)]

    def _run(self, coroutine):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        try:
            if not any(c.live for c in self.clients):
                return
            self._settle()
        finally:
            self._run(self.coordinator.stop())
            self.loop.close()

    # -- the client side ---------------------------------------------------------

    def _request(self, client: Client) -> ConsumerGroupHeartbeat:
        owned = (OwnedTopicPartitions(self.topic_id, "", tuple(sorted(client.held))),) if client.held else ()
        if client.epoch == 0:
            return ConsumerGroupHeartbeat(
                GROUP,
                client.member_id,
                0,
                rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                subscribed_topic_names=(TOPIC,),
                owned_topic_partitions=(),
            )
        if client.full:
            return ConsumerGroupHeartbeat(
                GROUP,
                client.member_id,
                client.epoch,
                rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                subscribed_topic_names=(TOPIC,),
                owned_topic_partitions=owned,
            )
        return ConsumerGroupHeartbeat(GROUP, client.member_id, client.epoch, owned_topic_partitions=owned)

    def _heartbeat(self, client: Client, lose: bool = False) -> None:
        sent_at = self.clock.monotonic_ms()
        client.full = True  # until this exchange is answered
        in_doubt_before = self.store.commit_then_fail
        try:
            response = self._run(self.coordinator.consumer_group_heartbeat(self._request(client)))
        except CoordinatorNotAvailable as refusal:
            if lose or self.store.commit_then_fail < in_doubt_before:
                # A write of this heartbeat committed though it was refused: to the member
                # that is a lost response (an epoch it may not have heard of). Kafka's rule
                # accepts the previous epoch, so two in a row fence it, as two lost responses do.
                client.lost_since_join = True
            if lose:
                return
            if refusal.renewed_epoch is not None and refusal.renewed_epoch == client.epoch > 0:
                event("a refused heartbeat renewed the session")
                if sent_at >= client.answered_at + SESSION_MS - MARGIN_MS - INTERVAL_MS:
                    event("a renewal kept a session that was about to run out")
                client.answered_at, client.session_ms = sent_at, refusal.session_timeout_ms
            else:
                event("a refused heartbeat did not renew")
            return
        except ApiError as error:
            if lose:
                client.lost_since_join = True
                return
            assert error.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH), error
            # A member never loses its session because the coordinator could not store:
            # one that heard every answer and whose session still runs is never fenced.
            assert client.lost_since_join or sent_at >= client.answered_at + client.session_ms - MARGIN_MS, (
                f"{client.member_id} fenced ({error.code.name}) while its session still ran"
            )
            if self.store.commits > 0 and client.events and client.events[-1] != "expired":
                event("fenced after a write in doubt or a timeout")
            client.drop(error.code.name)
            return
        if lose:
            client.lost_since_join = True
            return
        client.epoch, client.full = response.member_epoch, False
        client.answered_at, client.session_ms = sent_at, response.session_timeout_ms
        if response.assignment is not None:
            # Revoked at once; what is listed is free to use (the coordinator lists a
            # partition only once its previous owner acknowledged giving it up).
            client.held = frozenset(response.assignment.get(self.topic_id, frozenset()))

    # -- rules -------------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1), lose=st.booleans())
    def heartbeat(self, i: int, lose: bool) -> None:
        client = self.clients[i]
        if not client.live:
            return
        lose = lose and client.losses < MAX_LOSSES
        client.losses = client.losses + 1 if lose else 0
        self._heartbeat(client, lose)

    @rule()
    def everyone_heartbeats(self) -> None:
        for client in self.clients:
            if client.live:
                self._heartbeat(client)

    @rule(i=st.integers(0, CLIENTS - 1))
    def crash(self, i: int) -> None:
        self.clients[i].crashed = True
        self.clients[i].drop("crashed")

    @rule(i=st.integers(0, CLIENTS - 1))
    def leave(self, i: int) -> None:
        client = self.clients[i]
        if not client.live or client.epoch <= 0:
            return
        client.drop("left")  # revoked first, then the leave (answered or not)
        client.left = True
        with contextlib.suppress(ApiError):
            self._run(
                self.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeat(GROUP, client.member_id, -1))
            )

    @rule(i=st.integers(0, CLIENTS - 1))
    def restart(self, i: int) -> None:
        """A crashed or departed client comes back with the same member id, at epoch 0."""
        client = self.clients[i]
        if not client.live:
            client.crashed = client.left = False
            client.losses = 0

    @rule(ms=st.sampled_from([250, 1_000, 2_000, 4_000]))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)
        for client in self.clients:
            client.expire_if_due(self.clock.monotonic_ms())
        self._run(self.coordinator.expire_due())

    @rule()
    def store_goes_away(self) -> None:
        self.store.down = True

    @rule()
    def store_comes_back(self) -> None:
        self.store.down = False

    @rule(rounds=st.integers(1, 4 * SESSION_MS // INTERVAL_MS), watch=st.booleans(), spread=st.booleans())
    def outage_with_everyone_heartbeating(self, rounds: int, watch: bool, spread: bool) -> None:
        """The report's scenario: the store goes away for `rounds` heartbeat intervals
        (longer than the session, often) while the live clients heartbeat at their
        own times; then it comes back."""
        self.store.down = True
        if watch:
            self.watch_catches_up()
        now = self.clock.monotonic_ms()
        # Those with an interval of session left will heartbeat in time: they must keep it
        # (unless a lost response left them at an epoch the coordinator would fence anyway).
        keeping = [
            c
            for c in self.clients
            if c.live
            and c.epoch > 0
            and not c.lost_since_join
            and now + INTERVAL_MS < c.answered_at + c.session_ms - MARGIN_MS
        ]
        step = INTERVAL_MS // CLIENTS if spread else INTERVAL_MS
        for tick in range(rounds * INTERVAL_MS // step):
            self.time_passes(step)
            for i, client in enumerate(self.clients):
                if client.live and (not spread or tick % CLIENTS == i):
                    self._heartbeat(client)
            self.no_partition_has_two_holders()
        for client in keeping:
            assert client.epoch > 0, f"{client.member_id} lost its session in the outage: {client.events}"
        self.store.down = False
        if watch:
            self.time_passes(INTERVAL_MS // 4)
            self.watch_catches_up()  # the watch's next ping sees it back

    @rule(n=st.integers(1, 3))
    def writes_commit_then_fail(self, n: int) -> None:
        self.store.commit_then_fail = n

    @rule()
    def watch_catches_up(self) -> None:
        """The store watch's next ping (the real watch, ticked by the test rather than its
        own task): the coordinator learns what the store does."""
        self._run(self.watch.check())
        assert self.coordinator.store_down == self.store.down

    # -- checks ------------------------------------------------------------------

    @invariant()
    def no_partition_has_two_holders(self) -> None:
        now = self.clock.monotonic_ms()
        for client in self.clients:
            client.expire_if_due(now)
        seen: dict[int, str] = {}
        for client in self.clients:
            for p in client.held:
                assert p not in seen, f"partition {p} held by {seen[p]} and {client.member_id}"
                seen[p] = client.member_id

    def _settled(self, live: list[Client]) -> bool:
        group = self.coordinator.groups.get(GROUP)
        return (
            group is not None
            and group.state() is GroupState.STABLE
            and sorted(group.members) == sorted(c.member_id for c in live)
            and all(c.epoch > 0 for c in live)
        )

    def _settle(self) -> None:
        """The store is back for good: within a few rounds the group is Stable, every
        live client holds its target, and none of them loses its session any more."""
        self.store.down, self.store.commit_then_fail = False, 0
        self.watch_catches_up()
        live = [c for c in self.clients if c.live]
        for _ in range(3 * SESSION_MS // INTERVAL_MS + 10):
            self.clock.advance(INTERVAL_MS)
            self._run(self.coordinator.expire_due())
            for client in live:
                self._heartbeat(client)
                self.no_partition_has_two_holders()
            if self._settled(live):
                break
        group = self.coordinator.groups[GROUP]
        assert group.state() is GroupState.STABLE
        assert sorted(group.members) == sorted(c.member_id for c in live)
        assert set().union(*(c.held for c in live)) == set(range(PARTITIONS))
        settled = {c.member_id: (c.epoch, c.held) for c in live}
        for _ in range(3 * SESSION_MS // INTERVAL_MS):
            self.clock.advance(INTERVAL_MS)
            self._run(self.coordinator.expire_due())
            for client in live:
                self._heartbeat(client)
        assert {c.member_id: (c.epoch, c.held) for c in live} == settled


OutageMachine.TestCase.settings = settings(
    max_examples=examples(300), stateful_step_count=steps(40), deadline=None
)
TestOutageMachine = OutageMachine.TestCase
