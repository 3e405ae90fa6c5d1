"""`regroup groups history`: a group's events (GroupAdmin.ListGroupEvents), and how an
event is shown, here and in the live view of `regroup groups watch`."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterable
from typing import Any

import click
from rich.table import Table

from regroup.cli.connection import Connection
from regroup.cli.exits import OK, REFUSED
from regroup.cli.groups import groups
from regroup.cli.options import Session, common
from regroup.cli.output import emit_json, error_json, error_name, line, show, table, timestamp, warn
from regroup.v1 import admin_pb2, common_pb2

_PREFIX = "GROUP_EVENT_TYPE_"
EVENT_HEADERS = ("TIME", "TYPE", "REASON", "MEMBER", "EPOCHS", "MESSAGE")


def type_name(value: int) -> str:
    """MEMBER_JOINED for GROUP_EVENT_TYPE_MEMBER_JOINED: what people and --type use."""
    try:
        return admin_pb2.GroupEventType.Name(value).removeprefix(_PREFIX)  # type: ignore[arg-type]
    except ValueError:
        return f"TYPE_{value}"


def type_value(name: str) -> admin_pb2.GroupEventType.ValueType:
    """member_joined, MEMBER_JOINED or GROUP_EVENT_TYPE_MEMBER_JOINED."""
    key = name.strip().upper().replace("-", "_")
    try:
        return admin_pb2.GroupEventType.Value(key if key.startswith(_PREFIX) else _PREFIX + key)
    except ValueError:
        known = ", ".join(n.removeprefix(_PREFIX).lower() for n in admin_pb2.GroupEventType.keys()[1:])
        raise click.BadParameter(f"unknown event type {name!r}; one of {known}") from None


def epochs(event: admin_pb2.GroupEvent) -> str:
    words = []
    bumped = event.type == admin_pb2.GROUP_EVENT_TYPE_GROUP_EPOCH_BUMPED
    if bumped or (event.previous_group_epoch and event.previous_group_epoch != event.group_epoch):
        words.append(f"group {event.previous_group_epoch}->{event.group_epoch}")
    elif event.group_epoch:
        words.append(f"group {event.group_epoch}")
    if event.member_id and event.member_epoch:  # 0: the event does not concern its epoch (a drain)
        words.append(f"member {event.member_epoch}")
    return ", ".join(words)


def events_table(events: Iterable[admin_pb2.GroupEvent], *, short_times: bool = False) -> Table:
    """short_times: the time of day only (UTC), for the live view, whose events are recent."""
    rows = [
        (
            timestamp(e.timestamp_ms)[11:] if short_times else timestamp(e.timestamp_ms),
            type_name(e.type),
            e.reason,
            e.member_id + (f" ({e.instance_id})" if e.instance_id else ""),
            epochs(e),
            e.message,
        )
        for e in events
    ]
    return table(EVENT_HEADERS, rows)


#: The event types each number concerns, as the coordinator sets them (reconciler/history.py).
#: proto3 sends 0 for the others, which --json shows as null (docs/cli.md: "a field that does
#: not apply is null"); for these types a 0 is a real 0 (a topic deleted, nothing moved).
_CONCERNS: dict[str, frozenset[int]] = {
    "previous_group_epoch": frozenset({admin_pb2.GROUP_EVENT_TYPE_GROUP_EPOCH_BUMPED}),
    "partition_count": frozenset(
        {
            admin_pb2.GROUP_EVENT_TYPE_TOPIC_CREATED,
            admin_pb2.GROUP_EVENT_TYPE_TOPIC_GROWN,
            admin_pb2.GROUP_EVENT_TYPE_TOPIC_DELETED,
            admin_pb2.GROUP_EVENT_TYPE_MEMBER_RECONCILED,
            admin_pb2.GROUP_EVENT_TYPE_OFFSETS_RESET,
        }
    ),
    "duration_ms": frozenset(
        {admin_pb2.GROUP_EVENT_TYPE_TARGET_COMPUTED, admin_pb2.GROUP_EVENT_TYPE_GROUP_STABLE}
    ),
    "partitions_moved": frozenset({admin_pb2.GROUP_EVENT_TYPE_TARGET_COMPUTED}),
}


def _concerned(e: admin_pb2.GroupEvent, key: str) -> int | None:
    value: int = getattr(e, key)
    return value if e.type in _CONCERNS[key] else None


def event_json(e: admin_pb2.GroupEvent) -> dict[str, Any]:
    return {
        "sequence": e.sequence,
        "timestamp_ms": e.timestamp_ms,
        "time": timestamp(e.timestamp_ms),
        "type": type_name(e.type),
        "reason": e.reason or None,
        "message": e.message,
        "group_epoch": e.group_epoch,
        "previous_group_epoch": _concerned(e, "previous_group_epoch"),
        "member_id": e.member_id or None,
        "instance_id": e.instance_id or None,
        # 0: the event does not concern the member's epoch (a drain), as in the table.
        "member_epoch": e.member_epoch if e.member_id and e.member_epoch else None,
        "topic_name": e.topic_name or None,
        "partition_count": _concerned(e, "partition_count"),
        "assignor": e.assignor or None,
        "duration_ms": _concerned(e, "duration_ms"),
        "partitions_moved": _concerned(e, "partitions_moved"),
    }


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def since_ms(value: str, now_ms: int | None = None) -> int:
    """--since: a duration back from now (90s, 10m, 2h, 1d), or a time (ISO 8601; UTC unless it says)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    match = _DURATION.match(value.strip())
    if match:
        return now_ms - int(float(match[1]) * _UNIT_MS[match[2]])
    try:
        moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: a duration (90s, 10m, 2h, 1d) or an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


