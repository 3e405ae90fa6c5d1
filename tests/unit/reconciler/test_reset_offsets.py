"""Resetting a group's committed offsets (GroupAdmin.ResetOffsets): the plan and its records."""

from __future__ import annotations

import pytest

from regroup.reconciler import ApiError, ErrorCode, GroupConfig
from regroup.reconciler.offsets import (
    MAX_OFFSET,
    OffsetToCommit,
    PlannedReset,
    ResetOffsets,
    ResetTopic,
    commit_offsets,
    reset_offsets,
)
from regroup.reconciler.records import OffsetCommitRecord, OffsetTombstone
from tests.support.engine import EngineHarness, join

GROUP = "g"
FOO, BAR = "foo-id", "bar-id"
UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.fixture
def h() -> EngineHarness:
    """foo (3 partitions) with offsets 10 and 20 committed on 0 and 1, bar (2) with 5 on 1."""
    h = EngineHarness(config=GroupConfig(), now_ms=1_000)
    h.create_topic("foo", 3)
    h.create_topic("bar", 2)
    offsets = [OffsetToCommit(FOO, 0, 10, "m"), OffsetToCommit(FOO, 1, 20, ""), OffsetToCommit(BAR, 1, 5, "")]
    h.apply(GROUP, commit_offsets(None, GROUP, "", -1, offsets, h.ctx()))
    h.now_ms = 2_000
    return h


def plan(h: EngineHarness, **kwargs: object) -> tuple[list[PlannedReset], bool, list[object]]:
    result = reset_offsets(h.groups.get(GROUP), ResetOffsets(GROUP, **kwargs), h.ctx())  # type: ignore[arg-type]
    return list(result.response.partitions), result.response.applied, list(result.records)


def line(name: str, partition: int, current: int, new: int) -> PlannedReset:
    return PlannedReset(name, f"{name}-id", partition, current, new)


def test_to_offset_of_a_topic_without_partitions_listed_is_every_partition(h: EngineHarness) -> None:
    partitions, applied, records = plan(h, topics=(ResetTopic(name="foo"),), to_offset=7)
    assert partitions == [line("foo", 0, 10, 7), line("foo", 1, 20, 7), line("foo", 2, -1, 7)]
    assert applied
    assert records == [OffsetCommitRecord(FOO, p, 7, "", -1, 2_000) for p in range(3)]
    h.apply(GROUP, reset_offsets(h.groups[GROUP], ResetOffsets(GROUP, (ResetTopic(name="foo"),), 7), h.ctx()))
    assert {k: c.offset for k, c in h.groups[GROUP].offsets.items()} == {
        (FOO, 0): 7,
        (FOO, 1): 7,
        (FOO, 2): 7,
        (BAR, 1): 5,
    }
    assert h.groups[GROUP].offsets[(FOO, 0)].member_epoch == -1


def test_no_topics_listed_means_every_topic_with_committed_offsets_sorted_by_name(h: EngineHarness) -> None:
    partitions, _, _ = plan(h, to_offset=0)
    assert partitions == [
        line("bar", 0, -1, 0),
        line("bar", 1, 5, 0),
        line("foo", 0, 10, 0),
        line("foo", 1, 20, 0),
        line("foo", 2, -1, 0),
    ]
    partitions, _, records = plan(h, delete=True)
    assert partitions == [line("bar", 1, 5, -1), line("foo", 0, 10, -1), line("foo", 1, 20, -1)]
    assert records == [OffsetTombstone(BAR, 1), OffsetTombstone(FOO, 0), OffsetTombstone(FOO, 1)]


def test_shift_by_moves_only_committed_offsets_and_clamps(h: EngineHarness) -> None:
    partitions, applied, records = plan(h, shift_by=-15)
    assert partitions == [line("bar", 1, 5, 0), line("foo", 0, 10, 0), line("foo", 1, 20, 5)]
    assert applied
    assert records == [
        OffsetCommitRecord(BAR, 1, 0, "", -1, 2_000),
        OffsetCommitRecord(FOO, 0, 0, "", -1, 2_000),
        OffsetCommitRecord(FOO, 1, 5, "", -1, 2_000),
    ]
    # Listed partitions without a committed offset are left as they are.
    partitions, applied, records = plan(h, topics=(ResetTopic(topic_id=FOO, partitions=(2, 1)),), shift_by=3)
    assert partitions == [line("foo", 1, 20, 23), line("foo", 2, -1, -1)]
    assert records == [OffsetCommitRecord(FOO, 1, 23, "", -1, 2_000)]
    partitions, _, _ = plan(h, topics=(ResetTopic(name="bar"),), shift_by=MAX_OFFSET)
    assert partitions == [line("bar", 1, 5, MAX_OFFSET)]


