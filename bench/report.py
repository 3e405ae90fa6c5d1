"""Printing benchmark results: a readable table, and one JSON line per figure.

JSON lines are also appended to bench/results/<bench>.jsonl so that
docs/benchmarks.md can be regenerated from the latest run.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    import os

    return {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()}


def cpu_times() -> tuple[int, int] | None:
    """(steal, total) CPU time of the whole machine so far, in clock ticks
    (/proc/stat); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    ticks = [int(x) for x in fields[1:9]]
    return ticks[7], sum(ticks)


def steal_percent(since: tuple[int, int] | None) -> float | None:
    """The share of CPU time the hypervisor gave to other guests since `since`
    (a cpu_times() reading): a run taken while it is high measured the host's
    neighbours as much as the code."""
    now = cpu_times()
    if since is None or now is None or now[1] == since[1]:
        return None
    return round(100 * (now[0] - since[0]) / (now[1] - since[1]), 1)


def figure(bench: str, **fields: Any) -> dict[str, Any]:
    """Prints one figure as a JSON line (and keeps it under bench/results/)."""
    line = {"bench": bench, **fields}
    print(json.dumps(line, sort_keys=False), flush=True)
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / f"{bench}.jsonl").open("a") as out:
        out.write(json.dumps({**line, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    return line


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    print(flush=True)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[index]