@groups.command()
@common
@click.argument("group_id", metavar="GROUP")
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="At most this many events.",
)
@click.option(
    "--since",
    metavar="WHEN",
    help="Only events since WHEN: a duration back (10m, 2h, 1d) or an ISO 8601 time.",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TYPE",
    help="Only events of this type (member_joined, ...); repeatable.",
)
@click.option("--oldest-first", is_flag=True, help="Oldest first (default: newest first).")
def history(
    session: Session, group_id: str, limit: int, since: str | None, types: tuple[str, ...], oldest_first: bool
) -> int:
    """A group's history: each change, with its reason (newest first).

    Joins, leaves, fencing, expired sessions, epoch bumps and why, targets computed,
    members reconciled, drains and offset resets, kept by the coordinator for a while
    (REGROUP_HISTORY_MAX_EVENTS, REGROUP_HISTORY_MAX_AGE_MS), also for a deleted group.
    A group that does not exist and has no history: exit code 2 (GROUP_ID_NOT_FOUND).

    \b
    Examples:
      regroup groups history orders-consumers
      regroup groups history orders-consumers --since 10m --type member_left --type session_expired
      regroup groups history orders-consumers --limit 1000 --oldest-first --json
    """
    request = admin_pb2.ListGroupEventsRequest(
        group_id=group_id,
        limit=limit,
        oldest_first=oldest_first,
        types=[type_value(t) for t in types],
        since_ms=since_ms(since) if since else 0,
    )
    with session.connect() as conn:
        response = conn.admin("ListGroupEvents", request)
        if response.error_code == common_pb2.NONE and not response.events:
            missing = _not_found(conn, request)
            if missing is not None:
                response.error_code, response.error_message = missing.error_code, missing.error_message
    ok = response.error_code == common_pb2.NONE
    if session.as_json:
        emit_json(
            {
                "group_id": group_id,
                "error": error_json(response.error_code, response.error_message),
                "events": [event_json(e) for e in response.events],
                "more": response.more,
            }
        )
    elif ok:
        if response.events:
            show(events_table(response.events))
        else:
            line(f"No events for group {group_id}.")
        if response.more:
            line(f"(more events match: raise --limit{'' if oldest_first else ' or narrow --since'})")
    if not ok:
        warn(f"group {group_id}: {error_name(response.error_code)}: {response.error_message}")
        return REFUSED
    return OK


def _not_found(
    conn: Connection, request: admin_pb2.ListGroupEventsRequest
) -> admin_pb2.DescribedGroup | None:
    """The group's GROUP_ID_NOT_FOUND, as describe gets it, when no events came back because
    there is no such group; None when it exists, or has a history (it was deleted: its
    events are kept, and none matched the filters)."""
    (group,) = conn.describe_groups([request.group_id])
    if group.error_code != common_pb2.GROUP_ID_NOT_FOUND:
        return None
    if request.types or request.since_ms:
        unfiltered = admin_pb2.ListGroupEventsRequest(group_id=request.group_id, limit=1)
        if conn.admin("ListGroupEvents", unfiltered).events:
            return None
    return group