def test_delete_of_listed_partitions_tombstones_only_committed_ones(h: EngineHarness) -> None:
    partitions, applied, records = plan(h, topics=(ResetTopic(name="foo", partitions=(0, 2)),), delete=True)
    assert partitions == [line("foo", 0, 10, -1), line("foo", 2, -1, -1)]
    assert applied and records == [OffsetTombstone(FOO, 0)]
    # Nothing committed to delete: nothing to store.
    partitions, applied, records = plan(h, topics=(ResetTopic(name="foo", partitions=(2,)),), delete=True)
    assert partitions == [line("foo", 2, -1, -1)] and not applied and records == []


def test_a_dry_run_answers_the_plan_and_changes_nothing(h: EngineHarness) -> None:
    wet = plan(h, to_offset=3)
    dry = plan(h, to_offset=3, dry_run=True)
    assert dry[0] == wet[0] and dry[1:] == (False, [])


def test_unknown_topics_and_partitions_are_refused_per_entry_and_the_rest_goes_on(h: EngineHarness) -> None:
    topics = (
        ResetTopic(name="nope", partitions=(0, 1)),
        ResetTopic(name="ghost"),
        ResetTopic(topic_id="gone-id"),
        ResetTopic(name="foo", partitions=(1, 3, -1)),
        ResetTopic(topic_id=FOO, partitions=(1,)),  # foo again, by id: listed once
    )
    partitions, applied, records = plan(h, topics=topics, to_offset=1)
    assert [(p.topic_name, p.topic_id, p.partition, p.error) for p in partitions] == [
        ("", "gone-id", -1, UNKNOWN),
        ("foo", FOO, -1, UNKNOWN),
        ("foo", FOO, 1, ErrorCode.NONE),
        ("foo", FOO, 3, UNKNOWN),
        ("ghost", "", -1, UNKNOWN),
        ("nope", "", 0, UNKNOWN),
        ("nope", "", 1, UNKNOWN),
    ]
    messages = {(p.topic_name or p.topic_id, p.partition): p.message for p in partitions}
    assert messages[("nope", 0)] == "Topic nope does not exist."
    assert messages[("gone-id", -1)] == "Topic gone-id does not exist."
    assert messages[("foo", 3)] == "Partition foo-3 does not exist: foo has 3 partitions."
    assert applied and records == [OffsetCommitRecord(FOO, 1, 1, "", -1, 2_000)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "Exactly one of to_offset, shift_by and delete must be set: none was."),
        (
            {"to_offset": 1, "delete": True},
            "Exactly one of to_offset, shift_by and delete must be set, got 2.",
        ),
        ({"to_offset": -1}, "to_offset must be >= 0, got -1."),
    ],
)
def test_a_bad_request_is_refused_whole(h: EngineHarness, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ApiError) as e:
        plan(h, **kwargs)
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, message)
    with pytest.raises(ApiError) as e:
        reset_offsets(None, ResetOffsets("", delete=True), h.ctx())
    assert e.value.code is ErrorCode.INVALID_REQUEST


def test_an_unknown_group_and_a_group_with_members_are_refused(h: EngineHarness) -> None:
    with pytest.raises(ApiError) as e:
        reset_offsets(None, ResetOffsets("other", delete=True), h.ctx())
    assert (e.value.code, e.value.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group other not found.")
    h.heartbeat(join(GROUP, "m1", ["foo"]))
    for dry_run in (False, True):
        with pytest.raises(ApiError) as e:
            plan(h, delete=True, dry_run=dry_run)
        assert e.value.code is ErrorCode.NON_EMPTY_GROUP and "has 1 members" in e.value.message
