"""StreamHub and StreamSession (server/streams.py) on their own: which stream carries
which member, when a stored change nudges whom, and what a stream's writer sends next.
Groups come from the engine (tests/support/engine.py), not from a server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from regroup.reconciler import Group, GroupConfig, Topic, replay_all
from regroup.reconciler.model import Computation
from regroup.reconciler.nudges import NudgeReason, nudge_reason
from regroup.reconciler.offsets import OffsetToCommit
from regroup.reconciler.records import (
    CurrentAssignmentRecord,
    GroupMetadataRecord,
    Record,
    member_removal_records,
)
from regroup.server.clock import ManualClock
from regroup.server.runtime import Coordinator
from regroup.server.service import GroupCoordinatorService
from regroup.server.streams import (
    COALESCE_ENOUGH,
    MAX_ITEMS_PER_MESSAGE,
    MemberKey,
    StreamAnswer,
    StreamClosed,
    StreamHub,
    StreamLimits,
    StreamSession,
)
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.engine import EngineHarness, beat, join
from tests.support.leases import MANUAL_LEASES
from tests.support.streams_inproc import GatedStore, InProcessStream, unary_context

G = "g"


def key(member_id: str) -> MemberKey:
    return (G, member_id)


def answer(correlation_id: int) -> StreamAnswer:
    return StreamAnswer(correlation_id=correlation_id)


def nudged(message: coordinator_pb2.MemberStreamResponse) -> list[tuple[str, int]]:
    return [(n.member_id, n.reason) for n in message.nudges]


async def next_message(session: StreamSession) -> coordinator_pb2.MemberStreamResponse | None:
    # A session waits for work without a timeout of its own: a test that expects a
    # message must not hang when none comes.
    async with asyncio.timeout(1):
        return await session.next_message()


# -- groups from the engine -----------------------------------------------------------


def waiting_pair() -> EngineHarness:
    """a owned all four partitions, then b joined: a is told to revoke two (it has not
    acknowledged), b waits for them (UNRELEASED_PARTITIONS, nothing free yet)."""
    h = EngineHarness()
    h.create_topic("orders", 4)
    h.heartbeat(join(G, "a", ["orders"]))
    h.heartbeat(join(G, "b", ["orders"]))
    a = h.groups[G].members["a"]
    h.heartbeat(beat(G, "a", a.member_epoch, a.assigned))
    return h


def acknowledge(h: EngineHarness, member_id: str) -> tuple[Record, ...]:
    """The member says it revoked: its pending revocation is released."""
    member = h.groups[G].members[member_id]
    h.heartbeat(beat(G, member_id, member.member_epoch, member.assigned))
    return h.last_records


def group(h: EngineHarness) -> Group:
    return h.groups[G]


# -- which stream carries whom --------------------------------------------------------


def test_a_registered_member_is_carried_by_its_stream_until_unregistered() -> None:
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("a"))
    assert s.members == {key("a")} and hub.members_of(G) == 1
    hub.register(s, key("a"))  # again: nothing changes
    assert s.members == {key("a")} and hub.members_of(G) == 1
    hub.unregister(s, key("a"))
    assert s.members == set() and hub.members_of(G) == 0
    hub.unregister(s, key("a"))  # not carried: nothing to do
    assert hub.members_of(G) == 0


def test_the_last_stream_a_member_heartbeated_on_carries_it() -> None:
    hub = StreamHub()
    first, second = hub.open(), hub.open()
    hub.register(first, key("a"))
    hub.register(second, key("a"))
    assert key("a") not in first.members and second.members == {key("a")}
    assert hub.members_of(G) == 1
    # Unregistering it from the stream that no longer carries it changes nothing.
    hub.unregister(first, key("a"))
    assert second.members == {key("a")} and hub.members_of(G) == 1
    # Closing that stream neither.
    hub.close(first)
    assert hub.members_of(G) == 1 and first not in hub.sessions


def test_closing_a_stream_forgets_its_members_and_cancels_what_it_serves() -> None:
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("a"))
    hub.register(s, ("other", "x"))

    class Task:
        cancelled = False

        def cancel(self) -> None:
            self.cancelled = True

    task = Task()
    s.tasks.add(task)  # type: ignore[arg-type]
    hub.close(s)
    assert hub.members_of(G) == 0 and hub.members_of("other") == 0
    assert s.members == set() and s not in hub.sessions
    assert task.cancelled


def test_a_stream_carries_at_most_max_members_counting_first_heartbeats_in_flight() -> None:
    hub = StreamHub(StreamLimits(max_members=2))
    s = hub.open()
    hub.register(s, key("a"))
    assert hub.may_carry(s, key("b"))
    s.joining.add(7)  # a join being served: it may become a member of the stream
    assert not hub.may_carry(s, key("b"))
    assert hub.may_carry(s, key("a")), "a member already carried is never refused"
    s.joining.discard(7)
    hub.register(s, key("b"))
    assert not hub.may_carry(s, key("c"))
    # Another stream has room of its own.
    assert hub.may_carry(hub.open(), key("c"))


# -- nudges on a stored change --------------------------------------------------------


def test_a_change_nudges_the_stream_members_a_heartbeat_would_move_and_only_them() -> None:
    h = waiting_pair()
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("a"))
    hub.register(s, key("b"))
    records = acknowledge(h, "a")
    hub.written(G, group(h), records)
    # b's partitions were released; a is stable at its target.
    assert s.nudged == {key("b")}
    assert s._nudges == {key("b"): (NudgeReason.PARTITIONS_RELEASED, group(h).group_epoch)}


async def test_a_member_is_nudged_once_until_it_is_heard_from() -> None:
    h = waiting_pair()
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("b"))
    records = acknowledge(h, "a")
    hub.written(G, group(h), records)
    message = await next_message(s)
    assert message is not None and nudged(message) == [("b", NudgeReason.PARTITIONS_RELEASED)]
    # More writes before b heartbeats: no second nudge (sent or queued).
    hub.written(G, group(h), records)
    hub.written(G, group(h), (GroupMetadataRecord(group(h).group_epoch, 0, "consumer"),))
    assert s._nudges == {} and s.nudged == {key("b")}
    # Once heard from, the next change that concerns it nudges it again.
    s.heard(key("b"))
    assert s.nudged == set()
    hub.written(G, group(h), records)
    assert s._nudges == {key("b"): (NudgeReason.PARTITIONS_RELEASED, group(h).group_epoch)}


def test_hearing_from_a_member_drops_its_queued_nudge() -> None:
    h = waiting_pair()
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("b"))
    hub.written(G, group(h), acknowledge(h, "a"))
    assert key("b") in s._nudges
    s.heard(key("b"))  # its heartbeat's answer tells it what the nudge would have
    assert s._nudges == {} and s.nudged == set()


def test_a_write_of_current_assignments_only_looks_at_the_members_waiting_for_partitions() -> None:
    h = EngineHarness()
    h.create_topic("orders", 4)
    h.heartbeat(join(G, "a", ["orders"]))
    h.heartbeat(join(G, "b", ["orders"]))
    joined = h.last_records
    g = group(h)
    # a is stable behind the target b's join computed; b waits for a's partitions.
    assert g.members["a"].member_epoch < g.assignment_epoch
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("a"))
    hub.register(s, key("b"))
    hub.written(G, g, (CurrentAssignmentRecord.of(g.members["b"]),))
    # Members moving towards their targets can only have released partitions: a, which
    # waits for none, is not looked at (the write that moved its target nudges it).
    assert s.nudged == set()
    hub.written(G, g, joined)
    assert s._nudges == {key("a"): (NudgeReason.TARGET_CHANGED, g.group_epoch)}


def test_a_removed_member_is_nudged_and_no_longer_carried() -> None:
    h = waiting_pair()
    hub = StreamHub(StreamLimits(max_members=2))
    s = hub.open()
    hub.register(s, key("a"))
    hub.register(s, key("gone"))  # carried here, but no longer in the group
    hub.written(G, group(h), (GroupMetadataRecord(group(h).group_epoch, 0, "consumer"),))
    assert s._nudges[key("gone")][0] == NudgeReason.MEMBER_REMOVED
    assert s.members == {key("a")} and hub.members_of(G) == 1
    # It no longer holds a place under the member limit.
    assert hub.may_carry(s, key("c"))


def test_a_member_removed_after_its_nudge_is_no_longer_carried_and_not_nudged_again() -> None:
    h = waiting_pair()
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("b"))
    hub.written(G, group(h), acknowledge(h, "a"))
    assert s._nudges.pop(key("b"))[0] == NudgeReason.PARTITIONS_RELEASED  # as if sent
    removal = member_removal_records("b")  # b's session ran out
    g = replay_all(group(h).clone(), G, removal)
    hub.written(G, g, removal)
    assert s._nudges == {}, "nudged already and not heard from since"
    assert s.members == set() and hub.members_of(G) == 0


def test_a_deleted_group_nudges_all_its_stream_members_and_forgets_them() -> None:
    hub = StreamHub()
    first, second = hub.open(), hub.open()
    hub.register(first, key("a"))
    hub.register(second, key("b"))
    hub.register(second, ("other", "x"))
    hub.written(G, None, ())
    assert first._nudges == {key("a"): (NudgeReason.GROUP_DELETED, 0)}
    assert second._nudges == {key("b"): (NudgeReason.GROUP_DELETED, 0)}
    assert first.members == set() and second.members == {("other", "x")}
    assert hub.members_of(G) == 0


def test_a_change_of_a_group_without_stream_members_does_nothing() -> None:
    hub = StreamHub()
    s = hub.open()
    hub.register(s, ("other", "x"))
    hub.written(G, None, ())
    assert s.nudged == set() and s.members == {("other", "x")}


def test_a_member_a_stream_starts_carrying_is_nudged_for_what_changed_since_it_was_served() -> None:
    h = waiting_pair()
    hub = StreamHub()
    s = hub.open()
    acknowledge(h, "a")  # stored while b's heartbeat was being served, before b was carried
    hub.register(s, key("b"))
    hub.catch_up(s, key("b"), group(h), told_to_compute=False)
    assert s._nudges == {key("b"): (NudgeReason.PARTITIONS_RELEASED, group(h).group_epoch)}
    hub.catch_up(s, key("b"), group(h), told_to_compute=False)
    assert s.nudged == {key("b")} and len(s._nudges) == 1, "once, until heard from"


def test_a_member_a_stream_starts_carrying_is_not_nudged_for_what_its_answer_said() -> None:
    h = waiting_pair()
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("a"))
    hub.register(s, key("b"))
    hub.catch_up(s, key("a"), group(h), told_to_compute=False)  # revoking: nothing new
    hub.catch_up(s, key("b"), group(h), told_to_compute=False)  # nothing released yet
    assert s.nudged == set()
    g = group(h).clone()
    g.computation = Computation("b", "my-assignor", deadline_ms=10_000)
    hub.catch_up(s, key("b"), g, told_to_compute=True)  # its answer was COMPUTE_ASSIGNMENT
    assert s.nudged == set()
    hub.catch_up(s, key("b"), g, told_to_compute=False)  # chosen after its answer
    assert s._nudges == {key("b"): (NudgeReason.COMPUTE_ASSIGNMENT, g.group_epoch)}


def test_a_member_a_stream_starts_carrying_that_is_gone_already_is_told_and_not_carried() -> None:
    h = waiting_pair()
    hub = StreamHub()
    s = hub.open()
    hub.register(s, key("gone"))
    hub.catch_up(s, key("gone"), group(h), told_to_compute=False)
    assert s._nudges == {key("gone"): (NudgeReason.MEMBER_REMOVED, group(h).group_epoch)}
    assert s.members == set() and hub.members_of(G) == 0
    # A group this replica does not serve (None): nothing is known, nothing is sent.
    hub.register(s, key("x"))
    hub.catch_up(s, key("x"), None, told_to_compute=False)
    assert key("x") not in s.nudged and s.members == {key("x")}


# -- what a stream's writer sends -----------------------------------------------------


async def test_the_answers_and_nudges_waiting_go_in_one_message_at_most_max_items_each() -> None:
    s = StreamSession(StreamLimits())
    for i in range(MAX_ITEMS_PER_MESSAGE + 5):
        s.answer(answer(i))
    for member_id in ("a", "b", "c"):
        s.nudge(key(member_id), NudgeReason.TARGET_CHANGED, 4)
    first = await next_message(s)
    assert first is not None
    assert [a.correlation_id for a in first.responses] == list(range(MAX_ITEMS_PER_MESSAGE))
    assert len(first.nudges) == 0, "no room left in a full message"
    second = await next_message(s)
    assert second is not None
    assert [a.correlation_id for a in second.responses] == list(
        range(MAX_ITEMS_PER_MESSAGE, MAX_ITEMS_PER_MESSAGE + 5)
    )
    assert nudged(second) == [(m, NudgeReason.TARGET_CHANGED) for m in "abc"]
    assert {n.group_epoch for n in second.nudges} == {4} and {n.group_id for n in second.nudges} == {G}
    assert (s.messages_written, s.answers_written, s.nudges_sent) == (2, MAX_ITEMS_PER_MESSAGE + 5, 3)


async def test_nudges_beyond_a_message_wait_for_the_next_one() -> None:
    s = StreamSession(StreamLimits())
    s.answer(answer(1))
    for i in range(MAX_ITEMS_PER_MESSAGE):
        s.nudge(key(f"m{i}"), NudgeReason.TARGET_CHANGED, 1)
    first = await next_message(s)
    assert first is not None and len(first.responses) == 1
    assert len(first.nudges) == MAX_ITEMS_PER_MESSAGE - 1
    second = await next_message(s)
    assert second is not None and nudged(second) == [(f"m{MAX_ITEMS_PER_MESSAGE - 1}", 1)]


def test_pending_counts_answers_owed_and_answers_not_written_but_not_nudges() -> None:
    s = StreamSession(StreamLimits())
    assert s.pending == 0
    s.in_flight.update({1, 2})
    s.answer(answer(3))
    s.nudge(key("a"), NudgeReason.TARGET_CHANGED, 1)
    assert s.pending == 3
    s.in_flight.discard(1)
    s.answer(answer(1))
    assert s.pending == 3


async def test_a_failed_stream_calls_on_failure_once_and_sends_nothing_more() -> None:
    s = StreamSession(StreamLimits())
    calls: list[int] = []
    s.on_failure = lambda: calls.append(1)
    s.answer(answer(1))
    first = StreamClosed(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many")
    s.fail(first)
    s.fail(StreamClosed(grpc.StatusCode.INTERNAL, "later"))
    assert calls == [1]
    assert s.failure is first
    assert await next_message(s) is None, "nothing is written once the stream failed"


async def test_a_failure_wakes_a_writer_waiting_for_work() -> None:
    s = StreamSession(StreamLimits())
    writer = asyncio.create_task(next_message(s))
    await asyncio.sleep(0)
    assert not writer.done()
    s.fail(StreamClosed(grpc.StatusCode.UNAVAILABLE, "stopping"))
    assert await writer is None


async def test_the_stream_ends_at_end_of_input_once_nothing_is_in_flight() -> None:
    s = StreamSession(StreamLimits())
    s.in_flight.add(1)
    s.end_of_input()
    writer = asyncio.create_task(next_message(s))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not writer.done(), "a heartbeat is still being served: its answer is owed"
    s.in_flight.discard(1)
    s.answer(answer(1))
    message = await writer
    assert message is not None and [a.correlation_id for a in message.responses] == [1]
    assert await next_message(s) is None


async def test_the_stream_ends_at_once_at_end_of_input_with_nothing_owed() -> None:
    s = StreamSession(StreamLimits())
    s.end_of_input()
    assert await next_message(s) is None


async def test_a_queued_nudge_is_still_sent_after_end_of_input() -> None:
    s = StreamSession(StreamLimits())
    s.nudge(key("a"), NudgeReason.MEMBER_REMOVED, 3)
    s.end_of_input()
    message = await next_message(s)
    assert message is not None and nudged(message) == [("a", NudgeReason.MEMBER_REMOVED)]
    assert await next_message(s) is None


@pytest.mark.parametrize("many", [False, True])
async def test_a_busy_stream_waits_to_coalesce_unless_many_answers_wait(many: bool) -> None:
    s = StreamSession(StreamLimits())
    s.answer(answer(0))
    assert await next_message(s) is not None
    # As if it wrote just now, with a margin a loaded machine cannot eat (COALESCE_S is 2 ms).
    s._last_write = time.monotonic() + 0.05
    count = COALESCE_ENOUGH if many else 1
    for i in range(1, count + 1):
        s.answer(answer(i))
    writer = asyncio.create_task(next_message(s))
    await asyncio.sleep(0)
    # With many answers waiting it sends at once; with one it waits (COALESCE_S) for more.
    assert writer.done() is many
    s.answer(answer(count + 1))
    message = await writer
    assert message is not None
    assert len(message.responses) == (count if many else 2)


# -- through the servicer, in-process -------------------------------------------------


def request(
    member_id: str, epoch: int, owns: set[int] | None = None
) -> coordinator_pb2.ConsumerGroupHeartbeatRequest:
    r = coordinator_pb2.ConsumerGroupHeartbeatRequest(group_id=G, member_id=member_id, member_epoch=epoch)
    if epoch == 0:
        r.rebalance_timeout_ms = 60_000
        r.subscribed_topic_names.values.append("orders")
    if owns is not None:
        r.topic_partitions.SetInParent()
        if owns:
            r.topic_partitions.topics.add(topic_id="orders-id", partitions=sorted(owns))
    return r


async def test_a_member_batched_with_the_release_it_waits_for_on_its_first_stream_heartbeat_is_nudged() -> (
    None
):
    """b waits for partitions a revokes. b's first heartbeat through a stream and a's
    acknowledgement queue behind a write and are served in one batch, b's first: b's
    answer says it still waits, and the release in the same batch was stored before the
    stream carried b. The stream must still nudge b (it would wait for its next interval)."""
    store = GatedStore()
    clock = ManualClock()
    coordinator = Coordinator(
        store, GroupConfig(assignment_interval_ms=0), clock, run_timers=False, leases=MANUAL_LEASES
    )
    await store.put_topic(Topic("orders-id", "orders", 4))
    await coordinator.start()
    service = GroupCoordinatorService(coordinator)
    stream: InProcessStream | None = None
    try:

        async def unary(r: coordinator_pb2.ConsumerGroupHeartbeatRequest) -> Any:
            return await service.ConsumerGroupHeartbeat(r, unary_context())

        a = await unary(request("a", 0, set()))
        b = await unary(request("b", 0, set()))
        revoking = await unary(request("a", a.member_epoch, {0, 1, 2, 3}))
        kept = {p for t in revoking.assignment.topic_partitions for p in t.partitions}
        assert len(kept) == 2
        stream = await InProcessStream.open(service)

        # A write holds the group's lock: what follows queues behind it.
        store.gate.clear()
        commit = asyncio.create_task(
            coordinator.commit_offsets(G, "a", revoking.member_epoch, [OffsetToCommit("orders-id", 0, 5, "")])
        )
        await asyncio.sleep(0.01)
        await stream.send_only(1, request("b", b.member_epoch))
        await asyncio.sleep(0.01)
        acknowledged = asyncio.create_task(unary(request("a", revoking.member_epoch, kept)))
        await asyncio.sleep(0.01)
        store.gate.set()
        await commit
        assert (await acknowledged).error_code == common_pb2.NONE
        answered = await stream.answer(1)
        assert answered is not None
        assert answered.error_code == common_pb2.NONE and not answered.HasField("assignment")
        assert nudge_reason(coordinator.groups[G], "b") is NudgeReason.PARTITIONS_RELEASED

        nudges = await stream.wait_for_nudges()
        released = coordinator_pb2.NUDGE_REASON_PARTITIONS_RELEASED
        assert [(n.member_id, n.reason) for n in nudges] == [("b", released)]
        # And the nudge was right: b's next heartbeat gets the released partitions.
        moved = await stream.heartbeat(2, request("b", b.member_epoch))
        assert moved is not None and moved.HasField("assignment")
    finally:
        if stream is not None:
            await stream.close()
        await coordinator.stop()
