"""PutConnectors in the engine: the connectors are a record of their Connect group."""

from __future__ import annotations

import pytest

from regroup.reconciler import Context, GroupConfig, TopicsImage, replay_all
from regroup.reconciler.connect import put_connectors
from regroup.reconciler.errors import GroupIdNotFound, InvalidRequest
from regroup.reconciler.model import CONNECT_GROUP_TYPE, Group
from regroup.reconciler.records import ConnectorsRecord, GroupMetadataRecord, GroupTombstone


def ctx() -> Context:
    return Context(now_ms=0, config=GroupConfig(), image=TopicsImage())


def test_put_connectors_creates_an_empty_connect_group_at_epoch_0() -> None:
    result = put_connectors(None, [("B", 1), ("A", 2)], ctx())
    assert result.response == 0
    assert result.records == (
        GroupMetadataRecord(0, 0, CONNECT_GROUP_TYPE),
        ConnectorsRecord((("A", 2), ("B", 1))),
    )
    group = replay_all(None, "c", result.records)
    assert group is not None
    assert (group.group_type, group.group_epoch, group.members, group.connectors) == (
        CONNECT_GROUP_TYPE,
        0,
        {},
        {"A": 2, "B": 1},
    )
    # Unchanged connectors write nothing; deleting the group forgets them.
    assert put_connectors(group, [("A", 2), ("B", 1)], ctx()).records == ()
    assert replay_all(group, "c", (GroupTombstone(),)) is None


def test_new_connectors_of_a_group_without_workers_bump_nothing() -> None:
    # Workers' resources are their group's connectors; with no worker nothing is
    # subscribed, so only the record changes (with workers: test_connect_groups.py).
    empty = replay_all(None, "c", put_connectors(None, [("A", 1)], ctx()).records)
    assert empty is not None
    changed = put_connectors(empty, [("A", 2)], ctx())
    assert (changed.response, changed.records) == (0, (ConnectorsRecord((("A", 2),)),))


def test_put_connectors_refuses_a_consumer_group_and_bad_connectors() -> None:
    with pytest.raises(GroupIdNotFound):
        put_connectors(Group("g"), [("A", 1)], ctx())
    with pytest.raises(InvalidRequest):
        put_connectors(None, [("A", 1), ("A", 2)], ctx())
