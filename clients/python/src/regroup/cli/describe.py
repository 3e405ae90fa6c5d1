"""A described group as kafka-consumer-groups --describe users expect it: a row per
partition (committed offset, owner, its epoch, state), and a row per member (what it owns,
what its target gives it, what it still has to revoke, whether it is draining).

`regroup groups describe` and the live view of `regroup groups watch` both draw with these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from regroup.cli.output import (
    NONE,
    error_json,
    partitions_json,
    partitions_text,
    table,
    tasks_json,
    tasks_text,
)
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2

CONNECT = "connect"

#: A partition's state in the rows: owned by the member; being revoked from it; given to it by
#: the target but not yet taken (its previous owner has not released it); or owned by nobody
#: (a committed offset only).
ASSIGNED, REVOKING, ASSIGNING, UNASSIGNED = "ASSIGNED", "REVOKING", "ASSIGNING", "UNASSIGNED"
_PRECEDENCE = {ASSIGNED: 0, REVOKING: 1, ASSIGNING: 2, UNASSIGNED: 3}

PARTITION_HEADERS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "COMMITTED-OFFSET",
    "MEMBER-ID",
    "CLIENT-ID",
    "HOST",
    "MEMBER-EPOCH",
    "STATE",
)


@dataclass(frozen=True)
class PartitionRow:
    group_id: str
    topic: str
    partition: int
    committed_offset: int | None
    member: admin_pb2.DescribedMember | None
    state: str

    def cells(self) -> list[Any]:
        m = self.member
        return [
            self.group_id,
            self.topic,
            self.partition,
            self.committed_offset,
            m and m.member_id,
            m and m.client_id,
            m and m.client_host,
            m and m.member_epoch,
            self.state,
        ]

    def json(self) -> dict[str, Any]:
        m = self.member
        return {
            "group_id": self.group_id,
            "topic": self.topic,
            "partition": self.partition,
            "committed_offset": self.committed_offset,
            "member_id": m.member_id if m else None,
            "client_id": (m.client_id or None) if m else None,
            "host": (m.client_host or None) if m else None,
            "member_epoch": m.member_epoch if m else None,
            "state": self.state,
        }


def partition_rows(
    group: admin_pb2.DescribedGroup, offsets: coordinator_pb2.OffsetFetchResponse | None
) -> list[PartitionRow]:
    """One row per partition that has an owner, a pending owner or a committed offset; in a
    redundant group (replicas > 1), one per copy holder, without the committed offset (each
    copy has its own: `regroup offsets show`)."""
    if group.replicas > 1:
        return _copy_rows(group)
    found: dict[tuple[str, int], tuple[str, admin_pb2.DescribedMember | None]] = {}

    def note(assignment: common_pb2.Assignment, member: admin_pb2.DescribedMember, state: str) -> None:
        for tp in assignment.topic_partitions:
            for p in tp.partitions:
                key = (tp.topic_name or tp.topic_id, p)
                if key not in found or _PRECEDENCE[state] < _PRECEDENCE[found[key][0]]:
                    found[key] = (state, member)

    for member in group.members:
        note(member.assignment, member, ASSIGNED)
        note(member.pending_revocation, member, REVOKING)
        note(member.target_assignment, member, ASSIGNING)
    committed: dict[tuple[str, int], int] = {}
    if offsets is not None:
        for topic in offsets.topics:
            for p in topic.partitions:
                if p.offset >= 0:
                    committed[(topic.name or topic.topic_id, p.partition)] = p.offset
    for key in committed:
        found.setdefault(key, (UNASSIGNED, None))
    return [
        PartitionRow(group.group_id, topic, partition, committed.get((topic, partition)), member, state)
        for (topic, partition), (state, member) in sorted(found.items())
    ]


def _copy_rows(group: admin_pb2.DescribedGroup) -> list[PartitionRow]:
    found: dict[tuple[str, int, str], tuple[str, admin_pb2.DescribedMember]] = {}
    for member in group.members:
        for assignment, state in (
            (member.assignment, ASSIGNED),
            (member.pending_revocation, REVOKING),
            (member.target_assignment, ASSIGNING),
        ):
            for tp in assignment.topic_partitions:
                for p in tp.partitions:
                    key = (tp.topic_name or tp.topic_id, p, member.member_id)
                    if key not in found or _PRECEDENCE[state] < _PRECEDENCE[found[key][0]]:
                        found[key] = (state, member)
    return [
        PartitionRow(group.group_id, topic, partition, None, member, state)
        for (topic, partition, _), (state, member) in sorted(found.items())
    ]


def partitions_table(rows: list[PartitionRow]) -> Table:
    return table(PARTITION_HEADERS, (row.cells() for row in rows))


def summary(group: admin_pb2.DescribedGroup) -> str:
    """One line: the group's state, epochs, assignor and size."""
    words = [
        f"Group {group.group_id} ({group.group_type or 'consumer'}): {group.group_state}",
        f"group epoch {group.group_epoch}",
        f"assignment epoch {group.assignment_epoch}",
    ]
    if group.assignor_name:
        words.append(f"assignor {group.assignor_name}")
    words.append(f"{len(group.members)} member{'' if len(group.members) == 1 else 's'}")
    if group.replicas > 1:
        words.append(f"{group.replicas} copies of each partition ({group.effective_replicas} now)")
    if group.HasField("rack_locality"):
        r = group.rack_locality
        best = "" if r.best_achievable < 0 else f", best {r.best_achievable}"
        words.append(f"rack-local {r.rack_local_partitions} of {r.partitions_with_rack}{best}")
    text = ", ".join(words)
    if group.computing_member_id:
        text += f"; {group.computing_member_id} computes the next assignment"
    if group.assignment_error:
        text += f"; assignment error: {group.assignment_error}"
    if group.co_partitioning.error:
        text += f"; co-partitioning: {group.co_partitioning.error}"
    return text


