"""The wire-to-domain mapping of heartbeats, whose plain case has a fast path."""

from __future__ import annotations

from typing import Any

import pytest

from regroup.reconciler import ConsumerGroupHeartbeat, GroupConfig, OwnedTopicPartitions
from regroup.reconciler.model import ClientAssignor
from regroup.server.mapping import group_pb, heartbeat_from_pb
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.engine import joined

Request = coordinator_pb2.ConsumerGroupHeartbeatRequest


@pytest.mark.parametrize(
    "fields",
    [
        {"group_id": "g", "member_id": "m", "member_epoch": 7},
        {"group_id": "g", "member_id": "m"},  # epoch 0 is not on the wire
        {},
    ],
)
def test_a_plain_heartbeat_maps_to_one_with_every_optional_field_absent(fields: dict[str, Any]) -> None:
    mapped = heartbeat_from_pb(Request(**fields), "10.0.0.1")

    assert mapped == ConsumerGroupHeartbeat(
        fields.get("group_id", ""),
        fields.get("member_id", ""),
        fields.get("member_epoch", 0),
        client_host="10.0.0.1",
    )


@pytest.mark.parametrize(
    ("field", "wire", "expected"),
    [
        ("instance_id", "", ""),  # present but empty is not absent
        ("rack_id", "r1", "r1"),
        ("rebalance_timeout_ms", 0, 0),
        ("subscribed_topic_names", common_pb2.StringList(values=[]), ()),
        ("subscribed_topic_regex", "", ""),
        ("server_assignor", "range", "range"),
        (
            "topic_partitions",
            common_pb2.TopicPartitionsList(topics=[common_pb2.TopicPartitions(topic_id="t", partitions=[1])]),
            (OwnedTopicPartitions("t", "", (1,)),),
        ),
        ("client_id", "c", "c"),
        (
            "client_assignors",
            common_pb2.ClientAssignorList(assignors=[common_pb2.ClientAssignor(name="sticky")]),
            (
                ClientAssignor(
                    name="sticky", minimum_version=0, maximum_version=0, reason=0, version=0, metadata=b""
                ),
            ),
        ),
    ],
)
def test_every_optional_field_that_is_present_is_mapped(field: str, wire: Any, expected: Any) -> None:
    request = Request(group_id="g", member_id="m", member_epoch=3)
    if isinstance(wire, str | int):
        setattr(request, field, wire)
    else:
        getattr(request, field).CopyFrom(wire)

    mapped = heartbeat_from_pb(request, "")

    domain_field = {"topic_partitions": "owned_topic_partitions"}.get(field, field)
    assert getattr(mapped, domain_field) == expected
    assert (mapped.group_id, mapped.member_id, mapped.member_epoch) == ("g", "m", 3)


def test_describe_sets_rack_locality_when_only_the_members_have_racks() -> None:
    """Members with racks on a topic without: 0 of 0 rack-local, best 0 (it was left unset)."""
    group, image = joined(["r1", "r2"], ())
    described = group_pb(group, image, GroupConfig())
    assert described.HasField("rack_locality")
    locality = described.rack_locality
    assert (locality.rack_local_partitions, locality.partitions_with_rack, locality.best_achievable) == (
        0,
        0,
        0,
    )
    plain, image = joined([None, None], ())
    assert not group_pb(plain, image, GroupConfig()).HasField("rack_locality")
