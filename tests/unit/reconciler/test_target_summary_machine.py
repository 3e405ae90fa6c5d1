"""The group's own keeper of its targets' summary (Group.target_summary), driven
through the engine (hypothesis): members with racks and capacities join, heartbeat,
move racks, resubscribe, drain, leave, crash, and come back under a static
instance id; topics are created, grown, re-racked and deleted; targets are
computed in heartbeats and by the batching timer.

Checked after every step: whatever the keeper vouches for equals a recount of
the group's targets (every target valid over its member's subscription, sizes
and rack-local counts as counted). Checked at every inline computation: the
records computed with the keeper's summary equal those computed reading every
target, and the group's keeper (with a batch's copy of the group, as the write
path makes) stays independent of the copies replayed onto.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from regroup.reconciler import ApiError, Group, GroupConfig, Topic
from regroup.reconciler.assignors import uniform_quota
from regroup.reconciler.drain import drain_member
from regroup.reconciler.model import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH
from regroup.reconciler.target_assignment import PendingAssignment, group_spec
from regroup.reconciler.target_summary import TargetSummaryKeeper
from tests.support.depth import examples, steps
from tests.support.engine import EngineHarness, beat, join

G = "g"
RACKS = (None, "a", "b", "c")
TOPICS = ("t0", "t1", "t2")
#: Mostly one subscription: the assignors summarise homogeneous groups only.
SUBSCRIPTIONS = (*[("t0", "t1")] * 8, ("t0",), ("t1", "t2"))
MEMBERS = tuple(f"m{i}" for i in range(7))
INSTANCES = ("s0", "s1")


@pytest.fixture(autouse=True)
def compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every inline computation runs twice: told the keeper's summary, and
    reading every target; the records must be equal (the epoch record's
    summary is not compared: it is what the keeper is given next)."""
    kept = PendingAssignment.compute_kept
    trusted = uniform_quota._trusted_summary

    def both(self: PendingAssignment, config: GroupConfig, keeper: TargetSummaryKeeper | None) -> Any:
        told = kept(self, config, keeper)
        read = kept(self, config, None)
        assert told == read
        return told

    def counted(*args: Any) -> Any:
        summary = trusted(*args)
        if args[0].current_summary is not None:
            event("a computation was given a summary")
        if summary is not None:
            event("the assignor took the summary for the targets")
        return summary

    monkeypatch.setattr(PendingAssignment, "compute_kept", both)
    monkeypatch.setattr(uniform_quota, "_trusted_summary", counted)
    yield


class SummaryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = EngineHarness()
        self.epochs: dict[str, int] = {}
        self.versions = itertools.count(1)

    @initialize(
        interval=st.sampled_from([0, 0, 5_000]),
        partitions=st.lists(st.integers(1, 9), min_size=3, max_size=3),
        racked=st.sampled_from([True, True, False]),
    )
    def setup(self, interval: int, partitions: list[int], racked: bool) -> None:
        self.h.config = GroupConfig(assignment_interval_ms=interval)
        for name, count in zip(TOPICS, partitions, strict=True):
            self._set_topic(name, count, racked)

    def _set_topic(self, name: str, count: int, racked: bool) -> None:
        existing = self.h.image.by_name.get(name)
        topic_id = existing.topic_id if existing is not None else f"{name}-{next(self.versions)}"
        racks = tuple(RACKS[1 + (p + count) % 3] for p in range(count)) if racked else ()
        self.h.image = self.h.image.with_topic(Topic(topic_id, name, count, racks))
        self.h.refresh_all()

    @property
    def group(self) -> Group | None:
        return self.h.groups.get(G)

    def _send(self, req: Any) -> None:
        try:
            resp = self.h.heartbeat(req)
        except ApiError:
            self.epochs.pop(req.member_id, None)
            return
        if resp.member_epoch > 0:
            self.epochs[resp.member_id] = resp.member_epoch
        else:
            self.epochs.pop(resp.member_id, None)

    # -- rules -------------------------------------------------------------

    @rule(data=st.data(), count=st.integers(1, 3))
    def join(self, data: st.DataObject, count: int) -> None:
        """`count` members join, one heartbeat each."""
        for _ in range(count):
            member = data.draw(st.sampled_from(MEMBERS))
            if member in self.epochs:
                continue
            rack = data.draw(st.sampled_from(RACKS))
            topics = data.draw(st.sampled_from(SUBSCRIPTIONS))
            capacity = data.draw(st.sampled_from([1, 1, 2]))
            instance = data.draw(st.sampled_from([None, None, *INSTANCES]))
            self._send(join(G, member, list(topics), rack_id=rack, capacity=capacity, instance_id=instance))

    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        group = self.group
        if not self.epochs or group is None:
            return
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        current = group.members.get(member)
        if current is None:
            return
        change = data.draw(st.sampled_from(["none", "rack", "topics", "capacity"]))
        kwargs: dict[str, Any] = {}
        if change == "rack":
            kwargs["rack_id"] = data.draw(st.sampled_from(RACKS))
        elif change == "topics":
            kwargs["subscribed_topic_names"] = data.draw(st.sampled_from(SUBSCRIPTIONS))
        elif change == "capacity":
            kwargs["capacity"] = data.draw(st.sampled_from([1, 2, 3]))
        self._send(beat(G, member, self.epochs[member], current.assigned, **kwargs))

    @rule(data=st.data(), static=st.booleans())
    def leave(self, data: st.DataObject, static: bool) -> None:
        if not self.epochs:
            return
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        group = self.group
        instance = None if group is None or member not in group.members else group.members[member].instance_id
        epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH if static and instance else LEAVE_GROUP_MEMBER_EPOCH
        self._send(beat(G, member, epoch, instance_id=instance))
        self.epochs.pop(member, None)

    @rule(data=st.data(), undrain=st.booleans())
    def drain(self, data: st.DataObject, undrain: bool) -> None:
        group = self.group
        if group is None or not group.members:
            return
        member = data.draw(st.sampled_from(sorted(group.members)))
        self.h.apply(G, drain_member(group, G, member, "", undrain, self.h.ctx()))

    @rule(ms=st.sampled_from([1_000, 5_000, 50_000]))
    def advance(self, ms: int) -> None:
        """Time passes: members that did not heartbeat in a session expire
        (crashed), and the batching timer computes what is due."""
        self.h.advance(ms)
        group = self.group
        self.epochs = {
            m: group.members[m].member_epoch
            for m in self.epochs
            if group is not None and m in group.members and group.members[m].member_epoch > 0
        }

    @rule(topic=st.sampled_from(TOPICS), count=st.integers(1, 9), racked=st.sampled_from([True, True, False]))
    def change_topic(self, topic: str, count: int, racked: bool) -> None:
        self._set_topic(topic, count, racked)

    @rule(topic=st.sampled_from(TOPICS))
    def delete_topic(self, topic: str) -> None:
        if topic in self.h.image.by_name:
            self.h.delete_topic(topic)

    @rule()
    def batch_copy(self) -> None:
        """The write path computes a batch on a copy of the group, which then
        replaces it: the copy's keeper goes on from the original's, and
        replaying onto the copy leaves the original's alone."""
        group = self.group
        if group is None:
            return
        copy = group.clone()
        ids, key = _spec_members_and_key(group, self.h)
        before = group.target_summary.summary(ids, key)
        for member_id in ids[:1]:
            copy.target_summary.removed(member_id)
        assert group.target_summary.summary(ids, key) == before
        self.h.groups[G] = group.clone()

    # -- the invariant -----------------------------------------------------

    @invariant()
    def vouched_for_equals_a_recount(self) -> None:
        group = self.group
        if group is None:
            return
        members, key = _spec_members_and_key(group, self.h)
        summary = group.target_summary.summary(members, key)
        if summary is None:
            return
        event("the keeper vouched for a summary")
        image = self.h.image
        sizes, local = [], []
        for member_id in members:
            member = group.members[member_id]
            target = group.target.get(member_id, {})
            subscribed = {
                image.by_name[n].topic_id for n in member.subscribed_topic_names if n in image.by_name
            }
            for topic_id, partitions in target.items():
                assert topic_id in subscribed, (member_id, topic_id)
                assert all(0 <= p < image.by_id[topic_id].num_partitions for p in partitions)
            sizes.append(sum(map(len, target.values())))
            local.append(
                sum(
                    1
                    for t, ps in target.items()
                    for p in ps
                    if (racks := image.by_id[t].partition_racks) and racks[p] == member.rack_id
                )
            )
        assert list(summary.sizes) == sizes
        if summary.local_counts is not None:
            assert list(summary.local_counts) == local


def _spec_members_and_key(group: Group, h: EngineHarness) -> tuple[list[str], object]:
    """The members an inline computation of the group assigns, and the key it
    names its topics by (`PendingAssignment.compute_kept`)."""
    spec = group_spec(group.members, group.target, h.image, group.member_ids_in_order())
    return list(spec.members), tuple(spec.topics.values())


SummaryMachine.TestCase.settings = settings(
    max_examples=examples(300),
    stateful_step_count=steps(60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSummaryMachine = SummaryMachine.TestCase