def _drain(member: admin_pb2.DescribedMember) -> Text:
    if not member.drain_state:
        return Text(NONE)
    return Text(member.drain_state, style="yellow" if member.drain_state == "DRAINING" else "cyan")


def _state(member: admin_pb2.DescribedMember) -> Text:
    return Text(member.member_state or NONE, style="" if member.member_state in ("", "STABLE") else "yellow")


def members_table(group: admin_pb2.DescribedGroup) -> Table:
    """Per member: epoch, state, drain state, and what it owns, is targeted with and must revoke."""
    connect = group.group_type == CONNECT
    headers = ["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "EPOCH", "STATE", "DRAIN"]
    headers += ["OWNS", "TARGET", "REVOKING"]
    rows = []
    for m in sorted(group.members, key=lambda m: m.member_id):
        if connect:
            owned = [
                tasks_text(m.connect_assignment),
                tasks_text(m.connect_target_assignment),
                tasks_text(m.connect_pending_revocation),
            ]
        else:
            owned = [
                partitions_text(m.assignment),
                partitions_text(m.target_assignment),
                partitions_text(m.pending_revocation),
            ]
        rows.append(
            [m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch, _state(m), _drain(m)]
        )
        rows[-1] += owned
    return table(headers, rows)


def member_json(m: admin_pb2.DescribedMember) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id or None,
        "client_id": m.client_id or None,
        "host": m.client_host or None,
        "rack": m.rack_id or None,
        "member_epoch": m.member_epoch,
        "previous_member_epoch": m.previous_member_epoch,
        "state": m.member_state,
        "drain_state": m.drain_state or None,
        "subscribed_topics": list(m.subscribed_topic_names),
        "subscribed_regex": m.subscribed_topic_regex or None,
        "server_assignor": m.server_assignor or None,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "assignment": partitions_json(m.assignment),
        "target_assignment": partitions_json(m.target_assignment),
        "pending_revocation": partitions_json(m.pending_revocation),
        "url": m.url or None,
        "connect_assignment": tasks_json(m.connect_assignment),
        "connect_target_assignment": tasks_json(m.connect_target_assignment),
        "connect_pending_revocation": tasks_json(m.connect_pending_revocation),
    }


def group_json(
    group: admin_pb2.DescribedGroup, offsets: coordinator_pb2.OffsetFetchResponse | None
) -> dict[str, Any]:
    """The group for --json: the same keys whether or not it was found."""
    found = group.error_code == common_pb2.NONE
    return {
        "group_id": group.group_id,
        "error": error_json(group.error_code, group.error_message),
        "state": group.group_state if found else None,
        "type": (group.group_type or "consumer") if found else None,
        "group_epoch": group.group_epoch if found else None,
        "assignment_epoch": group.assignment_epoch if found else None,
        "assignor": group.assignor_name or None,
        "computing_member_id": group.computing_member_id or None,
        "assignment_error": group.assignment_error or None,
        "connectors": [{"name": c.name, "tasks": c.tasks} for c in group.connectors],
        "members": [member_json(m) for m in sorted(group.members, key=lambda m: m.member_id)],
        "partitions": [row.json() for row in partition_rows(group, offsets)] if found else [],
    }
