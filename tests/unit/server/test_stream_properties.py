"""Randomized safety of member streams (hypothesis), without the network.

The real gRPC servicer (`GroupCoordinatorService`, its `MemberStream` and unary
`ConsumerGroupHeartbeat`) over the real `Coordinator` on the in-memory store, with a
manual clock, driven in-process through a fake servicer context (tests/support/streams_inproc.py).
Clients follow the protocol as the Python client does: they take what an answer
assigns, give up what it leaves out and say so in their next heartbeat, send a full
request after a lost answer or an error, rejoin when fenced, and drop what they hold
once their session could have expired on the coordinator. Each client heartbeats on
one of two streams or with unary calls and switches between them; streams break
(with a heartbeat in flight or not) and reopen; answers are lost; nudges make the
nudged clients heartbeat at once; clients crash and leave; time passes.

After every step: no partition is held by two live clients, and every nudge named a
member that heartbeated on that stream. When the churn stops, the group converges:
Stable, every partition held by exactly one live client, as the coordinator says.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from regroup.reconciler import GroupConfig, Topic
from regroup.server.clock import ManualClock
from regroup.server.memstore import MemoryStore
from regroup.server.runtime import Coordinator
from regroup.server.service import GroupCoordinatorService
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.leases import MANUAL_LEASES
from tests.support.streams_inproc import InProcessStream, UnaryContext

GROUP = "g"
TOPIC = "t"
TOPIC_ID = "t-id"
PARTITIONS = 6
CLIENTS = 4
STREAMS = 2
SESSION_MS = 3_000
MARGIN_MS = 300
FENCED = {common_pb2.FENCED_MEMBER_EPOCH, common_pb2.UNKNOWN_MEMBER_ID}


@dataclass
class Client:
    member_id: str
    #: The stream it heartbeats on, or None for unary calls.
    stream: int | None = None
    epoch: int = 0
    held: frozenset[int] = frozenset()
    full: bool = True
    answered_at: int = 0
    crashed: bool = False
    left: bool = False

    @property
    def live(self) -> bool:
        return not self.crashed and not self.left

    def drop(self) -> None:
        self.epoch, self.held, self.full = 0, frozenset(), True


class StreamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.store = MemoryStore()
        config = GroupConfig(
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1_000, assignment_interval_ms=0
        )
        self.coordinator = Coordinator(self.store, config, self.clock, run_timers=False, leases=MANUAL_LEASES)
        self._run(self.store.put_topic(Topic(TOPIC_ID, TOPIC, PARTITIONS)))
        self._run(self.coordinator.start())
        self.service = GroupCoordinatorService(self.coordinator)
        self.streams: list[InProcessStream | None] = [None] * STREAMS
        self.clients = [Client(f"m{i}") for i in range(CLIENTS)]
        self.next_id = 0
        self._answered_at = 0

    def _run(self, coroutine):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        try:
            if any(c.live for c in self.clients):
                self._converge()
        finally:
            for stream in self.streams:
                if stream is not None:
                    self._run(stream.close())
            self._run(self.coordinator.stop())
            self.loop.close()

    # -- the client side ------------------------------------------------------------

    def _request(
        self, client: Client, epoch: int | None = None
    ) -> coordinator_pb2.ConsumerGroupHeartbeatRequest:
        request = coordinator_pb2.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=client.member_id, member_epoch=client.epoch if epoch is None else epoch
        )
        if epoch is not None:
            return request  # a leave
        if client.epoch == 0 or client.full:
            request.rebalance_timeout_ms = 60_000
            request.subscribed_topic_names.values.append(TOPIC)
        request.topic_partitions.SetInParent()
        if client.held:
            request.topic_partitions.topics.add(topic_id=TOPIC_ID, partitions=sorted(client.held))
        return request

    def _stream_of(self, client: Client) -> InProcessStream | None:
        if client.stream is None:
            return None
        stream = self.streams[client.stream]
        if stream is None or stream.broken:
            client.stream = None  # falls back to unary calls
            return None
        return stream

    def _send(self, client: Client, request: coordinator_pb2.ConsumerGroupHeartbeatRequest) -> object | None:
        """The answer, or None when it was lost with its stream."""
        sent_at = self.clock.monotonic_ms()
        stream = self._stream_of(client)
        if stream is None:
            event("unary heartbeat")
            answer: object | None = self._run(self.service.ConsumerGroupHeartbeat(request, UnaryContext()))
        else:
            event("streamed heartbeat")
            self.next_id += 1
            answer = self._run(stream.heartbeat(self.next_id, request))
        if answer is not None:
            self._answered_at = sent_at
        return answer

    def _apply(self, client: Client, response: coordinator_pb2.ConsumerGroupHeartbeatResponse) -> None:
        code = response.error_code
        if code in FENCED:
            event("fenced")
            client.drop()
            return
        if code not in (common_pb2.NONE, common_pb2.COMPUTE_ASSIGNMENT):
            client.full = True
            return
        client.epoch, client.full = response.member_epoch, False
        client.answered_at = self._answered_at
        if response.HasField("assignment"):
            assigned = {p for t in response.assignment.topic_partitions for p in t.partitions}
            client.held = frozenset(assigned)

    def _heartbeat(self, client: Client, lose: bool = False) -> None:
        if not client.live:
            return
        answer = self._send(client, self._request(client))
        if answer is None or lose:
            event("answer lost")
            client.full = True
            return
        assert isinstance(answer, coordinator_pb2.ConsumerGroupHeartbeatResponse)
        self._apply(client, answer)
        # A revocation (or anything new) is acknowledged at once, as the client does.
        if answer.HasField("assignment") and client.live:
            again = self._send(client, self._request(client))
            if isinstance(again, coordinator_pb2.ConsumerGroupHeartbeatResponse):
                self._apply(client, again)
            else:
                client.full = True

    # -- rules ----------------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1), lose=st.booleans())
    def heartbeat(self, i: int, lose: bool) -> None:
        self._heartbeat(self.clients[i], lose)

    @rule(i=st.integers(0, CLIENTS - 1), to=st.sampled_from([None, *range(STREAMS)]))
    def switch(self, i: int, to: int | None) -> None:
        client = self.clients[i]
        if to is not None and self.streams[to] is None:
            self.streams[to] = self._run(InProcessStream.open(self.service))
        client.stream = to

    @rule(s=st.integers(0, STREAMS - 1), in_flight=st.sampled_from([None, *range(CLIENTS)]))
    def break_stream(self, s: int, in_flight: int | None) -> None:
        """The stream breaks, with a client's heartbeat sent and unanswered or not."""
        stream = self.streams[s]
        if stream is None:
            return
        if in_flight is not None and self.clients[in_flight].stream == s and self.clients[in_flight].live:
            client = self.clients[in_flight]
            self.next_id += 1
            self._run(stream.send_only(self.next_id, self._request(client)))
            client.full = True  # its answer will not come
            event("stream broke with a heartbeat in flight")
        self._run(stream.close())
        self.streams[s] = None
        event("stream broke")

    @rule()
    def nudged_clients_heartbeat(self) -> None:
        for s, stream in enumerate(self.streams):
            if stream is None:
                continue
            for nudge in stream.take_nudges():
                event(f"nudge {coordinator_pb2.NudgeReason.Name(nudge.reason)}")
                assert nudge.group_id == GROUP
                assert nudge.member_id in stream.heard, (
                    f"nudge for {nudge.member_id}, never heard on stream {s}"
                )
                client = next(c for c in self.clients if c.member_id == nudge.member_id)
                if client.stream == s:
                    self._heartbeat(client)

    @rule(i=st.integers(0, CLIENTS - 1))
    def crash(self, i: int) -> None:
        self.clients[i].crashed = True

    @rule(i=st.integers(0, CLIENTS - 1))
    def leave(self, i: int) -> None:
        client = self.clients[i]
        if not client.live or client.epoch <= 0:
            return
        held, client.held = client.held, frozenset()  # revoked before leaving
        del held
        self._send(client, self._request(client, epoch=-1))
        client.left = True

    @rule(i=st.integers(0, CLIENTS - 1))
    def rejoin(self, i: int) -> None:
        """A crashed or departed client comes back as a new process (same member id)."""
        client = self.clients[i]
        if client.live:
            return
        self.clients[i] = Client(client.member_id, stream=client.stream)

    @rule(ms=st.integers(1, 1_500))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)
        now = self.clock.monotonic_ms()
        for client in self.clients:
            if client.live and client.epoch > 0 and now >= client.answered_at + SESSION_MS - MARGIN_MS:
                event("client's own session ran out")
                client.drop()
        self._run(self.coordinator.expire_due())

    # -- invariants -----------------------------------------------------------------

    @invariant()
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

    def _converge(self) -> None:
        for client in self.clients:
            if not client.live:
                client.held = frozenset()
        for _ in range(40):
            # Crashed members' sessions run out; live ones heartbeat every round.
            self.clock.advance(500)
            self._run(self.coordinator.expire_due())
            for client in self.clients:
                self._heartbeat(client)
            self.nudged_clients_heartbeat()
            self.no_partition_has_two_owners()
            group = self.coordinator.groups.get(GROUP)
            live = [c for c in self.clients if c.live]
            held = [p for c in live for p in c.held]
            if (
                group is not None
                and group.state().value == "Stable"
                and sorted(held) == list(range(PARTITIONS))
                and all(c.epoch == group.assignment_epoch for c in live)
            ):
                return
        raise AssertionError(
            f"did not converge: {[(c.member_id, c.epoch, sorted(c.held)) for c in self.clients]}"
        )


StreamMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestStreamMachine = StreamMachine.TestCase
