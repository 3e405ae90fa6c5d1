"""Randomized safety and liveness of member streams (hypothesis), without the network.

The real gRPC servicer (`GroupCoordinatorService`: its `MemberStream` and unary
`ConsumerGroupHeartbeat`) over the real `Coordinator` on the in-memory store, with a
manual clock, driven in-process through a fake servicer context
(tests/support/streams_inproc.py). The store's writes take turns of the event loop, as a
database's take time, so heartbeats sent together queue behind a write (another
heartbeat's, or an offset commit's) and are served as one batch (server/writebatch.py).

Clients follow the protocol as the Python client does: they take what an answer
assigns and give up what it leaves out, and acknowledge with a heartbeat at once (or,
revoking slowly, with their next one, holding everything until then); they rejoin at
once when fenced; they send a full request after a lost answer; they drop what they hold
once their session could have expired on the coordinator (counted from the sending of
their last answered heartbeat, minus a safety margin). Each client heartbeats on one of
two streams or with unary calls, and switches between them; heartbeats sent in one turn
of the event loop on a stream go in one message. Streams break (the handler cancelled,
as when the connection drops, or the session failed, as when the server stops),
sometimes with a heartbeat in flight that may or may not have been served: its client
sends it again at once through the unary RPC, in full, and may reopen a stream later.
Answers are lost; nudges make the nudged clients heartbeat at once; clients crash, leave
and rejoin; time passes and the coordinator's timers fire.

After every step (`checks`):
- no partition is held by two live clients;
- every nudge received named a member the stream had answered as in the group before
  (no nudge for a member unknown to that stream), and every heartbeat a nudge prompted
  was answered (the stream never refused it);
- every member a stream carries that a heartbeat would move (`nudge_reason`, itself
  checked against the engine in tests/unit/reconciler/test_nudges.py) has a nudge
  queued or sent since its last heartbeat on that stream: no member is left to learn a
  change at its next interval.
When churn stops (a rule at random points, and in teardown once the dead members'
sessions ran out), each live client heartbeats once through a stream, and from then on
only nudges make anyone heartbeat: the group must converge — Stable, every live client
at the group's assignment epoch holding what the coordinator assigns it, every partition
held by exactly one client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from regroup.reconciler import ApiError, GroupConfig, GroupState, Topic
from regroup.reconciler.nudges import nudge_reason
from regroup.reconciler.offsets import OffsetToCommit
from regroup.server.clock import ManualClock
from regroup.server.runtime import Coordinator
from regroup.server.service import GroupCoordinatorService
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.depth import examples, steps
from tests.support.leases import MANUAL_LEASES
from tests.support.streams_inproc import GatedStore, InProcessStream, unary_context

GROUP = "g"
TOPIC = "t"
TOPIC_ID = "t-id"
PARTITIONS = 6
CLIENTS = 4
STREAMS = 2
SESSION_MS = 3_000
INTERVAL_MS = 1_000
#: The Python client's session_safety_margin_ms, as capped at half the session.
MARGIN_MS = 300
FENCED = {common_pb2.FENCED_MEMBER_EPOCH, common_pb2.UNKNOWN_MEMBER_ID}
#: Heartbeats one exchange may take: the heartbeat, then each acknowledgement, rejoin or
#: resend after a lost stream the protocol makes the client send at once.
MAX_FOLLOW_UPS = 8
#: Waves of nudged heartbeats a settling group may take.
MAX_WAVES = 20

Response = coordinator_pb2.ConsumerGroupHeartbeatResponse
T = TypeVar("T")


@dataclass
class Client:
    member_id: str
    #: The stream it heartbeats on, or None for unary calls.
    stream: int | None = None
    epoch: int = 0
    held: frozenset[int] = frozenset()
    #: What the last answered request said the client owns (sent again only when it changed).
    sent_held: frozenset[int] | None = None
    full: bool = True
    #: When the last answered heartbeat was sent (the manual clock's ms).
    answered_at: int = 0
    #: Told to revoke and still revoking (its callback runs): what it keeps once done;
    #: until then it holds everything, and its next heartbeat acknowledges.
    revoking: frozenset[int] | None = None
    crashed: bool = False
    left: bool = False

    @property
    def live(self) -> bool:
        return not self.crashed and not self.left

    def drop(self) -> None:
        """Gives up everything and rejoins at epoch 0 (same member id)."""
        self.epoch, self.held, self.sent_held, self.full = 0, frozenset(), None, True
        self.revoking = None


class StreamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.store = GatedStore()
        config = GroupConfig(
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS, assignment_interval_ms=0
        )
        self.coordinator = Coordinator(self.store, config, self.clock, run_timers=False, leases=MANUAL_LEASES)
        self._run(self.store.put_topic(Topic(TOPIC_ID, TOPIC, PARTITIONS)))
        self._run(self.coordinator.start())
        self.service = GroupCoordinatorService(self.coordinator)
        self.streams: list[InProcessStream | None] = [None] * STREAMS
        self.clients = [Client(f"m{i}") for i in range(CLIENTS)]
        self.next_id = 0
        #: False from the start of a step until its checks passed.
        self._clean = True
        #: Heartbeats queued per stream in this turn of the loop (sent as one message).
        self._outbox: dict[int, list[tuple[int, coordinator_pb2.ConsumerGroupHeartbeatRequest]]] = {}

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def _step(self) -> None:
        self._clean = False

    def teardown(self) -> None:
        try:
            # Not after a failed step: its failure, not a consequence, is the one to report.
            if self._clean and any(c.live for c in self.clients):
                self._expire_strangers()
                self._settle_by_nudges(list(range(CLIENTS)))
        finally:
            for stream in self.streams:
                if stream is not None:
                    self._run(stream.close())
            self._run(self.coordinator.stop())
            self.loop.close()

    def _describe(self) -> str:
        group = self.coordinator.groups.get(GROUP)
        lines = []
        if group is not None:
            lines.append(
                f"group epoch={group.group_epoch} assignment={group.assignment_epoch} {group.state().value}"
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id):
                lines.append(
                    f"  {m.member_id} {m.state.name} epoch={m.member_epoch} "
                    f"assigned={sorted(p for ps in m.assigned.values() for p in ps)} "
                    f"target={sorted(p for ps in group.target_of(m.member_id).values() for p in ps)}"
                )
        for c in self.clients:
            lines.append(
                f"  client {c.member_id} live={c.live} stream={c.stream} "
                f"epoch={c.epoch} held={sorted(c.held)}"
            )
        return "\n".join(lines)

    # -- the client side ------------------------------------------------------------

    def _request(self, client: Client) -> coordinator_pb2.ConsumerGroupHeartbeatRequest:
        request = coordinator_pb2.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=client.member_id, member_epoch=client.epoch
        )
        full = client.epoch == 0 or client.full
        if full:
            request.rebalance_timeout_ms = 60_000
            request.subscribed_topic_names.values.append(TOPIC)
        if full or client.held != client.sent_held:
            request.topic_partitions.SetInParent()
            if client.held:
                request.topic_partitions.topics.add(topic_id=TOPIC_ID, partitions=sorted(client.held))
        return request

    def _stream_of(self, client: Client) -> tuple[int, InProcessStream] | None:
        if client.stream is None:
            return None
        stream = self.streams[client.stream]
        if stream is None or stream.broken:
            client.stream = None  # falls back to unary calls
            return None
        return client.stream, stream

    def _post(
        self, s: int, correlation_id: int, request: coordinator_pb2.ConsumerGroupHeartbeatRequest
    ) -> None:
        """Queues a heartbeat on stream `s`: those queued in one turn of the loop go in one message."""
        outbox = self._outbox.setdefault(s, [])
        outbox.append((correlation_id, request))
        if len(outbox) == 1:
            asyncio.get_running_loop().call_soon(self._flush_outbox, s)

    def _flush_outbox(self, s: int) -> None:
        items = self._outbox.pop(s, [])
        stream = self.streams[s]
        if stream is not None and items:
            if len(items) > 1:
                event("several heartbeats in one stream message")
            stream.post_batch(items)

    async def _send(
        self, client: Client, request: coordinator_pb2.ConsumerGroupHeartbeatRequest
    ) -> Response | None:
        """The answer, or None when it was lost with its stream."""
        on_stream = self._stream_of(client)
        if on_stream is None:
            event("unary heartbeat")
            return await self.service.ConsumerGroupHeartbeat(request, unary_context())
        event("streamed heartbeat")
        s, stream = on_stream
        self.next_id += 1
        correlation_id = self.next_id
        self._post(s, correlation_id, request)
        return await stream.answer(correlation_id)

    def _apply(
        self,
        client: Client,
        request: coordinator_pb2.ConsumerGroupHeartbeatRequest,
        response: Response,
        sent_at: int,
        slow: bool = False,
    ) -> bool:
        """Takes the answer in; True when the protocol makes the client heartbeat again at
        once. A `slow` client told to revoke acknowledges only at its next heartbeat."""
        code = response.error_code
        if code in FENCED:
            event("fenced: rejoins at once")
            client.drop()
            return True
        assert code == common_pb2.NONE, (client.member_id, response)
        client.epoch, client.full, client.answered_at = response.member_epoch, False, sent_at
        if request.HasField("topic_partitions"):
            client.sent_held = frozenset(p for t in request.topic_partitions.topics for p in t.partitions)
        if not response.HasField("assignment"):
            return False
        assigned = frozenset(p for t in response.assignment.topic_partitions for p in t.partitions)
        if slow and not client.held <= assigned:
            event("a slow revocation: acknowledged later")
            client.revoking = assigned
            return False
        changed, client.held = assigned != client.held, assigned
        return changed  # revoked or taken: acknowledged at once

    async def _exchange(self, client: Client, lose: bool = False, slow: bool = False) -> None:
        """A heartbeat of `client` and those the protocol makes it send at once after it."""
        for _ in range(MAX_FOLLOW_UPS):
            if not client.live:
                return
            if client.revoking is not None:
                # Its revocation is done: this heartbeat acknowledges it.
                client.held, client.revoking = client.revoking, None
            sent_at = self.clock.monotonic_ms()
            request = self._request(client)
            response = await self._send(client, request)
            if response is None:
                # Lost with its stream (the heartbeat may or may not have been served):
                # sent again at once through the unary RPC, in full.
                event("answer lost with its stream: sent again unary")
                client.full = True
                continue
            if lose:
                event("answer lost")
                client.full = True
                return
            if not self._apply(client, request, response, sent_at, slow):
                return
        raise AssertionError(f"{client.member_id} kept being told to heartbeat again\n{self._describe()}")

    def _open(self, s: int) -> InProcessStream:
        stream = self.streams[s]
        if stream is None or stream.broken:
            if stream is not None:
                self._check_nudges(stream)
            stream = self.streams[s] = self._run(InProcessStream.open(self.service))
            event("stream opened")
        return stream

    # -- rules ----------------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1), lose=st.booleans(), slow=st.booleans())
    def heartbeat(self, i: int, lose: bool, slow: bool) -> None:
        self._step()
        self._run(self._exchange(self.clients[i], lose, slow))

    @rule(
        which=st.lists(st.integers(0, CLIENTS - 1), min_size=2, max_size=CLIENTS, unique=True),
        lose=st.integers(0, 2**CLIENTS - 1),
        slow=st.integers(0, 2**CLIENTS - 1),
        committer=st.sampled_from([None, *range(CLIENTS)]),
    )
    def heartbeats_together(self, which: list[int], lose: int, slow: int, committer: int | None) -> None:
        """Several clients heartbeat in the same turn of the loop: those on a stream share
        a message, and all queue behind the group's writes and are served in batches. With
        `committer`, a client's offset commit (a write that moves nobody) is under way
        first: every heartbeat that writes queues behind it."""
        self._step()
        clients = [self.clients[i] for i in which if self.clients[i].live]

        async def commit() -> None:
            client = self.clients[committer] if committer is not None else None
            if client is None or not client.live or client.epoch <= 0 or not client.held:
                return
            offsets = [OffsetToCommit(TOPIC_ID, p, 1, "") for p in sorted(client.held)]
            with contextlib.suppress(ApiError):  # refused: the client is behind (a lost answer)
                await self.coordinator.commit_offsets(GROUP, client.member_id, client.epoch, offsets)
                event("heartbeats behind an offset commit")

        async def together() -> None:
            await asyncio.gather(
                commit(),
                *(self._exchange(c, bool(lose >> i & 1), bool(slow >> i & 1)) for i, c in enumerate(clients)),
            )

        commits = self.store.commits
        self._run(together())
        if len(clients) > 1 and self.store.commits > commits:
            event("heartbeats sent together, some writing")

    @rule(turns=st.sampled_from([1, 4, 12]))
    def store_latency(self, turns: int) -> None:
        """Writes take this many turns of the event loop: with more, heartbeats read from
        a stream meanwhile queue behind a write, and batches mix streamed and unary ones."""
        self._step()
        self.store.turns = turns

    @rule(i=st.integers(0, CLIENTS - 1), to=st.sampled_from([None, *range(STREAMS)]))
    def switch(self, i: int, to: int | None) -> None:
        """The client's next heartbeats go through stream `to` (opened if need be) or unary calls."""
        self._step()
        if to is not None:
            self._open(to)
        self.clients[i].stream = to

    @rule(
        s=st.integers(0, STREAMS - 1),
        fail=st.booleans(),
        in_flight=st.sampled_from([None, *range(CLIENTS)]),
        turns=st.integers(0, 4),
    )
    def break_stream(self, s: int, fail: bool, in_flight: int | None, turns: int) -> None:
        """The stream breaks: cancelled (the connection dropped) or failed by the server,
        with a client's heartbeat sent and unanswered (served or not, after `turns` turns
        of the loop) or not. That client sends it again at once through the unary RPC."""
        self._step()
        stream = self.streams[s]
        if stream is None or stream.broken:
            return
        resend: Client | None = None
        if in_flight is not None and self.clients[in_flight].stream == s and self.clients[in_flight].live:
            resend = self.clients[in_flight]
            self.next_id += 1
            correlation_id = self.next_id
            stream.post_batch([(correlation_id, self._request(resend))])

            async def turn() -> None:
                for _ in range(turns):
                    await asyncio.sleep(0)

            self._run(turn())
            stream._collect()
            event(
                "stream broke after answering the heartbeat in flight"
                if correlation_id in stream.answers
                else "stream broke with a heartbeat in flight"
            )
        if fail:
            self._run(stream.fail(grpc.StatusCode.UNAVAILABLE))
            event("stream failed by the server")
        else:
            self._run(stream.close())
            event("stream cancelled")
        self._check_nudges(stream)
        self.streams[s] = None
        if resend is not None:
            resend.full = True
            resend.stream = None
            self._run(self._exchange(resend))

    @rule()
    def nudged_clients_heartbeat(self) -> None:
        self._step()
        self._run(self._act_on_nudges())

    async def _act_on_nudges(self) -> int:
        """Every client nudged (on any open stream) heartbeats at once; how many were."""
        nudged: dict[str, None] = {}
        for stream in self.streams:
            if stream is None or stream.broken:
                continue
            await stream.flushed()
            for nudge in stream.take_nudges():
                event(f"nudge {coordinator_pb2.NudgeReason.Name(nudge.reason)}")
                assert nudge.group_id == GROUP
                nudged[nudge.member_id] = None
        for member_id in nudged:
            for client in self.clients:
                if client.member_id == member_id and client.live:
                    await self._exchange(client)
        return len(nudged)

    @rule(i=st.integers(0, CLIENTS - 1))
    def crash(self, i: int) -> None:
        self._step()
        self.clients[i].crashed = True

    @rule(i=st.integers(0, CLIENTS - 1))
    def leave(self, i: int) -> None:
        self._step()
        client = self.clients[i]
        if not client.live or client.epoch <= 0:
            return
        client.held = frozenset()  # revoked before leaving
        request = coordinator_pb2.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=client.member_id, member_epoch=-1
        )
        self._run(self._send(client, request))
        client.left = True

    @rule(i=st.integers(0, CLIENTS - 1))
    def rejoin(self, i: int) -> None:
        """A crashed or departed client comes back as a new process (same member id)."""
        self._step()
        client = self.clients[i]
        if not client.live:
            self.clients[i] = Client(client.member_id, stream=client.stream)

    @rule(ms=st.integers(1, 1_500))
    def time_passes(self, ms: int) -> None:
        self._step()
        self.clock.advance(ms)
        now = self.clock.monotonic_ms()
        for client in self.clients:
            if client.live and client.epoch > 0 and now >= client.answered_at + SESSION_MS - MARGIN_MS:
                event("client's own session ran out")
                client.drop()
        self._run(self.coordinator.expire_due())

    def _strangers(self) -> list[str]:
        """Members no live client stands for (crashed, or left without being heard)."""
        group = self.coordinator.groups.get(GROUP)
        live = {c.member_id for c in self.clients if c.live}
        return [] if group is None else sorted(set(group.members) - live)

    @precondition(lambda self: not self._strangers() and any(c.live for c in self.clients))
    @rule(order=st.permutations(range(CLIENTS)))
    def churn_stops_and_nudges_settle(self, order: list[int]) -> None:
        self._step()
        self._settle_by_nudges(order)

    # -- checks ---------------------------------------------------------------------

    @invariant()
    def checks(self) -> None:
        self.no_partition_has_two_owners()
        self.nudges_name_members_their_stream_answered()
        self.every_stream_member_a_heartbeat_would_move_is_nudged()
        self._clean = True

    def no_partition_has_two_owners(self) -> None:
        holder: dict[int, str] = {}
        for client in self.clients:
            if not client.live:
                continue
            for partition in client.held:
                other = holder.setdefault(partition, client.member_id)
                assert other == client.member_id, (
                    f"partition {partition} held by {other} and {client.member_id}"
                )

    def nudges_name_members_their_stream_answered(self) -> None:
        for stream in self.streams:
            if stream is not None:
                self._check_nudges(stream)

    def every_stream_member_a_heartbeat_would_move_is_nudged(self) -> None:
        """Between steps nothing is in flight: a member a stream carries that a heartbeat
        would move (nudge_reason, which test_nudges.py checks against the engine) has a
        nudge queued or sent on it since its last heartbeat there. Otherwise it would
        learn the change only at its next interval."""
        group = self.coordinator.groups.get(GROUP)
        for session in self.service.streams.sessions:
            for key in session.members:
                reason = nudge_reason(group, key[1])
                if reason is not None:
                    assert key in session.nudged, (
                        f"{key[1]} is carried by a stream and a heartbeat would move it "
                        f"({reason.name}), but it was not nudged\n{self._describe()}"
                    )

    def _check_nudges(self, stream: InProcessStream) -> None:
        stream._collect()
        assert not stream.unknown_nudges, (
            f"nudges for members the stream never answered as in the group: {stream.unknown_nudges}"
        )

    def _expire_strangers(self) -> None:
        """Time passes until the dead members' sessions ran out; the live clients keep
        theirs with a heartbeat every interval."""
        for _ in range(2 * SESSION_MS // INTERVAL_MS + 2):
            if not self._strangers():
                return
            self.clock.advance(INTERVAL_MS)
            self._run(self.coordinator.expire_due())
            for client in self.clients:
                self._run(self._exchange(client))
        assert not self._strangers(), f"dead members outlived their session\n{self._describe()}"

    def _settle_by_nudges(self, order: Sequence[int]) -> None:
        """Each live client moves to a stream and heartbeats once, in `order`; from then
        on only nudges prompt heartbeats, and the group must converge."""
        for i in order:
            client = self.clients[i]
            if not client.live:
                continue
            if client.stream is None:
                client.stream = i % STREAMS
            self._open(client.stream)
            self._run(self._exchange(client))
        for wave in range(MAX_WAVES):
            if self._run(self._act_on_nudges()) == 0:
                event(f"settled by nudges in {wave} waves")
                break
        self._check_converged()

    def _check_converged(self) -> None:
        live = [c for c in self.clients if c.live]
        if not live:
            return
        group = self.coordinator.groups.get(GROUP)
        assert group is not None, self._describe()
        assert group.state() is GroupState.STABLE, f"not Stable with only nudges\n{self._describe()}"
        assert sorted(group.members) == sorted(c.member_id for c in live), self._describe()
        for client in live:
            member = group.members[client.member_id]
            assert client.epoch == member.member_epoch == group.assignment_epoch, self._describe()
            assert client.held == frozenset(p for ps in member.assigned.values() for p in ps), (
                self._describe()
            )
        held = sorted(p for c in live for p in c.held)
        assert held == list(range(PARTITIONS)), f"partitions held: {held}\n{self._describe()}"


# About 11 s on a 2-core machine. A soak of 2,500 examples x 60 steps (3 minutes) found nothing; without
# StreamHub.catch_up, one of 1,500 examples found the missed nudge kept as the test below.
StreamMachine.TestCase.settings = settings(
    max_examples=examples(200), stateful_step_count=steps(40), deadline=None
)
TestStreamMachine = StreamMachine.TestCase


@settings(max_examples=examples(1), deadline=None, database=None)
@given(st.none())
def test_members_rejoining_through_streams_in_one_batch_are_nudged_when_the_batch_moves_their_target(
    _: None,
) -> None:
    """A run the machine found (shrunk) while StreamHub.catch_up did not exist: m0 and m2
    rejoin through their streams in one batch, m2 after m0, so m2's join moves the target
    m0's answer gave; m0 was carried by its stream only once the batch was stored, after
    the batch's nudges, and was left waiting for its next interval."""
    state = StreamMachine()

    try:
        state.churn_stops_and_nudges_settle(order=[0, 1, 2, 3])
        state.leave(i=2)
        state.churn_stops_and_nudges_settle(order=[0, 1, 2, 3])
        state.leave(i=0)
        state.heartbeat(i=1, lose=False, slow=False)
        state.rejoin(i=0)
        state.rejoin(i=2)
        state.checks()
        state.heartbeats_together(committer=None, lose=1, slow=0, which=[3, 0, 1, 2])
        state.checks()
    finally:
        state.teardown()
