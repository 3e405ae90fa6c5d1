"""`regroup offsets show | reset`: a group's committed offsets."""

from __future__ import annotations

from typing import Any

import click

from regroup.cli.exits import OK, REFUSED
from regroup.cli.options import Session, common
from regroup.cli.output import NONE, emit_json, error_json, error_name, line, show, table, timestamp, warn
from regroup.v1 import admin_pb2, common_pb2


@click.group()
def offsets() -> None:
    """Show and reset a group's committed offsets."""


@offsets.command("show")
@common
@click.argument("group_id", metavar="GROUP")
def show_offsets(session: Session, group_id: str) -> int:
    """Every committed offset of a group, with who committed it and when.

    Fetched as an admin (no member id, member epoch -1), as kafka-consumer-groups does.
    COMMITTED-EPOCH is the member epoch of the commit (-1: an admin's reset).

    \b
    Examples:
      regroup offsets show orders-consumers
      regroup offsets show orders-consumers --json
    """
    with session.connect() as conn:
        response = conn.fetch_offsets(group_id)
    if response.error_code != common_pb2.NONE:
        if session.as_json:
            emit_json(
                {
                    "group_id": group_id,
                    "error": error_json(response.error_code, response.error_message),
                    "offsets": [],
                }
            )
        warn(f"group {group_id}: {error_name(response.error_code)}: {response.error_message}")
        return REFUSED
    entries = sorted(
        ((t.name or t.topic_id, p) for t in response.topics for p in t.partitions),
        key=lambda e: (e[0], e[1].partition),
    )
    failed = [(topic, p) for topic, p in entries if p.error_code != common_pb2.NONE]
    if session.as_json:
        emit_json(
            {
                "group_id": group_id,
                "error": None,
                "offsets": [
                    {
                        "topic": topic,
                        "partition": p.partition,
                        "offset": p.offset if p.offset >= 0 else None,
                        "metadata": p.metadata or None,
                        "committed_member_epoch": p.committed_member_epoch,
                        "commit_timestamp_ms": p.commit_timestamp_ms or None,
                        "error": error_json(p.error_code, p.error_message),
                    }
                    for topic, p in entries
                ],
            }
        )
    else:
        headers = ("TOPIC", "PARTITION", "OFFSET", "COMMITTED-EPOCH", "COMMITTED-AT", "METADATA")
        rows = [
            (
                topic,
                p.partition,
                p.offset if p.offset >= 0 else NONE,
                p.committed_member_epoch,
                timestamp(p.commit_timestamp_ms),
                p.metadata,
            )
            for topic, p in entries
            if p.error_code == common_pb2.NONE
        ]
        if rows:
            show(table(headers, rows))
        else:
            line(f"Group {group_id} has no committed offsets.")
    for topic, p in failed:
        warn(f"{topic}-{p.partition}: {error_name(p.error_code)}: {p.error_message}")
    return REFUSED if failed else OK


def _topic(value: str) -> admin_pb2.ResetOffsetsRequest.Topic:
    """orders, or orders:0,3,5 (those partitions only)."""
    name, colon, rest = value.partition(":")
    if not name:
        raise click.BadParameter(f"{value!r}: expected TOPIC or TOPIC:P,P,...")
    try:
        partitions = [int(p) for p in rest.split(",") if p.strip()] if colon else []
    except ValueError:
        raise click.BadParameter(f"{value!r}: partitions are numbers, as in orders:0,3,5") from None
    if colon and not partitions:
        raise click.BadParameter(f"{value!r}: name the partitions after the colon, or leave it out")
    return admin_pb2.ResetOffsetsRequest.Topic(name=name, partitions=partitions)


@offsets.command()
@common
@click.argument("group_id", metavar="GROUP")
@click.option("--to-offset", type=click.IntRange(min=0), metavar="N", help="Set each offset to N.")
@click.option(
    "--shift-by", type=int, metavar="N", help="Move each committed offset by N (negative: back; not below 0)."
)
@click.option("--delete", "delete_", is_flag=True, help="Delete the committed offsets.")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,P...]",
    help="Only this topic (or these partitions of it); repeatable. Default: every committed topic.",
)
@click.option(
    "--dry-run",
    "mode",
    flag_value="dry-run",
    default=True,
    help="Print the plan, change nothing (the default).",
)
@click.option("--execute", "mode", flag_value="execute", help="Apply the plan.")
def reset(
    session: Session,
    group_id: str,
    to_offset: int | None,
    shift_by: int | None,
    delete_: bool,
    topics: tuple[str, ...],
    mode: str,
) -> int:
    """Reset a group's committed offsets, while it has no members.

    As kafka-consumer-groups --reset-offsets: without --execute this is a DRY RUN that
    prints the plan (each partition's current and new offset) and changes nothing; add
    --execute to apply it. Exactly one of --to-offset, --shift-by and --delete.
    A group with members is refused with NON_EMPTY_GROUP (exit code 2).

    \b
    Examples:
      regroup offsets reset orders-consumers --to-offset 0 --topic orders
      regroup offsets reset orders-consumers --shift-by -100 --topic orders:0,1 --execute
      regroup offsets reset orders-consumers --delete --execute --json
    """
    chosen = [to_offset is not None, shift_by is not None, delete_]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --to-offset, --shift-by and --delete")
    request = admin_pb2.ResetOffsetsRequest(
        group_id=group_id, topics=[_topic(t) for t in topics], dry_run=mode != "execute"
    )
    if to_offset is not None:
        request.to_offset = to_offset
    elif shift_by is not None:
        request.shift_by = shift_by
    else:
        request.delete = True
    with session.connect() as conn:
        response = conn.group_admin("ResetOffsets", group_id, request)
    return _print_reset(session, group_id, request, response)


def _print_reset(session: Session, group_id: str, request: Any, response: Any) -> int:
    parts = sorted(response.partitions, key=lambda p: (p.topic_name, p.partition))
    failed = response.error_code != common_pb2.NONE or any(p.error_code != common_pb2.NONE for p in parts)
    if session.as_json:
        emit_json(
            {
                "group_id": group_id,
                "dry_run": request.dry_run,
                "applied": response.applied,
                "error": error_json(response.error_code, response.error_message),
                "partitions": [
                    {
                        "topic": p.topic_name,
                        "partition": p.partition,
                        "current_offset": p.current_offset if p.current_offset >= 0 else None,
                        "new_offset": p.new_offset if p.new_offset >= 0 else None,
                        "error": error_json(p.error_code, p.error_message),
                    }
                    for p in parts
                ],
            }
        )
    else:
        rows = [
            (
                p.topic_name,
                p.partition,
                p.current_offset if p.current_offset >= 0 else NONE,
                p.new_offset if p.new_offset >= 0 else "(deleted)" if request.delete else NONE,
                error_name(p.error_code) if p.error_code != common_pb2.NONE else "",
            )
            for p in parts
        ]
        if rows:
            show(table(("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "ERROR"), rows))
        if response.error_code == common_pb2.NONE:
            if request.dry_run:
                line("Dry run: nothing changed. Add --execute to apply this plan.")
            elif response.applied:
                line(f"Reset {len(parts)} partition(s) of group {group_id}.")
            else:
                line("Nothing was reset.")
    if response.error_code != common_pb2.NONE:
        if response.error_code == common_pb2.NON_EMPTY_GROUP:
            warn(f"group {group_id}: NON_EMPTY_GROUP: stop its members first ({response.error_message})")
        else:
            warn(f"group {group_id}: {error_name(response.error_code)}: {response.error_message}")
    elif failed:
        warn("some partitions were refused (ERROR column)")
    if failed:
        return REFUSED
    return OK
