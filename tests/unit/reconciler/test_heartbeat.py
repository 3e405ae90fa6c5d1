"""The consumer group heartbeat, driven through `EngineHarness` (records replayed, timers applied).

Most tests use two topics, foo (6 partitions) and bar (3), and the range
assignor, whose targets are easy to read: members sorted by id, each topic cut
into contiguous ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from regroup.reconciler import (
    ApiError,
    ConsumerGroupHeartbeat,
    ErrorCode,
    Group,
    GroupConfig,
    GroupState,
    Member,
    MemberState,
    OwnedTopicPartitions,
    Result,
    ScheduleAssignment,
    delete_group,
    on_rebalance_timeout,
    refresh_metadata,
)
from regroup.reconciler.assignors import GroupSpec, RangeAssignor
from regroup.reconciler.errors import (
    FencedInstanceId,
    FencedMemberEpoch,
    GroupIdNotFound,
    GroupMaxSizeReached,
    InvalidRegularExpression,
    InvalidRequest,
    NonEmptyGroup,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)
from regroup.reconciler.model import Assignment, make_assignment
from regroup.reconciler.records import (
    CurrentAssignmentRecord,
    CurrentAssignmentTombstone,
    GroupMetadataRecord,
    GroupTombstone,
    MemberMetadataTombstone,
    TargetAssignmentMemberTombstone,
)
from tests.support.engine import EngineHarness, beat, join, owned

GROUP = "g"
FOO = "foo-id"
BAR = "bar-id"

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS


def parts(foo: Iterable[int] = (), bar: Iterable[int] = (), **others: Iterable[int]) -> Assignment:
    """Partitions by topic id; `others` are keyed by topic name."""
    pairs = [(FOO, foo), (BAR, bar), *((f"{name}-id", p) for name, p in others.items())]
    return make_assignment(pairs)


ALL = parts(range(6), range(3))


def harness(config: GroupConfig | None = None) -> EngineHarness:
    h = EngineHarness(config=config or GroupConfig())
    h.create_topic("foo", 6)
    h.create_topic("bar", 3)
    return h


@pytest.fixture
def h() -> EngineHarness:
    return harness()


def grp(h: EngineHarness) -> Group:
    return h.groups[GROUP]


def mem(h: EngineHarness, member_id: str) -> Member:
    return h.groups[GROUP].members[member_id]


def join_range(
    member_id: str, topics: Iterable[str] = ("foo", "bar"), **kwargs: object
) -> ConsumerGroupHeartbeat:
    return join(GROUP, member_id, list(topics), server_assignor="range", **kwargs)


def assert_member(
    h: EngineHarness,
    member_id: str,
    state: MemberState,
    epoch: int,
    previous: int,
    assigned: Assignment,
    pending: Assignment | None = None,
) -> None:
    m = mem(h, member_id)
    actual = (m.state, m.member_epoch, m.previous_member_epoch, m.assigned, m.pending_revocation)
    assert actual == (state, epoch, previous, assigned, pending or {})


def snapshot(h: EngineHarness, group_id: str = GROUP) -> object:
    """Everything a refused request must leave alone."""
    group = h.groups.get(group_id)
    if group is None:
        return None
    owners = {(t, p): group.partition_epoch(t, p) for t in (FOO, BAR) for p in range(6)}
    return (
        group.group_epoch,
        group.assignment_epoch,
        group.metadata_hash,
        group.state(),
        dict(group.members),
        dict(group.target),
        owners,
    )


def assert_rejected(
    h: EngineHarness, req: ConsumerGroupHeartbeat, error: type[ApiError], code: ErrorCode, message: str
) -> None:
    before = snapshot(h, req.group_id)
    with pytest.raises(error) as raised:
        h.heartbeat(req)
    assert type(raised.value) is error
    assert raised.value.code is code
    assert raised.value.message == message
    assert snapshot(h, req.group_id) == before


def stable_pair(h: EngineHarness) -> None:
    """Members a and c, STABLE at group epoch 2: a owns foo 0-2 and bar 0-1, c foo 3-5 and bar 2."""
    h.heartbeat(join_range("a"))
    h.heartbeat(join_range("c"))
    revoking = h.heartbeat(beat(GROUP, "a", 1))
    h.heartbeat(beat(GROUP, "a", 1, revoking.assignment))
    h.heartbeat(beat(GROUP, "c", 2))
    assert_member(h, "a", STABLE, 2, 1, parts({0, 1, 2}, {0, 1}))
    assert_member(h, "c", STABLE, 2, 2, parts({3, 4, 5}, {2}))
    assert grp(h).state() is GroupState.STABLE


def settle(h: EngineHarness, *member_ids: str) -> None:
    """Heartbeats the members, each acknowledging what it was last given, until the group is STABLE."""
    for _ in range(10):
        if grp(h).state() is GroupState.STABLE:
            return
        for member_id in member_ids:
            m = mem(h, member_id)
            h.heartbeat(beat(GROUP, member_id, m.member_epoch, m.assigned))
    raise AssertionError(f"group did not settle: {grp(h).members}")


# -- the reconciliation walkthrough (Kafka's testReconciliationProcess) -------


def test_reconciliation_process(h: EngineHarness) -> None:
    stable_pair(h)
    now = h.now_ms

    # b joins: group epoch 3, new target. Everything b should get is still owned by a or c,
    # so b moves to epoch 3 with nothing, waiting in UNRELEASED_PARTITIONS.
    r = h.heartbeat(join_range("b"))
    assert (r.member_id, r.member_epoch, r.assignment) == ("b", 3, {})
    assert (grp(h).group_epoch, grp(h).assignment_epoch) == (3, 3)
    assert grp(h).target == {
        "a": parts({0, 1}, {0}),
        "b": parts({2, 3}, {1}),
        "c": parts({4, 5}, {2}),
    }
    assert_member(h, "b", UNRELEASED, 3, 0, {})
    assert grp(h).state() is GroupState.RECONCILING

    # a heartbeats: it stays at epoch 2 and must first revoke foo-2 and bar-1. The response
    # lists what it keeps; a rebalance timer guards the revocation.
    r = h.heartbeat(beat(GROUP, "a", 2))
    assert (r.member_epoch, r.assignment) == (2, parts({0, 1}, {0}))
    assert_member(h, "a", UNREVOKED, 2, 2, parts({0, 1}, {0}), pending=parts({2}, {1}))
    assert h.rebalances[(GROUP, "a")] == (now + 300_000, 2)

    # c heartbeats: same, it must revoke foo-3.
    r = h.heartbeat(beat(GROUP, "c", 2))
    assert (r.member_epoch, r.assignment) == (2, parts({4, 5}, {2}))
    assert_member(h, "c", UNREVOKED, 2, 2, parts({4, 5}, {2}), pending=parts({3}))

    # b heartbeats: still nothing released; only its previous epoch moves on.
    r = h.heartbeat(beat(GROUP, "b", 3))
    assert (r.member_epoch, r.assignment) == (3, None)
    assert list(h.last_records) == [CurrentAssignmentRecord("b", UNRELEASED, 3, 3, {}, {})]

    # a acknowledges its revocation by listing what it still owns: STABLE at epoch 3.
    r = h.heartbeat(beat(GROUP, "a", 2, parts({0, 1}, {0})))
    assert (r.member_epoch, r.assignment) == (3, None)
    assert_member(h, "a", STABLE, 3, 2, parts({0, 1}, {0}))
    assert (GROUP, "a") not in h.rebalances
    assert grp(h).state() is GroupState.RECONCILING

    # c heartbeats without acknowledging: nothing happens.
    r = h.heartbeat(beat(GROUP, "c", 2))
    assert (r.member_epoch, r.assignment) == (2, None)
    assert h.last_records == ()
    assert mem(h, "c").state is UNREVOKED

    # b heartbeats: it gets foo-2 and bar-1, released by a, and keeps waiting for foo-3.
    r = h.heartbeat(beat(GROUP, "b", 3))
    assert (r.member_epoch, r.assignment) == (3, parts({2}, {1}))
    assert_member(h, "b", UNRELEASED, 3, 3, parts({2}, {1}))

    # b heartbeats again: c still holds foo-3, nothing changes.
    r = h.heartbeat(beat(GROUP, "b", 3, parts({2}, {1})))
    assert (r.member_epoch, r.assignment) == (3, None)
    assert h.last_records == ()

    # c acknowledges: STABLE at epoch 3.
    r = h.heartbeat(beat(GROUP, "c", 2, parts({4, 5}, {2})))
    assert (r.member_epoch, r.assignment) == (3, None)
    assert_member(h, "c", STABLE, 3, 2, parts({4, 5}, {2}))
    assert grp(h).state() is GroupState.RECONCILING

    # b heartbeats: it gets foo-3 and is STABLE; so is the group.
    r = h.heartbeat(beat(GROUP, "b", 3, parts({2}, {1})))
    assert (r.member_epoch, r.assignment) == (3, parts({2, 3}, {1}))
    assert_member(h, "b", STABLE, 3, 3, parts({2, 3}, {1}))
    assert grp(h).state() is GroupState.STABLE
    assert {grp(h).partition_epoch(t, p) for t, ps in ALL.items() for p in ps} == {3}


def test_group_states_empty_and_assigning(h: EngineHarness) -> None:
    stable_pair(h)

    h.heartbeat(beat(GROUP, "a", -1))
    assert (grp(h).group_epoch, grp(h).assignment_epoch) == (3, 2)
    assert grp(h).state() is GroupState.ASSIGNING

    h.heartbeat(beat(GROUP, "c", -1))
    assert grp(h).members == {}
    assert grp(h).state() is GroupState.EMPTY


# -- group epoch bumps -------------------------------------------------------


def test_new_member_bumps_group_epoch(h: EngineHarness) -> None:
    h.heartbeat(join_range("a"))
    assert grp(h).group_epoch == 1
    h.heartbeat(join_range("c"))
    assert grp(h).group_epoch == 2


def test_join_with_empty_member_id_gets_a_generated_one(h: EngineHarness) -> None:
    r = h.heartbeat(join_range(""))

    assert r.member_id
    assert list(grp(h).members) == [r.member_id]
    assert (r.member_epoch, r.assignment) == (1, ALL)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"subscribed_topic_names": ("foo",)}, id="names"),
        pytest.param({"subscribed_topic_regex": "ba.*"}, id="regex"),
    ],
)
def test_subscription_change_bumps_group_epoch(h: EngineHarness, change: dict[str, Any]) -> None:
    stable_pair(h)

    h.heartbeat(beat(GROUP, "a", 2, **change))

    assert (grp(h).group_epoch, grp(h).assignment_epoch) == (3, 3)
    assert any(isinstance(r, GroupMetadataRecord) and r.group_epoch == 3 for r in h.last_records)


def test_leave_bumps_group_epoch_and_defers_the_target(h: EngineHarness) -> None:
    stable_pair(h)
    metadata_hash = grp(h).metadata_hash

    r = h.heartbeat(beat(GROUP, "a", -1))

    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == ("a", -1, 0, None)
    assert h.last_records == (
        CurrentAssignmentTombstone("a"),
        TargetAssignmentMemberTombstone("a"),
        MemberMetadataTombstone("a"),
        GroupMetadataRecord(3, metadata_hash, "consumer"),
    )
    assert list(grp(h).members) == ["c"]
    assert (GROUP, "a") not in h.sessions
    # The next heartbeat of any member computes the target for epoch 3.
    r = h.heartbeat(beat(GROUP, "c", 2))
    assert (r.member_epoch, r.assignment) == (3, ALL)
    assert grp(h).assignment_epoch == 3


def test_session_timeout_fences_member_and_bumps_group_epoch(h: EngineHarness) -> None:
    stable_pair(h)
    h.advance(40_000)
    h.heartbeat(beat(GROUP, "c", 2))

    assert h.advance(5_000) == [(GROUP, "a")]

    assert list(grp(h).members) == ["c"]
    assert grp(h).group_epoch == 3


def revoking_a(h: EngineHarness, rebalance_timeout_ms: int) -> None:
    """The stable pair plus b: a is left UNREVOKED_PARTITIONS at epoch 2 (group epoch 3)."""
    stable_pair(h)
    h.heartbeat(beat(GROUP, "a", 2, rebalance_timeout_ms=rebalance_timeout_ms))
    h.heartbeat(join_range("b"))
    h.heartbeat(beat(GROUP, "a", 2))
    assert mem(h, "a").state is UNREVOKED
    assert grp(h).group_epoch == 3


def test_rebalance_timeout_fences_member_still_revoking(h: EngineHarness) -> None:
    revoking_a(h, rebalance_timeout_ms=5_000)

    assert h.advance(4_999) == []
    assert h.advance(1) == [(GROUP, "a")]

    assert "a" not in grp(h).members
    assert grp(h).group_epoch == 4


def test_rebalance_timeout_is_cancelled_once_revoked(h: EngineHarness) -> None:
    revoking_a(h, rebalance_timeout_ms=5_000)
    h.heartbeat(beat(GROUP, "a", 2, parts({0, 1}, {0})))
    assert (GROUP, "a") not in h.rebalances

    assert h.advance(5_000) == []
    assert grp(h).group_epoch == 3


def test_rebalance_timeout_fences_only_at_scheduled_epoch_and_while_unrevoked(h: EngineHarness) -> None:
    revoking_a(h, rebalance_timeout_ms=5_000)
    ctx = h.ctx()
    assert not on_rebalance_timeout(grp(h), "a", 1, ctx).response
    assert not on_rebalance_timeout(grp(h), "nobody", 2, ctx).response
    fenced = on_rebalance_timeout(grp(h), "a", 2, ctx)
    assert fenced.response
    assert fenced.records[-1] == GroupMetadataRecord(4, grp(h).metadata_hash, "consumer")

    # Once a has revoked, it is STABLE at epoch 3: a timer for epoch 2 or 3 fences nothing.
    h.heartbeat(beat(GROUP, "a", 2, parts({0, 1}, {0})))
    assert mem(h, "a").state is STABLE
    assert not on_rebalance_timeout(grp(h), "a", 2, h.ctx()).response
    result = on_rebalance_timeout(grp(h), "a", 3, h.ctx())
    assert (result.response, result.records) == (False, ())


@pytest.mark.parametrize(
    ("change", "bumped"),
    [
        pytest.param(lambda h: h.grow_topic("foo", 8), True, id="subscribed-topic-grown"),
        pytest.param(lambda h: h.delete_topic("bar"), True, id="subscribed-topic-deleted"),
        pytest.param(lambda h: h.create_topic("baz", 2), False, id="other-topic-created"),
    ],
)
def test_topic_changes_bump_subscribed_groups(
    h: EngineHarness, change: Callable[[EngineHarness], object], bumped: bool
) -> None:
    stable_pair(h)

    change(h)

    assert grp(h).group_epoch == (3 if bumped else 2)
    assert grp(h).assignment_epoch == 2


def test_a_refresh_again_bumps_nothing_and_arms_the_target_of_a_group_ahead_of_it(h: EngineHarness) -> None:
    """A refresh is tried until it is known stored: one whose bump was stored, its answer
    lost, finds the metadata current. It bumps nothing, but the group's target must still
    come, its members idle or not."""
    stable_pair(h)
    h.grow_topic("foo", 8)
    group = grp(h)
    assert group.group_epoch == 3 and group.assignment_epoch == 2

    again = refresh_metadata(group, h.ctx())
    assert (again.response, again.records) == (False, ())
    assert [type(t) for t in again.timers] == [ScheduleAssignment]

    h.advance(h.config.assignment_interval_ms)  # the assignment timer fires
    assert grp(h).assignment_epoch == 3
    assert refresh_metadata(grp(h), h.ctx()) == Result(False)


def test_grown_topic_is_assigned_on_next_heartbeats(h: EngineHarness) -> None:
    stable_pair(h)
    h.grow_topic("foo", 8)

    settle(h, "a", "c")

    assert mem(h, "a").assigned == parts({0, 1, 2, 3}, {0, 1})
    assert mem(h, "c").assigned == parts({4, 5, 6, 7}, {2})
    assert (mem(h, "a").member_epoch, mem(h, "c").member_epoch) == (3, 3)


# -- heartbeats that change nothing -----------------------------------------


def test_plain_heartbeat_changes_nothing(h: EngineHarness) -> None:
    stable_pair(h)
    before = snapshot(h)

    r = h.heartbeat(beat(GROUP, "a", 2))

    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == ("a", 2, 5_000, None)
    assert r.session_timeout_ms == 45_000
    assert h.last_records == ()
    assert snapshot(h) == before


@pytest.mark.parametrize(
    ("fields", "full"),
    [
        pytest.param({}, False, id="nothing-sent"),
        pytest.param(
            {"rebalance_timeout_ms": 300_000, "subscribed_topic_names": ("foo", "bar")}, False, id="no-owned"
        ),
        pytest.param(
            {"rebalance_timeout_ms": 300_000, "owned_topic_partitions": owned(parts({0, 1, 2}, {0, 1}))},
            False,
            id="no-names",
        ),
        pytest.param(
            {
                "rebalance_timeout_ms": -1,
                "subscribed_topic_names": ("bar", "foo"),
                "owned_topic_partitions": (),
            },
            False,
            id="timeout-unchanged",
        ),
        pytest.param(
            {
                "rebalance_timeout_ms": 300_000,
                "subscribed_topic_names": ("foo", "bar"),
                "owned_topic_partitions": owned(parts({0, 1, 2}, {0, 1})),
            },
            True,
            id="full",
        ),
    ],
)
def test_assignment_is_sent_only_on_full_requests_or_changes(
    h: EngineHarness, fields: dict[str, object], full: bool
) -> None:
    stable_pair(h)

    r = h.heartbeat(replace(beat(GROUP, "a", 2), **fields))  # type: ignore[arg-type]

    assert r.assignment == (parts({0, 1, 2}, {0, 1}) if full else None)
    assert h.last_records == ()


# -- request validation ------------------------------------------------------

LONG_ID = "x" * 256


def _join(**fields: object) -> Callable[[], ConsumerGroupHeartbeat]:
    return lambda: replace(join_range("n"), **fields)  # type: ignore[arg-type]


def _beat(**fields: object) -> Callable[[], ConsumerGroupHeartbeat]:
    return lambda: replace(beat(GROUP, "a", 2), **fields)  # type: ignore[arg-type]


def _owning(*entries: OwnedTopicPartitions) -> Callable[[], ConsumerGroupHeartbeat]:
    return _beat(owned_topic_partitions=entries)


VALIDATION_CASES = [
    ("group-id-empty", _join(group_id=""), "GroupId can't be empty."),
    ("group-id-blank", _join(group_id=" \t"), "GroupId can't be empty."),
    ("group-id-too-long", _join(group_id=LONG_ID), "GroupId is longer than 255 characters (256)."),
    ("instance-id-empty", _join(instance_id=""), "InstanceId can't be empty."),
    ("rack-id-empty", _join(rack_id=""), "RackId can't be empty."),
    ("member-id-empty", _beat(member_id=""), "MemberId can't be empty."),
    ("member-id-empty-on-leave", _beat(member_id="", member_epoch=-1), "MemberId can't be empty."),
    ("member-id-too-long", _join(member_id=LONG_ID), "MemberId is longer than 255 characters (256)."),
    ("instance-id-too-long", _join(instance_id=LONG_ID), "InstanceId is longer than 255 characters (256)."),
    ("rack-id-too-long", _join(rack_id=LONG_ID), "RackId is longer than 255 characters (256)."),
    ("client-id-too-long", _join(client_id=LONG_ID), "ClientId is longer than 255 characters (256)."),
    (
        "server-assignor-too-long",
        _join(server_assignor=LONG_ID),
        "ServerAssignor is longer than 255 characters (256).",
    ),
    (
        "join-without-rebalance-timeout",
        _join(rebalance_timeout_ms=None),
        "RebalanceTimeoutMs must be provided in first request.",
    ),
    (
        "join-with-rebalance-timeout-unchanged",
        _join(rebalance_timeout_ms=-1),
        "RebalanceTimeoutMs must be provided in first request.",
    ),
    (
        "join-without-owned",
        _join(owned_topic_partitions=None),
        "TopicPartitions must be empty when (re-)joining.",
    ),
    (
        "join-owning-partitions",
        _join(owned_topic_partitions=owned(parts({0}))),
        "TopicPartitions must be empty when (re-)joining.",
    ),
    (
        "join-without-subscription",
        _join(subscribed_topic_names=None),
        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
    ),
    ("static-leave-without-instance-id", _beat(member_epoch=-2), "InstanceId can't be null."),
    ("epoch-below-minus-two", _beat(member_epoch=-3), "MemberEpoch is invalid."),
    (
        "negative-rebalance-timeout",
        _beat(rebalance_timeout_ms=-2),
        "RebalanceTimeoutMs must be -1 (unchanged) or a non-negative number of milliseconds, got -2.",
    ),
    (
        "too-many-topic-names",
        _beat(subscribed_topic_names=tuple(f"t{i}" for i in range(10_001))),
        "SubscribedTopicNames has 10001 names; at most 10000 are allowed.",
    ),
    (
        "empty-topic-name",
        _beat(subscribed_topic_names=("foo", "")),
        "SubscribedTopicNames contains an empty topic name.",
    ),
    (
        "topic-name-too-long",
        _beat(subscribed_topic_names=("x" * 250,)),
        "SubscribedTopicNames contains a name longer than 249 characters.",
    ),
    (
        "regex-too-long",
        _beat(subscribed_topic_regex="x" * 1001),
        "SubscribedTopicRegex is longer than 1000 characters (1001).",
    ),
    (
        "owned-without-topic",
        _owning(OwnedTopicPartitions("", "", (0,))),
        "TopicPartitions entries must name a topic_id or a topic_name.",
    ),
    (
        "owned-topic-id-too-long",
        _owning(OwnedTopicPartitions(LONG_ID, "", (0,))),
        "TopicPartitions.topic_id is longer than 255 characters (256).",
    ),
    (
        "owned-topic-name-too-long",
        _owning(OwnedTopicPartitions("", "x" * 250, (0,))),
        "TopicPartitions.topic_name is longer than 249 characters.",
    ),
    (
        "owned-negative-partition",
        _owning(OwnedTopicPartitions(FOO, "", (0, -1))),
        "TopicPartitions contains a negative partition (-1) for topic foo-id.",
    ),
    (
        "owned-negative-partition-by-name",
        _owning(OwnedTopicPartitions("", "foo", (-5,))),
        "TopicPartitions contains a negative partition (-5) for topic foo.",
    ),
    (
        "owned-too-many-partitions",
        _owning(OwnedTopicPartitions(FOO, "", (0,)), OwnedTopicPartitions(BAR, "", tuple(range(1_000_000)))),
        "TopicPartitions lists 1000001 partitions; at most 1000000.",
    ),
    # Several rules broken at once: the first one in Kafka's order is reported.
    ("order-group-id-first", _join(group_id="", instance_id="", rack_id=""), "GroupId can't be empty."),
    ("order-instance-id-before-rack-id", _join(instance_id="", rack_id=""), "InstanceId can't be empty."),
    (
        "order-rebalance-timeout-before-owned",
        _join(rebalance_timeout_ms=None, owned_topic_partitions=None, subscribed_topic_names=None),
        "RebalanceTimeoutMs must be provided in first request.",
    ),
    (
        "order-owned-before-subscription",
        _join(owned_topic_partitions=None, subscribed_topic_names=None),
        "TopicPartitions must be empty when (re-)joining.",
    ),
]


@pytest.mark.parametrize(
    ("make_request", "message"),
    [pytest.param(make, message, id=case) for case, make, message in VALIDATION_CASES],
)
def test_invalid_request_is_rejected_and_changes_nothing(
    h: EngineHarness, make_request: Callable[[], ConsumerGroupHeartbeat], message: str
) -> None:
    stable_pair(h)

    assert_rejected(h, make_request(), InvalidRequest, ErrorCode.INVALID_REQUEST, message)


def test_unsupported_server_assignor() -> None:
    h = harness(GroupConfig(assignors={"range": RangeAssignor()}))

    assert_rejected(
        h,
        join(GROUP, "a", ["foo"], server_assignor="bar"),
        UnsupportedAssignor,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor bar is not supported. Supported assignors: range.",
    )
    assert GROUP not in h.groups


def test_unsupported_server_assignor_lists_every_configured_one(h: EngineHarness) -> None:
    stable_pair(h)

    assert_rejected(
        h,
        beat(GROUP, "a", 2, server_assignor="sticky"),
        UnsupportedAssignor,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range, leader.",
    )


RE2_SYNTAX = (
    "Regexes use RE2 syntax, which has no backreferences or lookaround assertions "
    "(https://github.com/google/re2/wiki/Syntax)."
)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        pytest.param("foo(", "missing ): foo(", id="unclosed-group"),
        pytest.param("[a-", "missing ]: [a-", id="unclosed-class"),
        pytest.param("*", "no argument for repetition operator: *", id="bare-star"),
        # Valid for Python's `re`, which compiled regexes before RE2 did; RE2 has none of them.
        pytest.param("(foo)-\\1", "invalid escape sequence: \\1", id="backreference"),
        pytest.param("(?=foo)fo.*", "invalid perl operator: (?=", id="lookahead"),
        pytest.param("(?<!x)foo", "invalid perl operator: (?<!", id="lookbehind"),
        pytest.param("foo\\Z", "invalid escape sequence: \\Z", id="python-end-anchor"),
    ],
)
def test_invalid_regular_expression(h: EngineHarness, pattern: str, reason: str) -> None:
    stable_pair(h)

    assert_rejected(
        h,
        beat(GROUP, "a", 2, subscribed_topic_regex=pattern),
        InvalidRegularExpression,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}. {RE2_SYNTAX}",
    )


def test_regular_expression_over_the_memory_budget_is_refused(h: EngineHarness) -> None:
    stable_pair(h)
    pattern = "\\p{L}{100}"  # 100 copies of every Unicode letter: far over RE2's 1 MiB budget

    assert_rejected(
        h,
        beat(GROUP, "a", 2, subscribed_topic_regex=pattern),
        InvalidRegularExpression,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: its compiled program "
        "exceeds the 1 MiB memory budget; use fewer or smaller counted repetitions ({n}) and narrower "
        "character classes.",
    )


# -- member epoch validation -------------------------------------------------


def test_greater_member_epoch_is_fenced(h: EngineHarness) -> None:
    stable_pair(h)

    assert_rejected(
        h,
        beat(GROUP, "a", 3),
        FencedMemberEpoch,
        ErrorCode.FENCED_MEMBER_EPOCH,
        "The consumer group member has a greater member epoch (3) than the one known by the group "
        "coordinator (2). The member must abandon all its partitions and rejoin.",
    )


def test_previous_epoch_with_owned_subset_is_accepted(h: EngineHarness) -> None:
    # a is at epoch 2 (previous 1) and lost the response that moved it there: it retries with
    # epoch 1 and partitions it is still allowed to own, in a full request.
    stable_pair(h)
    full = {"rebalance_timeout_ms": 300_000, "subscribed_topic_names": ("foo", "bar")}

    r = h.heartbeat(beat(GROUP, "a", 1, parts({0, 1}), **full))

    assert (r.member_epoch, r.assignment) == (2, parts({0, 1, 2}, {0, 1}))
    assert h.last_records == ()


def test_previous_epoch_owning_exactly_the_assignment_is_accepted(h: EngineHarness) -> None:
    stable_pair(h)

    r = h.heartbeat(beat(GROUP, "a", 1, parts({0, 1, 2}, {0, 1})))

    assert (r.member_epoch, r.assignment) == (2, None)


def test_a_second_lost_answer_fences_though_the_coordinator_is_one_epoch_ahead(h: EngineHarness) -> None:
    # KIP-848 forgives one lost answer, not two. a is at epoch 2 (previous 1) and lost that
    # answer; b joins, so a must give up foo-2 and bar-1. a's retry at epoch 1 is accepted and
    # written (revoking, still epoch 2), which moves its previous epoch on to 2, as Kafka's
    # updateMemberEpoch does. Its answer is lost too: the next retry at epoch 1 is fenced.
    stable_pair(h)
    h.heartbeat(join_range("b"))
    owned_at_1 = parts({0, 1, 2}, {0, 1})

    r = h.heartbeat(beat(GROUP, "a", 1, owned_at_1))

    assert r.member_epoch == 2
    assert_member(h, "a", UNREVOKED, 2, 2, parts({0, 1}, {0}), pending=parts({2}, {1}))
    assert_rejected(
        h,
        beat(GROUP, "a", 1, parts({0, 1}, {0})),
        FencedMemberEpoch,
        ErrorCode.FENCED_MEMBER_EPOCH,
        "The consumer group member has a smaller member epoch (1) than the one known by the group "
        "coordinator (2). The member must abandon all its partitions and rejoin.",
    )


@pytest.mark.parametrize(
    ("member_id", "epoch", "owned_now"),
    [
        pytest.param("a", 1, None, id="previous-epoch-without-owned"),
        pytest.param("a", 1, parts({0, 1, 2, 3}, {0, 1}), id="previous-epoch-owning-more"),
        pytest.param("a", 1, parts(baz={0}), id="previous-epoch-owning-unknown-topic"),
        pytest.param("c", 1, parts({3}), id="not-the-previous-epoch"),
    ],
)
def test_smaller_member_epoch_is_fenced(
    h: EngineHarness, member_id: str, epoch: int, owned_now: Assignment | None
) -> None:
    stable_pair(h)

    assert_rejected(
        h,
        beat(GROUP, member_id, epoch, owned_now),
        FencedMemberEpoch,
        ErrorCode.FENCED_MEMBER_EPOCH,
        f"The consumer group member has a smaller member epoch ({epoch}) than the one known by the group "
        "coordinator (2). The member must abandon all its partitions and rejoin.",
    )


def test_rejoin_with_epoch_zero_while_stable(h: EngineHarness) -> None:
    # KAFKA-19233: a member that believes it was fenced rejoins with its own id.
    stable_pair(h)

    r = h.heartbeat(join_range("a"))

    assert (r.member_epoch, r.assignment) == (2, parts({0, 1, 2}, {0, 1}))
    assert h.last_records == ()
    assert grp(h).group_epoch == 2


def test_rejoin_with_epoch_zero_while_unrevoked_partitions(h: EngineHarness) -> None:
    h.heartbeat(join_range("a"))
    h.heartbeat(join_range("c"))
    h.heartbeat(beat(GROUP, "a", 1))
    assert mem(h, "a").state is UNREVOKED

    # Rejoining owning nothing acknowledges the revocation.
    r = h.heartbeat(join_range("a"))

    assert (r.member_epoch, r.assignment) == (2, parts({0, 1, 2}, {0, 1}))
    assert_member(h, "a", STABLE, 2, 1, parts({0, 1, 2}, {0, 1}))
    assert grp(h).group_epoch == 2


def test_rejoin_with_epoch_zero_while_unreleased_partitions(h: EngineHarness) -> None:
    h.heartbeat(join_range("a"))
    h.heartbeat(join_range("c"))
    h.heartbeat(beat(GROUP, "a", 1))
    h.heartbeat(beat(GROUP, "a", 1, parts({0, 1, 2}, {0, 1})))
    assert_member(h, "c", UNRELEASED, 2, 0, {})

    r = h.heartbeat(join_range("c"))

    assert (r.member_epoch, r.assignment) == (2, parts({3, 4, 5}, {2}))
    assert_member(h, "c", STABLE, 2, 2, parts({3, 4, 5}, {2}))
    assert grp(h).group_epoch == 2


# -- static membership -------------------------------------------------------


def static_group(h: EngineHarness) -> None:
    """Static member s1 (instance i1) and dynamic member z, STABLE at group epoch 2."""
    h.heartbeat(join_range("s1", instance_id="i1"))
    h.heartbeat(join_range("z"))
    settle(h, "s1", "z")
    assert grp(h).group_epoch == 2
    assert_member(h, "s1", STABLE, 2, 1, parts({0, 1, 2}, {0, 1}))


def static_leave(member_id: str, instance_id: str) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=GROUP, member_id=member_id, member_epoch=-2, instance_id=instance_id
    )


def test_static_member_joins_with_instance_id(h: EngineHarness) -> None:
    static_group(h)

    by_instance = grp(h).member_by_instance_id("i1")
    assert by_instance is not None
    assert (by_instance.member_id, by_instance.instance_id) == ("s1", "i1")


def test_static_member_temporary_leave_keeps_assignment_without_bump(h: EngineHarness) -> None:
    static_group(h)

    r = h.heartbeat(static_leave("s1", "i1"))

    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == ("s1", -2, 0, None)
    assert h.last_records == (CurrentAssignmentRecord("s1", STABLE, -2, 1, parts({0, 1, 2}, {0, 1}), {}),)
    assert grp(h).group_epoch == 2
    assert_member(h, "s1", STABLE, -2, 1, parts({0, 1, 2}, {0, 1}))
    # The session timer keeps running: the instance must come back in time.
    assert (GROUP, "s1") in h.sessions


def test_static_member_rejoins_with_new_member_id_and_gets_its_partitions_back(h: EngineHarness) -> None:
    static_group(h)
    h.heartbeat(static_leave("s1", "i1"))

    r = h.heartbeat(join_range("s2", instance_id="i1"))

    assert (r.member_id, r.member_epoch, r.assignment) == ("s2", 2, parts({0, 1, 2}, {0, 1}))
    assert h.last_records[:3] == (
        CurrentAssignmentTombstone("s1"),
        TargetAssignmentMemberTombstone("s1"),
        MemberMetadataTombstone("s1"),
    )
    assert grp(h).group_epoch == 2
    assert sorted(grp(h).members) == ["s2", "z"]
    assert_member(h, "s2", STABLE, 2, 0, parts({0, 1, 2}, {0, 1}))
    assert grp(h).target["s2"] == parts({0, 1, 2}, {0, 1})
    assert grp(h).member_by_instance_id("i1") == mem(h, "s2")
    assert (GROUP, "s1") not in h.sessions
    assert grp(h).state() is GroupState.STABLE


def test_static_member_rejoin_with_new_subscription_bumps_group_epoch(h: EngineHarness) -> None:
    static_group(h)
    h.heartbeat(static_leave("s1", "i1"))

    h.heartbeat(join_range("s2", ["foo"], instance_id="i1"))

    assert grp(h).group_epoch == 3
    assert grp(h).target["s2"] == parts({0, 1, 2})


def test_static_member_cannot_be_replaced_before_it_leaves(h: EngineHarness) -> None:
    static_group(h)

    assert_rejected(
        h,
        join_range("s2", instance_id="i1"),
        UnreleasedInstanceId,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        "Static member s1 with instance id i1 is not released and cannot be replaced by member s2.",
    )


def test_heartbeat_with_instance_id_of_another_member_is_fenced(h: EngineHarness) -> None:
    static_group(h)

    assert_rejected(
        h,
        beat(GROUP, "z", 2, instance_id="i1"),
        FencedInstanceId,
        ErrorCode.FENCED_INSTANCE_ID,
        "Static member z with instance id i1 was fenced by member s1.",
    )


@pytest.mark.parametrize("epoch", [2, -1, -2])
def test_heartbeat_with_unknown_instance_id(h: EngineHarness, epoch: int) -> None:
    static_group(h)

    assert_rejected(
        h,
        beat(GROUP, "s1", epoch, instance_id="i9"),
        UnknownMemberId,
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Instance id i9 is unknown.",
    )


def test_static_member_leaving_for_good_bumps_group_epoch(h: EngineHarness) -> None:
    static_group(h)

    r = h.heartbeat(beat(GROUP, "s1", -1, instance_id="i1"))

    assert r.member_epoch == -1
    assert sorted(grp(h).members) == ["z"]
    assert grp(h).member_by_instance_id("i1") is None
    assert grp(h).group_epoch == 3


def test_session_expiry_removes_static_member_that_left_temporarily(h: EngineHarness) -> None:
    h.heartbeat(join_range("s1", instance_id="i1"))
    h.heartbeat(static_leave("s1", "i1"))

    assert h.advance(45_000) == [(GROUP, "s1")]

    assert grp(h).members == {}
    assert grp(h).group_epoch == 2
    assert grp(h).state() is GroupState.EMPTY


# -- groups, members and limits ---------------------------------------------


@pytest.mark.parametrize("epoch", [1, -1])
def test_unknown_group(h: EngineHarness, epoch: int) -> None:
    assert_rejected(
        h, beat("nope", "a", epoch), GroupIdNotFound, ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found."
    )
    assert "nope" not in h.groups


@pytest.mark.parametrize("epoch", [1, -1])
def test_unknown_member(h: EngineHarness, epoch: int) -> None:
    stable_pair(h)

    assert_rejected(
        h,
        beat(GROUP, "zz", epoch),
        UnknownMemberId,
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Member zz is not a member of group g.",
    )


@pytest.mark.parametrize("member_id", ["b", ""])
def test_max_group_size_rejects_new_members_only(member_id: str) -> None:
    h = harness(GroupConfig(max_group_size=2))
    stable_pair(h)

    assert_rejected(
        h,
        join_range(member_id),
        GroupMaxSizeReached,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        "The consumer group has reached its maximum capacity of 2 members.",
    )
    # Existing members are unaffected, even rejoining.
    assert h.heartbeat(beat(GROUP, "a", 2)).member_epoch == 2
    assert h.heartbeat(join_range("c")).member_epoch == 2
    # Once a member left, there is room again.
    h.heartbeat(beat(GROUP, "a", -1))
    assert h.heartbeat(join_range(member_id)).member_epoch == 4


def test_static_member_replacement_does_not_count_against_max_group_size() -> None:
    # Regroup lets the new incarnation of a static member in: it takes the old one's place.
    # (Kafka's throwIfConsumerGroupIsFull would refuse it, as its member id is unknown.)
    h = harness(GroupConfig(max_group_size=2))
    static_group(h)
    h.heartbeat(static_leave("s1", "i1"))

    assert h.heartbeat(join_range("s2", instance_id="i1")).member_epoch == 2


def test_delete_group_only_when_empty(h: EngineHarness) -> None:
    stable_pair(h)
    with pytest.raises(NonEmptyGroup) as raised:
        delete_group(grp(h))
    assert raised.value.code is ErrorCode.NON_EMPTY_GROUP
    assert raised.value.message == "Group g is not empty: it has 2 members."

    h.heartbeat(beat(GROUP, "a", -1))
    h.heartbeat(beat(GROUP, "c", -1))
    h.apply(GROUP, delete_group(grp(h)))

    assert h.last_records == (GroupTombstone(),)
    assert GROUP not in h.groups


# -- assignor selection ------------------------------------------------------


@dataclass
class SpyAssignor:
    """Range, noting its name in a shared log each time it runs."""

    name: str
    log: list[str] = field(default_factory=list)

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        self.log.append(self.name)
        return RangeAssignor().assign(spec)


def spied_harness() -> tuple[EngineHarness, list[str]]:
    log: list[str] = []
    config = GroupConfig(assignors={"first": SpyAssignor("first", log), "second": SpyAssignor("second", log)})
    return harness(config), log


def test_default_assignor_when_no_member_names_one() -> None:
    h, log = spied_harness()

    h.heartbeat(join(GROUP, "a", ["foo"]))

    assert log == ["first"]


def test_most_common_server_assignor_is_used() -> None:
    h, log = spied_harness()

    h.heartbeat(join(GROUP, "a", ["foo"], server_assignor="second"))
    h.heartbeat(join(GROUP, "b", ["foo"]))
    h.heartbeat(join(GROUP, "c", ["foo"], server_assignor="first"))  # a tie goes to the first configured
    h.heartbeat(join(GROUP, "d", ["foo"], server_assignor="second"))
    h.heartbeat(beat(GROUP, "a", mem(h, "a").member_epoch, server_assignor="first"))
    h.heartbeat(beat(GROUP, "b", -1))  # the epoch bump: the next heartbeat recomputes the target
    h.heartbeat(beat(GROUP, "c", mem(h, "c").member_epoch))

    assert log == ["second", "second", "first", "second", "first"]


# -- subscriptions -----------------------------------------------------------


def test_regex_subscription_matches_existing_and_later_created_topics(h: EngineHarness) -> None:
    h.create_topic("foobar", 2)
    h.create_topic("barfoo", 1)

    r = h.heartbeat(join(GROUP, "a", [], subscribed_topic_regex="foo.*"))

    # A full match: barfoo does not match, although it contains foo.
    assert r.assignment == parts(range(6), foobar=range(2))
    h.create_topic("foo2", 3)
    assert grp(h).group_epoch == 2
    r = h.heartbeat(beat(GROUP, "a", 1))
    assert (r.member_epoch, r.assignment) == (2, parts(range(6), foobar=range(2), foo2=range(3)))


def test_regex_matching_no_topic_assigns_nothing(h: EngineHarness) -> None:
    r = h.heartbeat(join(GROUP, "a", [], subscribed_topic_regex="fo"))

    assert (r.member_epoch, r.assignment) == (1, {})


def test_unknown_topic_names_match_nothing_until_created(h: EngineHarness) -> None:
    r = h.heartbeat(join(GROUP, "a", ["foo", "baz"]))
    assert r.assignment == parts(range(6))

    h.create_topic("baz", 2)
    assert grp(h).group_epoch == 2
    r = h.heartbeat(beat(GROUP, "a", 1))

    assert (r.member_epoch, r.assignment) == (2, parts(range(6), baz=range(2)))


def test_unsubscribing_while_revoking_drops_the_topic_at_once(h: EngineHarness) -> None:
    # KAFKA-19431: a is still revoking foo-2 and bar-1 when it unsubscribes from bar. Its
    # assignment loses bar immediately, without waiting for the revocation round to end.
    stable_pair(h)
    h.heartbeat(join_range("b"))
    h.heartbeat(beat(GROUP, "a", 2))
    assert_member(h, "a", UNREVOKED, 2, 2, parts({0, 1}, {0}), pending=parts({2}, {1}))

    r = h.heartbeat(beat(GROUP, "a", 2, subscribed_topic_names=("foo",)))

    assert grp(h).group_epoch == 4
    assert (r.member_epoch, r.assignment) == (2, parts({0, 1}))
    assert_member(h, "a", UNREVOKED, 2, 2, parts({0, 1}), pending=parts({2}, {0, 1}))

    r = h.heartbeat(beat(GROUP, "a", 2, parts({0, 1})))
    assert (r.member_epoch, r.assignment) == (4, None)
    assert_member(h, "a", STABLE, 4, 2, parts({0, 1}))


@dataclass
class OrderSpy:
    """Range, noting the order of the members of every spec it is given."""

    name: str = "range"
    orders: list[list[str]] = field(default_factory=list)

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        self.orders.append(list(spec.members))
        return RangeAssignor().assign(spec)


def test_assignors_get_the_members_in_id_order_through_joins_leaves_and_static_replacement() -> None:
    spy = OrderSpy()
    h = harness(GroupConfig(assignors={"range": spy}))
    for member_id in ("m3", "m1", "m4", "m2"):
        h.heartbeat(join_range(member_id, instance_id="i1" if member_id == "m3" else None))
    h.heartbeat(static_leave("m3", "i1"))  # a temporary leave: no new target
    # m0 replaces m3 with another subscription: one computation without m3, with m0.
    h.heartbeat(join_range("m0", ["foo"], instance_id="i1"))
    h.heartbeat(beat(GROUP, "m4", -1))  # a leave: the next heartbeat computes the target
    h.heartbeat(beat(GROUP, "m1", mem(h, "m1").member_epoch))

    assert spy.orders == [
        ["m3"],
        ["m1", "m3"],
        ["m1", "m3", "m4"],
        ["m1", "m2", "m3", "m4"],
        ["m0", "m1", "m2", "m4"],
        ["m0", "m1", "m2"],
    ]
    assert list(grp(h).member_ids_in_order()) == ["m0", "m1", "m2"]
