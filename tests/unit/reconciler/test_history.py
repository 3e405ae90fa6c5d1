"""Group history: the events derived from an operation's records (reconciler/history.py).

Examples for each kind of change, and a property over the engine's group state
machine: the events projected from the records before they are applied agree
with what applying them does (who joined, left and reached the target, whether
the epoch moved, whether the group became Stable).
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, settings

from regroup.reconciler import Group, Result, Topic
from regroup.reconciler.history import (
    Circumstances,
    EventType,
    GroupEvent,
    TopicChange,
    derive_events,
)
from regroup.reconciler.membership import delete_group, refresh_metadata
from regroup.reconciler.model import LEAVE_GROUP_STATIC_MEMBER_EPOCH, GroupState, MemberState
from tests.support.depth import examples
from tests.support.engine import EngineHarness, beat, join
from tests.support.group_machine import GROUP, GroupMachine, _Harness

G = "g"


class _Recording(EngineHarness):
    """The engine harness, deriving every operation's events before applying it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: list[GroupEvent] = []
        self.cause = "heartbeat"
        self.circumstances = Circumstances()

    def apply(self, group_id: str, result: Result[Any]) -> None:
        self.events += derive_events(
            self.groups.get(group_id),
            group_id,
            result.records,
            self.cause,
            self.now_ms,
            self.config,
            self.circumstances,
        )
        super().apply(group_id, result)

    def take(self) -> list[tuple[EventType, str]]:
        out = [(e.type, e.reason) for e in self.events]
        self.events.clear()
        return out


def _joined_group() -> tuple[_Recording, str]:
    h = _Recording()
    h.create_topic("t", 4)
    a = h.heartbeat(join(G, "a", ["t"]))
    assert a.member_epoch == 1
    return h, "a"


def test_a_first_member_creates_the_group_joins_and_makes_it_stable() -> None:
    h, _ = _joined_group()
    events = list(h.events)
    assert [(e.type, e.reason) for e in events] == [
        (EventType.GROUP_CREATED, "heartbeat"),
        (EventType.MEMBER_JOINED, "joined"),
        (EventType.GROUP_EPOCH_BUMPED, "member_joined"),
        (EventType.TARGET_COMPUTED, ""),
        (EventType.MEMBER_RECONCILED, ""),
        (EventType.GROUP_STABLE, ""),
    ]
    bump, target, reconciled = events[2], events[3], events[4]
    assert (bump.previous_group_epoch, bump.group_epoch) == (0, 1)
    assert target.partitions_moved == 4 and target.assignor == "uniform"
    assert reconciled.member_id == "a" and reconciled.member_epoch == 1 and reconciled.partition_count == 4
    assert all(e.timestamp_ms == h.now_ms for e in events)


def test_a_second_member_moves_partitions_then_the_group_is_stable_again() -> None:
    h, _ = _joined_group()
    h.events.clear()
    h.now_ms = 1_000
    h.circumstances = Circumstances(unsettled_since_ms=None)
    b = h.heartbeat(join(G, "b", ["t"]))
    assert h.take() == [
        (EventType.MEMBER_JOINED, "joined"),
        (EventType.GROUP_EPOCH_BUMPED, "member_joined"),
        (EventType.TARGET_COMPUTED, ""),
    ]
    group = h.groups[G]
    a_target = group.target_of("a")
    # a revokes what b gets, then b receives it.
    h.now_ms = 1_200
    assert h.heartbeat(beat(G, "a", 1, a_target)).member_epoch == 2
    kinds = [t for t, _ in h.take()]
    assert kinds == [EventType.MEMBER_RECONCILED]
    h.circumstances = Circumstances(unsettled_since_ms=1_000)
    h.now_ms = 1_500
    h.heartbeat(beat(G, "b", b.member_epoch, {}))
    events = list(h.events)
    assert [e.type for e in events] == [EventType.MEMBER_RECONCILED, EventType.GROUP_STABLE]
    assert events[1].duration_ms == 500


def test_leaving_expiring_and_timing_out_each_say_why() -> None:
    h, _ = _joined_group()
    h.heartbeat(join(G, "b", ["t"]))
    h.heartbeat(join(G, "c", ["t"]))
    h.events.clear()
    h.cause = "leave"
    h.heartbeat(beat(G, "c", -1))
    assert h.take()[:2] == [(EventType.MEMBER_LEFT, "left"), (EventType.GROUP_EPOCH_BUMPED, "member_left")]
    h.cause = "session_timeout"
    group = h.groups[G]
    from regroup.reconciler import on_session_timeout

    h.apply(G, on_session_timeout(group, "b", h.ctx()))
    assert h.take()[:2] == [
        (EventType.SESSION_EXPIRED, "session_expired"),
        (EventType.GROUP_EPOCH_BUMPED, "session_expired"),
    ]


def test_a_static_member_leaves_temporarily_and_its_return_says_whom_it_replaces() -> None:
    h = _Recording()
    h.create_topic("t", 2)
    first = h.heartbeat(join(G, "s1", ["t"], instance_id="i"))
    h.events.clear()
    h.cause = "leave"
    h.heartbeat(beat(G, "s1", LEAVE_GROUP_STATIC_MEMBER_EPOCH, instance_id="i"))
    assert h.take() == [(EventType.MEMBER_LEFT_TEMPORARILY, "left_temporarily")]
    h.cause = "heartbeat"
    h.heartbeat(join(G, "s2", ["t"], instance_id="i"))
    events = list(h.events)
    joined = [e for e in events if e.type is EventType.MEMBER_JOINED]
    assert len(joined) == 1 and joined[0].reason == "static_member_rejoined"
    assert "s1" in joined[0].message and joined[0].instance_id == "i"
    assert not [e for e in events if e.type in (EventType.MEMBER_LEFT, EventType.MEMBER_FENCED)]
    assert first.member_epoch == 1


