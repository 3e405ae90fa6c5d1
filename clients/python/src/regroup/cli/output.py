"""Printing: tables for people (rich), JSON for scripts, errors on stderr.

Tables are drawn without borders, as kafka-consumer-groups prints them, so that they
read well and still cut with awk. When stdout is not a terminal, a table is never wrapped
or cut to 80 columns: the console is made as wide as the table needs.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from regroup.v1 import common_pb2

#: What a table shows for an empty cell.
NONE = "-"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None) -> Table:
    out = Table(
        *headers,
        title=title,
        title_justify="left",
        title_style="bold",
        box=None,
        pad_edge=False,
        show_edge=False,
        header_style="bold",
    )
    for row in rows:
        out.add_row(*(cell if isinstance(cell, Text) else Text(_cell(cell)) for cell in row))
    return out


def _cell(value: Any) -> str:
    if value is None or value == "":
        return NONE
    return str(value)


def show(*renderables: RenderableType) -> None:
    """Prints to stdout: wrapped to a terminal's width, never wrapped into a pipe or a file."""
    console = Console(highlight=False)
    if not console.is_terminal:
        unbounded = console.options.update_width(100_000)
        width = max(
            [80]
            + [Measurement.get(console, unbounded, r).maximum for r in renderables if not isinstance(r, str)]
        )
        console = Console(highlight=False, width=width)
        with console.capture() as captured:
            for renderable in renderables:
                console.print(renderable, soft_wrap=isinstance(renderable, str))
        # A table pads its last column: trailing blanks only get in the way of a pipe.
        print("\n".join(text.rstrip() for text in captured.get().splitlines()), flush=True)
        return
    for renderable in renderables:
        console.print(renderable, soft_wrap=isinstance(renderable, str))


def line(text: str) -> None:
    print(text, flush=True)


def emit_json(value: Any) -> None:
    """One JSON document on stdout (keys as docs/cli.md lists them)."""
    print(json.dumps(value, indent=2), flush=True)


def warn(text: str) -> None:
    print(f"regroup: {text}", file=sys.stderr, flush=True)


def error_json(code: int, message: str) -> dict[str, Any] | None:
    """An item's error for --json: None when it has none."""
    if code == common_pb2.NONE:
        return None
    return {"code": error_name(code), "message": message}


def error_name(code: int) -> str:
    try:
        return common_pb2.ErrorCode.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return f"ERROR_{code}"


def timestamp(ms: int) -> str:
    """Wall-clock epoch milliseconds as UTC ISO 8601 (what a log line next to it says)."""
    if ms <= 0:
        return NONE
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def ranges(numbers: Iterable[int]) -> str:
    """0,1,2,3,5 as "0-3,5": a member's partitions in a width people can read."""
    values = sorted(set(numbers))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


def partitions_text(assignment: common_pb2.Assignment) -> str:
    """ "orders:0-3,5 payments:1", or "-" for none."""
    topics = sorted(
        (tp.topic_name or tp.topic_id, tp.partitions) for tp in assignment.topic_partitions if tp.partitions
    )
    return " ".join(f"{name}:{ranges(parts)}" for name, parts in topics) or NONE


def partitions_json(assignment: common_pb2.Assignment) -> list[dict[str, Any]]:
    return [
        {"topic": tp.topic_name, "topic_id": tp.topic_id, "partitions": sorted(tp.partitions)}
        for tp in sorted(assignment.topic_partitions, key=lambda tp: (tp.topic_name, tp.topic_id))
        if tp.partitions
    ]


def tasks_text(owned: common_pb2.ConnectorsAndTasks) -> str:
    """A Connect worker's connectors and tasks: "sink sink/0,2" or "-"."""
    by_connector: dict[str, list[int]] = {}
    for task in owned.tasks:
        by_connector.setdefault(task.connector, []).append(task.task)
    words = sorted(owned.connectors) + [f"{c}/{ranges(t)}" for c, t in sorted(by_connector.items())]
    return " ".join(words) or NONE


def tasks_json(owned: common_pb2.ConnectorsAndTasks) -> dict[str, Any]:
    return {
        "connectors": sorted(owned.connectors),
        "tasks": [{"connector": t.connector, "task": t.task} for t in sorted(owned.tasks, key=_task_key)],
    }


def _task_key(task: common_pb2.ConnectorTaskId) -> tuple[str, int]:
    return task.connector, task.task
