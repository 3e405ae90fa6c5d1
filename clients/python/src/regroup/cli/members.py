"""`regroup members drain`: take a member out of service without losing work."""

from __future__ import annotations

import time
from typing import Any

import click

from regroup.cli.connection import Connection
from regroup.cli.exits import OK, REFUSED, TIMEOUT
from regroup.cli.options import Session, common
from regroup.cli.output import emit_json, error_json, error_name, line, warn
from regroup.v1 import admin_pb2, common_pb2

DRAINED = "DRAINED"
#: How often --wait asks DescribeGroups: a revocation takes a heartbeat or less.
POLL_S = 0.25


@click.group()
def members() -> None:
    """Act on one member of a group."""


@members.command()
@common
@click.argument("group_id", metavar="GROUP")
@click.option("--member-id", metavar="ID", help="The member, by member id.")
@click.option(
    "--instance-id", metavar="ID", help="The member, by instance id (a static member, e.g. its pod name)."
)
@click.option("--wait", is_flag=True, help="Return once the member owns nothing (DRAINED) or has left.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="How long --wait waits; then exit code 4.",
)
@click.option("--undrain", is_flag=True, help="Put the member back in service instead.")
def drain(
    session: Session,
    group_id: str,
    member_id: str | None,
    instance_id: str | None,
    wait: bool,
    timeout: float,
    undrain: bool,
) -> int:
    """Drain a member: it stays in the group and keeps heartbeating, but gets nothing.

    Its partitions are revoked first and reassigned to the others with the usual
    protocol, so no work is lost or done twice. `groups describe` shows it DRAINING, then
    DRAINED once it owns nothing. Drained by instance id, a static member stays drained
    when it rejoins. --undrain puts it back.

    With --wait, returns once the member is DRAINED or has left the group (exit 0), or
    after --timeout seconds with exit code 4: a Kubernetes preStop hook (docs/cli.md).

    \b
    Examples:
      regroup members drain orders-consumers --member-id worker-7
      regroup members drain orders-consumers --instance-id "$POD_NAME" --wait --timeout 60
      regroup members drain orders-consumers --member-id worker-7 --undrain
    """
    if (member_id is None) == (instance_id is None):
        raise click.UsageError("name the member with exactly one of --member-id and --instance-id")
    if wait and undrain:
        raise click.UsageError("--wait waits for a drain; --undrain has nothing to wait for")
    request = admin_pb2.DrainMemberRequest(
        group_id=group_id, member_id=member_id or "", instance_id=instance_id or "", undrain=undrain
    )
    deadline = time.monotonic() + timeout
    with session.connect() as conn:
        response = conn.group_admin("DrainMember", group_id, request)
        result: dict[str, Any] = {
            "group_id": group_id,
            "member_id": response.member_id or member_id,
            "instance_id": instance_id,
            "drain_state": response.drain_state or None,
            "group_epoch": response.group_epoch if response.error_code == common_pb2.NONE else None,
            "left": False,
            "error": error_json(response.error_code, response.error_message),
        }
        if response.error_code != common_pb2.NONE:
            if session.as_json:
                emit_json(result)
            warn(f"group {group_id}: {error_name(response.error_code)}: {response.error_message}")
            return REFUSED
        who = result["member_id"]
        if not session.as_json:
            state = response.drain_state or "in service"
            line(f"Member {who} of group {group_id} is {state} (group epoch {response.group_epoch}).")
        code = OK
        if wait and response.drain_state != DRAINED:
            code = _wait(conn, session, result, deadline)
    if session.as_json:
        emit_json(result)
    return code


def _wait(conn: Connection, session: Session, result: dict[str, Any], deadline: float) -> int:
    """Polls DescribeGroups until the member is DRAINED or gone; updates `result`."""
    group_id, member_id, instance_id = result["group_id"], result["member_id"], result["instance_id"]
    while True:
        (group,) = conn.describe_groups([group_id])
        member = None
        if group.error_code == common_pb2.NONE:
            # By instance id when given: a static member that rejoined may have a new member id.
            member = next(
                (
                    m
                    for m in group.members
                    if (instance_id and m.instance_id == instance_id)
                    or (not instance_id and m.member_id == member_id)
                ),
                None,
            )
        if member is None:
            result.update(left=True, drain_state=None)
            if not session.as_json:
                line(f"Member {member_id} has left group {group_id}.")
            return OK
        result.update(
            member_id=member.member_id, drain_state=member.drain_state or None, group_epoch=group.group_epoch
        )
        if member.drain_state == DRAINED:
            if not session.as_json:
                line(f"Member {member.member_id} of group {group_id} is DRAINED: it owns nothing.")
            return OK
        if time.monotonic() >= deadline:
            state = member.drain_state or "in service"
            warn(f"member {member.member_id} of group {group_id} is still {state} after --timeout")
            return TIMEOUT
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
