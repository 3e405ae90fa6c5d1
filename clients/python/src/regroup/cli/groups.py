"""`regroup groups list | describe | delete` (history and watch: events.py, watch.py)."""

from __future__ import annotations

import click
from rich.console import RenderableType

from regroup.cli.describe import CONNECT, group_json, members_table, partition_rows, partitions_table, summary
from regroup.cli.exits import OK, REFUSED
from regroup.cli.options import Session, common
from regroup.cli.output import emit_json, error_json, error_name, line, show, table, warn
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2


@click.group()
def groups() -> None:
    """List, describe, follow and delete groups."""


@groups.command("list")
@common
@click.option(
    "--state",
    "states",
    multiple=True,
    help="Only groups in this state (Empty, Assigning, Reconciling, Stable); repeatable.",
)
@click.option(
    "--type", "types", multiple=True, help="Only groups of this type (consumer, connect); repeatable."
)
def list_groups(session: Session, states: tuple[str, ...], types: tuple[str, ...]) -> int:
    """Every group, by id, with its state, epochs and member count.

    \b
    Examples:
      regroup groups list
      regroup groups list --state Stable --json
    """
    request = admin_pb2.ListGroupsRequest(states_filter=states, types_filter=types)
    with session.connect() as conn:
        found = conn.pages("ListGroups", request, lambda r: r.groups)
    if session.as_json:
        emit_json(
            {
                "groups": [
                    {
                        "group_id": g.group_id,
                        "state": g.group_state,
                        "type": g.group_type,
                        "group_epoch": g.group_epoch,
                        "assignment_epoch": g.assignment_epoch,
                        "members": g.members,
                    }
                    for g in found
                ]
            }
        )
        return OK
    headers = ("GROUP", "TYPE", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "MEMBERS")
    rows = [
        (g.group_id, g.group_type, g.group_state, g.group_epoch, g.assignment_epoch, g.members) for g in found
    ]
    show(table(headers, rows))
    return OK


@groups.command()
@common
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
def describe(session: Session, group_ids: tuple[str, ...]) -> int:
    """Partitions, committed offsets, members and their assignments.

    A row per partition of the group: its committed offset (fetched as an admin), the
    member that owns it (id, client id, host, member epoch) and its STATE: ASSIGNED (the
    member owns it), REVOKING (the member was asked to give it up and has not yet),
    ASSIGNING (the target gives it to the member, which takes it once its previous owner
    released it) or UNASSIGNED (a committed offset, no owner). Then a row per member: its
    epoch and state, DRAIN (DRAINING or DRAINED after `regroup members drain`), and what it
    OWNS, what its TARGET is and what it is still REVOKING.

    Exit code 2 when a group was refused (GROUP_ID_NOT_FOUND): the others are printed.

    \b
    Examples:
      regroup groups describe orders-consumers
      regroup groups describe g1 g2 --json
    """
    with session.connect() as conn:
        described = conn.describe_groups(group_ids)
        offsets: dict[str, coordinator_pb2.OffsetFetchResponse | None] = {}
        for group in described:
            offsets[group.group_id] = None
            if group.error_code == common_pb2.NONE and group.group_type != CONNECT:
                fetched = conn.fetch_offsets(group.group_id)
                if fetched.error_code == common_pb2.NONE:
                    offsets[group.group_id] = fetched
                else:
                    warn(
                        f"group {group.group_id}: offsets not fetched: "
                        f"{error_name(fetched.error_code)}: {fetched.error_message}"
                    )
    failed = [g for g in described if g.error_code != common_pb2.NONE]
    if session.as_json:
        emit_json({"groups": [group_json(g, offsets.get(g.group_id)) for g in described]})
    else:
        first = True
        for group in described:
            if group.error_code != common_pb2.NONE:
                continue
            if not first:
                line("")
            first = False
            renderables: list[RenderableType] = [summary(group)]
            rows = partition_rows(group, offsets.get(group.group_id))
            if rows:
                renderables += ["", partitions_table(rows)]
            if group.members:
                renderables += ["", members_table(group)]
            if group.connectors:
                connectors = sorted((c.name, c.tasks) for c in group.connectors)
                renderables += ["", table(("CONNECTOR", "TASKS"), connectors)]
            show(*renderables)
    for group in failed:
        warn(f"group {group.group_id}: {error_name(group.error_code)}: {group.error_message}")
    return REFUSED if failed else OK


@groups.command()
@common
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
def delete(session: Session, group_ids: tuple[str, ...]) -> int:
    """Delete empty groups (their committed offsets go with them).

    A group with members is refused with NON_EMPTY_GROUP (exit code 2); the other groups
    named are still deleted.

    \b
    Examples:
      regroup groups delete old-consumers
      regroup groups delete g1 g2 --json
    """
    with session.connect() as conn:
        results = conn.delete_groups(group_ids)
    failed = [r for r in results if r.error_code != common_pb2.NONE]
    if session.as_json:
        emit_json(
            {
                "groups": [
                    {"group_id": r.group_id, "error": error_json(r.error_code, r.error_message)}
                    for r in results
                ]
            }
        )
    else:
        for r in results:
            if r.error_code == common_pb2.NONE:
                line(f"Deleted group {r.group_id}.")
    for r in failed:
        warn(f"group {r.group_id}: {error_name(r.error_code)}: {r.error_message}")
    return REFUSED if failed else OK
