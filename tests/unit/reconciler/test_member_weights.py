"""Issue 24's heartbeat fields in the engine: capacity, replicas and
require_co_partitioning (validated, merged, stored as metadata, bumping the group
epoch when they change what an assignor weighs), and the co-partitioning checks."""

from __future__ import annotations

import pytest

from regroup.reconciler import ErrorCode, Group
from regroup.reconciler.errors import InvalidRequest
from regroup.reconciler.model import ClientAssignor
from regroup.reconciler.placement import co_partitioning, local_count
from regroup.reconciler.records import GroupMetadataRecord, MemberMetadataRecord
from tests.support.engine import EngineHarness, beat, join

G = "g"


@pytest.fixture
def h() -> EngineHarness:
    h = EngineHarness()
    h.create_topic("clicks", 6)
    h.create_topic("views", 6)
    h.create_topic("orders", 4)
    return h


def grp(h: EngineHarness) -> Group:
    return h.groups[G]


def refused(h: EngineHarness, req: object, message: str) -> None:
    before = (grp(h).group_epoch, dict(grp(h).members)) if G in h.groups else None
    with pytest.raises(InvalidRequest) as raised:
        h.heartbeat(req)  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.INVALID_REQUEST
    assert raised.value.message == message
    assert ((grp(h).group_epoch, dict(grp(h).members)) if G in h.groups else None) == before


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("capacity", 0, "Capacity must be between 1 and 1000, got 0."),
        ("capacity", 1001, "Capacity must be between 1 and 1000, got 1001."),
        ("replicas", 0, "Replicas must be between 1 and 16, got 0."),
        ("replicas", 17, "Replicas must be between 1 and 16, got 17."),
    ],
)
def test_out_of_range_weights_are_refused_and_store_nothing(
    h: EngineHarness, field: str, value: int, message: str
) -> None:
    refused(h, join(G, "a", ["clicks"], **{field: value}), message)
    h.heartbeat(join(G, "a", ["clicks"]))
    refused(h, beat(G, "a", 1, **{field: value}), message)


def test_weights_are_member_metadata_and_a_change_bumps_the_group_epoch(h: EngineHarness) -> None:
    h.heartbeat(join(G, "a", ["clicks"], capacity=3, replicas=2))
    a = grp(h).members["a"]
    assert (a.metadata.capacity, a.metadata.replicas, grp(h).group_epoch) == (3, 2, 1)

    # Unchanged values, sent again: nothing written.
    h.heartbeat(beat(G, "a", 1, capacity=3, replicas=2))
    assert h.last_records == ()

    for change, epoch in (({"capacity": 5}, 2), ({"replicas": 1}, 3), ({"rack_id": "r1"}, 4)):
        h.heartbeat(beat(G, "a", grp(h).members["a"].member_epoch, **change))
        kinds = {type(r) for r in h.last_records}
        assert {MemberMetadataRecord, GroupMetadataRecord} <= kinds, change
        assert grp(h).group_epoch == epoch
    assert grp(h).members["a"].metadata.capacity == 5


def test_requiring_co_partitioning_needs_the_range_assignor(h: EngineHarness) -> None:
    refused(
        h,
        join(G, "a", ["clicks", "views"], require_co_partitioning=True),
        "Member a requires co-partitioning, but the group's assignor is uniform; only range co-partitions.",
    )
    h.heartbeat(join(G, "a", ["clicks", "views"], server_assignor="range", require_co_partitioning=True))
    report = co_partitioning(grp(h).members.values(), h.image, "range")
    assert [tuple(h.image.name_of(t) for t in ids) for ids in report.topic_sets] == [("clicks", "views")]
    assert report.error == ""


def test_topics_of_different_sizes_or_subscribers_cannot_be_co_partitioned(h: EngineHarness) -> None:
    refused(
        h,
        join(G, "a", ["clicks", "orders"], server_assignor="range", require_co_partitioning=True),
        "Member a requires co-partitioning, but topic clicks has 6 partitions and topic orders has 4.",
    )
    h.heartbeat(join(G, "b", ["clicks"], server_assignor="range"))
    refused(
        h,
        join(G, "a", ["clicks", "views"], server_assignor="range", require_co_partitioning=True),
        "Member a requires co-partitioning, but topics clicks and views have different subscribers.",
    )
    # Without the requirement the same join is accepted; setting it later is checked then.
    h.heartbeat(join(G, "a", ["clicks", "views"], server_assignor="range"))
    refused(
        h,
        beat(G, "a", grp(h).members["a"].member_epoch, require_co_partitioning=True),
        "Member a requires co-partitioning, but topics clicks and views have different subscribers.",
    )
    assert not grp(h).members["a"].metadata.require_co_partitioning


def test_a_later_topic_change_that_breaks_co_partitioning_is_reported(h: EngineHarness) -> None:
    h.heartbeat(join(G, "a", ["clicks", "views"], server_assignor="range", require_co_partitioning=True))
    h.grow_topic("views", 8)
    report = co_partitioning(grp(h).members.values(), h.image, "range")
    assert report.topic_sets == ()
    assert report.error == (
        "Member a requires co-partitioning, but topic clicks has 6 partitions and topic views has 8."
    )


def test_client_side_groups_cannot_require_co_partitioning(h: EngineHarness) -> None:
    refused(
        h,
        join(
            G,
            "a",
            ["clicks", "views"],
            client_assignors=(ClientAssignor("mine", 0, 0),),
            require_co_partitioning=True,
        ),
        "RequireCoPartitioning needs a server-side assignor: the coordinator cannot promise what a "
        "client-side assignor does.",
    )


def test_rack_local_partitions_count_only_same_rack_partitions() -> None:
    from regroup.reconciler.topics import Topic, TopicsImage

    image = TopicsImage([Topic("t-id", "t", 4, ("r1", "r2", "r1", "r2")), Topic("u-id", "u", 2)])
    assignment = {"t-id": frozenset({0, 1, 2}), "u-id": frozenset({0, 1})}
    assert local_count("r1", assignment, image) == 2
    assert local_count("r2", assignment, image) == 1
    assert local_count(None, assignment, image) == 0


def test_rack_local_partitions_count_a_copy_by_its_topic_racks() -> None:
    from regroup.reconciler.topics import Topic, TopicsImage

    image = TopicsImage([Topic("t-id", "t", 2, ("r1", "r2"))])
    assert local_count("r1", {"t-id#1": frozenset({0, 1})}, image) == 1
