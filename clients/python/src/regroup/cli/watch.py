"""`regroup groups watch`: a live view of a group (GroupAdmin.WatchGroup), redrawn in
place at each change: members, epochs, what each owns and is owed, drains, the last events."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from regroup.cli.connection import Connection
from regroup.cli.describe import group_json, members_table, summary
from regroup.cli.events import event_json, events_table
from regroup.cli.exits import OK, UNREACHABLE, CliError
from regroup.cli.groups import groups
from regroup.cli.options import Session, common
from regroup.cli.output import error_json, error_name
from regroup.client.routing import find_blocking
from regroup.v1 import admin_pb2, common_pb2

#: Times a stream that ended (its replica stopped, the group moved) is opened again in a row.
REOPENS = 10


@dataclass
class View:
    """What the screen shows, from the stream's messages."""

    group_id: str
    keep: int
    description: admin_pb2.DescribedGroup | None = None
    events: list[admin_pb2.GroupEvent] = field(default_factory=list)
    status: str = "connecting"

    def apply(self, message: admin_pb2.WatchGroupResponse) -> None:
        if message.HasField("description"):
            self.description = message.description
        seen = {e.sequence for e in self.events}
        # A reopened stream sends its history again: the sequence tells what is new.
        self.events += [e for e in message.events if e.sequence not in seen]
        self.events.sort(key=lambda e: e.sequence)
        del self.events[: -self.keep or len(self.events)]

    def render(self) -> RenderableType:
        parts: list[RenderableType] = []
        group = self.description
        if group is None:
            parts.append(Text(f"Group {self.group_id}: waiting for the coordinator"))
        elif group.error_code == common_pb2.GROUP_ID_NOT_FOUND:
            parts.append(Text(f"Group {self.group_id} does not exist (yet): waiting for it"))
        elif group.error_code != common_pb2.NONE:
            parts.append(
                Text(f"Group {self.group_id}: {error_name(group.error_code)}: {group.error_message}")
            )
        else:
            parts += [Text(summary(group), style="bold"), Text("")]
            parts.append(members_table(group) if group.members else Text("(no members)"))
        parts.append(Text(""))
        if self.events:
            parts.append(Text(f"Last {len(self.events)} events (newest last)", style="bold"))
            parts.append(events_table(self.events, short_times=True))
        else:
            parts.append(Text("(no events yet)"))
        parts.append(Text(""))
        now = time.strftime("%H:%M:%SZ", time.gmtime())  # UTC, as the events' times
        parts.append(Text(f"{self.status}, updated {now}; Ctrl-C to stop", style="dim"))
        return Group(*parts)


def _messages(
    conn: Connection, request: admin_pb2.WatchGroupRequest, view: View
) -> Iterator[admin_pb2.WatchGroupResponse]:
    """The stream's messages, following the group's coordinator, and opening the stream
    again when it ends or its replica goes away after it served (a failover, the group
    moving): the view keeps going. A coordinator that cannot be reached at all is an error."""
    address: str | None = None
    failures = 0
    served = False
    last_sequence = 0
    while True:
        stream = conn.watch(request, address)
        view.status = f"watching through {stream.address}"
        moved = False
        try:
            for message in stream:
                description = message.description
                if message.HasField("description") and description.error_code == common_pb2.NOT_COORDINATOR:
                    # Served by the group's owner only: go there (asking where, when not told).
                    address = description.coordinator_address or _find(conn, request.group_id)
                    view.status = f"following the coordinator to {address}"
                    moved = True
                    break
                failures, served = 0, True
                # A reopened stream sends its last events again (those missed in between too):
                # the sequence, increasing within the group, tells which are new.
                fresh = [e for e in message.events if e.sequence > last_sequence]
                if len(fresh) != len(message.events):
                    del message.events[:]
                    message.events.extend(fresh)
                last_sequence = max([last_sequence, *(e.sequence for e in fresh)])
                yield message
        except CliError as err:
            if err.code != UNREACHABLE or not served:
                raise
        finally:
            stream.cancel()
        failures += 1
        if failures > REOPENS:
            raise CliError(UNREACHABLE, f"the stream of group {request.group_id} keeps ending; giving up")
        if not moved:
            # The replica ended the stream (it stopped, or handed the group over) or is gone:
            # the bootstrap address knows the group's owner now.
            address = None
        if not moved or address is None:
            view.status = "the stream ended: reopening"
            time.sleep(min(2.0, 0.1 * 2**failures))


def _find(conn: Connection, group_id: str) -> str | None:
    find_blocking(conn.router, group_id, conn.target.timeout)
    return conn.router.address(group_id)


@groups.command()
@common
@click.argument("group_id", metavar="GROUP")
@click.option(
    "--history", type=click.IntRange(0, 1000), default=20, show_default=True, help="Events to show."
)
def watch(session: Session, group_id: str, history: int) -> int:
    """A live view of a group, redrawn as it changes; Ctrl-C stops it (exit 0).

    Shows the group's state and epochs, each member's epoch, state, drain state, what it
    owns, what its target is and what it still has to revoke, and the last events. The
    group need not exist yet: the view waits for it. With --json, prints each change as
    one JSON object per line ({"group": ..., "events": [...]}) instead.

    \b
    Examples:
      regroup groups watch orders-consumers
      regroup groups watch orders-consumers --json | jq -c '.events[]'
    """
    request = admin_pb2.WatchGroupRequest(group_id=group_id, history=history, descriptions=True)
    view = View(group_id, keep=history)
    with session.connect() as conn:
        try:
            if session.as_json:
                for message in _messages(conn, request, view):
                    print(json.dumps(_message_json(message)), flush=True)
            else:
                _live(conn, request, view)
        except KeyboardInterrupt:
            return OK
    return OK


def _live(conn: Connection, request: admin_pb2.WatchGroupRequest, view: View) -> None:
    console = Console(highlight=False)
    if not console.is_terminal:
        # Nowhere to redraw in place: each change is printed after the last.
        for message in _messages(conn, request, view):
            view.apply(message)
            console.print(view.render())
            console.print()
        return
    with Live(view.render(), console=console, auto_refresh=False, redirect_stderr=False) as live:
        for message in _messages(conn, request, view):
            view.apply(message)
            live.update(view.render(), refresh=True)


def _message_json(message: admin_pb2.WatchGroupResponse) -> dict[str, object]:
    group = None
    if message.HasField("description"):
        group = group_json(message.description, None)
        if message.description.error_code != common_pb2.NONE:
            group["error"] = error_json(message.description.error_code, message.description.error_message)
    return {"group": group, "events": [event_json(e) for e in message.events]}
