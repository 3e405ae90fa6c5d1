"""examples/spark_pipeline.py end to end: 3 Spark tasks on local[2] share 8 partitions
of 10,000 rows through regroup; one task is killed in the middle of a batch; every
row reaches the sink exactly once, counted from the sink itself."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.java import require_java
from tests.support.timing import scaled

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.timeout(scaled(300))
def test_spark_pipeline_every_row_exactly_once(tmp_path: Path) -> None:
    require_java()
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "spark_pipeline.py"), "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads(run.stdout[run.stdout.index("{") :])

    # Counted from the sink itself, not from the job's report.
    with sqlite3.connect(tmp_path / "sink.db") as db:
        rows, distinct = db.execute(
            "SELECT count(*), count(DISTINCT partition * 1000000000 + row_offset) FROM rows"
        ).fetchone()
        per_partition = db.execute(
            "SELECT partition, count(*), min(row_offset), max(row_offset) FROM rows "
            "GROUP BY partition ORDER BY partition"
        ).fetchall()
        crashed = db.execute("SELECT count(*) FROM writes WHERE task = 1 AND attempt = 0").fetchone()[0]
    assert rows == distinct == 80_000
    assert per_partition == [(p, 10_000, 0, 9_999) for p in range(8)]
    # Task 1 really was killed mid-run: it wrote before dying, and Spark retried it.
    assert crashed >= 1
    attempts = {(t["task"], t["attempt"]) for t in summary["tasks"]}
    assert (1, 0) not in attempts and any(task == 1 for task, _ in attempts)
    assert summary["rows_written_by_tasks"] >= 80_000
    # The Java stack trace Spark prints for the killed task is announced as the example's own
    # doing, before it (the task's stderr reaches the driver's in local mode).
    notice = run.stderr.find("task 1.0 kills its Python worker now, on purpose")
    assert notice >= 0, run.stderr[-3000:]
    trace = run.stderr.find("Python worker exited unexpectedly")
    assert trace == -1 or notice < trace, run.stderr[-3000:]