def test_subscription_and_assignor_changes_are_named() -> None:
    h, _ = _joined_group()
    h.create_topic("u", 1)
    h.events.clear()
    h.heartbeat(beat(G, "a", 1, subscribed_topic_names=("t", "u")))
    kinds = h.take()
    assert kinds[:2] == [
        (EventType.SUBSCRIPTION_CHANGED, ""),
        (EventType.GROUP_EPOCH_BUMPED, "member_metadata_changed"),
    ]
    epoch = h.groups[G].members["a"].member_epoch
    h.heartbeat(beat(G, "a", epoch, server_assignor="range"))
    assert (EventType.ASSIGNOR_CHANGED, "") in h.take()


def test_topic_changes_come_before_the_bump_they_cause() -> None:
    h, _ = _joined_group()
    h.events.clear()
    h.cause = "metadata_refresh"
    h.circumstances = Circumstances(topic_changes=(TopicChange("t", "grown", 6),))
    topic = h.image.by_name["t"]
    h.image = h.image.with_topic(Topic(topic.topic_id, "t", 6))
    h.apply(G, refresh_metadata(h.groups[G], h.ctx()))
    events = list(h.events)
    assert [(e.type, e.reason) for e in events] == [
        (EventType.TOPIC_GROWN, "grown"),
        (EventType.GROUP_EPOCH_BUMPED, "topics_changed"),
    ]
    assert events[0].topic_name == "t" and events[0].partition_count == 6


def test_deleting_a_group_is_one_event() -> None:
    h = _Recording()
    h.create_topic("t", 1)
    h.heartbeat(join(G, "a", ["t"]))
    h.cause = "leave"
    h.heartbeat(beat(G, "a", -1))
    h.events.clear()
    h.cause = "delete"
    h.apply(G, delete_group(h.groups[G]))
    assert h.take() == [(EventType.GROUP_DELETED, "delete")]


def test_no_records_no_events() -> None:
    h, _ = _joined_group()
    assert derive_events(h.groups[G], G, (), "heartbeat", 0, h.config) == []


# -- the property ---------------------------------------------------------------


class _Projected(_Harness):
    """The property machine's harness, checking each operation's events against the
    group its records leave."""

    def apply(self, group_id: str, result: Result[Any]) -> None:
        before = self.groups.get(group_id)
        snapshot = None if before is None else before.clone()
        events = derive_events(snapshot, group_id, result.records, "heartbeat", self.now_ms, self.config)
        super().apply(group_id, result)
        _check(snapshot, self.groups.get(group_id), events)


def _check(before: Group | None, after: Group | None, events: list[GroupEvent]) -> None:
    kinds = [e.type for e in events]
    was = {} if before is None else before.members
    now = {} if after is None else after.members
    joined = {e.member_id for e in events if e.type is EventType.MEMBER_JOINED}
    assert joined == set(now) - set(was), (events, sorted(was), sorted(now))
    removed = {
        e.member_id
        for e in events
        if e.type in (EventType.MEMBER_FENCED, EventType.MEMBER_LEFT, EventType.SESSION_EXPIRED)
    }
    replaced = {
        m.member_id
        for m in was.values()
        if m.instance_id is not None
        and m.member_id not in now
        and any(n.instance_id == m.instance_id for n in now.values())
    }
    if after is not None:
        assert removed == set(was) - set(now) - replaced, (events, sorted(was), sorted(now))
    epoch_before = 0 if before is None else before.group_epoch
    epoch_after = epoch_before if after is None else after.group_epoch
    assert (EventType.GROUP_EPOCH_BUMPED in kinds) == (epoch_after != epoch_before)
    target = 0 if after is None else after.assignment_epoch

    def reached(group: Group | None, member_id: str) -> bool:
        member = None if group is None else group.members.get(member_id)
        return (
            member is not None
            and member.state is MemberState.STABLE
            and member.member_epoch == target > 0
            and group is not None
            and group.assignment_epoch == target
        )

    reconciled = {e.member_id for e in events if e.type is EventType.MEMBER_RECONCILED}
    expected = {m for m in now if reached(after, m) and not reached(before, m)}
    assert reconciled == expected, (events, expected)

    def drained(group: Group | None, member_id: str) -> bool:
        member = None if group is None else group.members.get(member_id)
        return (
            member is not None
            and member.metadata.draining
            and not member.assigned
            and not member.pending_revocation
        )

    drained_events = {e.member_id for e in events if e.type is EventType.MEMBER_DRAINED}
    # A static member's new incarnation that is still draining joins drained: its join says so.
    assert drained_events == {m for m in was if drained(after, m) and not drained(before, m)}, events
    if drained_events:
        event("history: member drained")
    stable_after = after is not None and after.state() is GroupState.STABLE
    stable_before = before is not None and before.state() is GroupState.STABLE
    became = stable_after and (not stable_before or epoch_after != epoch_before)
    assert (EventType.GROUP_STABLE in kinds) == became, (
        events,
        before and before.state(),
        after and after.state(),
    )
    if became:
        event("history: became stable")
    if reconciled:
        event("history: members reconciled")


class HistoryMachine(GroupMachine):
    """The engine's group state machine, with every operation's events checked (`_check`)."""

    def __init__(self) -> None:
        super().__init__()
        self.h = _Projected()


assert GROUP
HistoryMachine.TestCase.settings = settings(GroupMachine.TestCase.settings, max_examples=examples(150))
TestHistoryMachine = HistoryMachine.TestCase
