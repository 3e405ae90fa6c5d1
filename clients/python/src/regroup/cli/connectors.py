"""`regroup connectors put | list`: a Connect group's connectors and their task counts."""

from __future__ import annotations

import click

from regroup.cli.exits import OK, REFUSED
from regroup.cli.options import Session, common
from regroup.cli.output import emit_json, error_json, error_name, line, show, table, warn
from regroup.v1 import admin_pb2, common_pb2


@click.group()
def connectors() -> None:
    """Set and list a Connect group's connectors (Connect's config topic)."""


def _connector(value: str) -> admin_pb2.ConnectorConfig:
    name, equals, tasks = value.rpartition("=")
    if not equals or not name or not tasks.strip().isdigit():
        raise click.BadParameter(f"{value!r}: expected NAME=TASKS, as in orders-sink=4")
    return admin_pb2.ConnectorConfig(name=name, tasks=int(tasks))


@connectors.command()
@common
@click.argument("group_id", metavar="GROUP")
@click.argument("specs", metavar="NAME=TASKS...", nargs=-1)
def put(session: Session, group_id: str, specs: tuple[str, ...]) -> int:
    """Set the group's complete set of connectors: NAME=TASKS each.

    Connectors not named are removed (none named removes them all). A group that does not
    exist is created, Empty, so that connectors can be set before any worker joins; once it
    has workers, a change bumps its group epoch and they rebalance.

    \b
    Examples:
      regroup connectors put connect-cluster orders-sink=4 audit-source=1
      regroup connectors put connect-cluster orders-sink=8 --json
    """
    request = admin_pb2.PutConnectorsRequest(group_id=group_id, connectors=[_connector(s) for s in specs])
    with session.connect() as conn:
        response = conn.group_admin("PutConnectors", group_id, request)
    ok = response.error_code == common_pb2.NONE
    if session.as_json:
        emit_json(
            {
                "group_id": group_id,
                "group_epoch": response.group_epoch if ok else None,
                "error": error_json(response.error_code, response.error_message),
            }
        )
    elif ok:
        line(f"Group {group_id} has {len(specs)} connector(s) at group epoch {response.group_epoch}.")
    if not ok:
        warn(f"group {group_id}: {error_name(response.error_code)}: {response.error_message}")
        return REFUSED
    return OK


@connectors.command("list")
@common
@click.argument("group_id", metavar="GROUP")
def list_connectors(session: Session, group_id: str) -> int:
    """The group's connectors and their task counts.

    \b
    Examples:
      regroup connectors list connect-cluster
    """
    with session.connect() as conn:
        (group,) = conn.describe_groups([group_id])
    ok = group.error_code == common_pb2.NONE
    found = sorted((c.name, c.tasks) for c in group.connectors)
    if session.as_json:
        emit_json(
            {
                "group_id": group_id,
                "error": error_json(group.error_code, group.error_message),
                "connectors": [{"name": n, "tasks": t} for n, t in found],
            }
        )
    elif ok:
        if found:
            show(table(("CONNECTOR", "TASKS"), found))
        else:
            line(f"Group {group_id} has no connectors.")
    if not ok:
        warn(f"group {group_id}: {error_name(group.error_code)}: {group.error_message}")
        return REFUSED
    return OK
