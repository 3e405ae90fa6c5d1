"""A Spark job whose executor tasks share partitions through regroup, end to end.

    python examples/spark_pipeline.py [--target HOST:PORT] [--workdir DIR]

1. Generates a topic whose partitions are files of rows (8 x 10,000 by default).
2. Starts a regroup server on an embedded Postgres (unless --target is given)
   and creates the topic.
3. Runs 3 long-running Spark tasks on local[2,4] (with retries): each is a group
   member that processes the partitions it owns, at least once, and commits.
   Task 1 kills its own Python worker in the middle of a batch, after writing it
   to the sink and before committing it; Spark retries the task, which rejoins,
   and its partitions move to the others in the meantime. Spark reports that
   crash with an ERROR and a Java stack trace ("Python worker exited
   unexpectedly"): it is the crash the example makes on purpose, announced on
   stderr just before it.
4. Writes go to a SQLite sink that keys rows by (partition, offset) and guards
   every write with the owner's fencing token (docs/fencing.md), so a zombie
   cannot overwrite and a batch processed twice lands once.
5. Checks the sink: every row exactly once. Prints a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from regroup.client import MemberOptions, SyncGroupAdmin, TopicPartition
from regroup.client.processing import Batch
from regroup.client.spark import MemberTask, run_member_tasks, spark_session

TOPIC = "rows"
GROUP = "spark-pipeline"
CRASH_NOTICE = (
    "\nspark_pipeline: task {task}.{attempt} kills its Python worker now, on purpose (its last batch is "
    "written, not committed). Spark reports it next with an ERROR and a Java stack trace ('Python "
    "worker exited unexpectedly'); that is expected: Spark retries the task and the job goes on."
)


# -- the source: one file of rows per partition -----------------------------------


def generate(workdir: Path, partitions: int, rows: int) -> Path:
    topic_dir = workdir / TOPIC
    topic_dir.mkdir(parents=True, exist_ok=True)
    for p in range(partitions):
        with (topic_dir / f"part-{p:05d}.csv").open("w") as out:
            for i in range(rows):
                out.write(f"{p},{i},value-{p}-{i}\n")
    return topic_dir


class FileSource:
    """A partition is a file; the offset of a row is its line number."""

    def __init__(self, topic_dir: str) -> None:
        self.topic_dir = topic_dir
        self._files: dict[int, list[str]] = {}

    def read(self, partition: TopicPartition, offset: int, max_records: int) -> Sequence[str]:
        lines = self._files.get(partition.partition)
        if lines is None:
            path = Path(self.topic_dir, f"part-{partition.partition:05d}.csv")
            lines = self._files[partition.partition] = path.read_text().splitlines()
        return lines[offset : offset + max_records]


# -- the sink: SQLite rows guarded by the fencing token ----------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS fences (
    partition INTEGER PRIMARY KEY, assigned_epoch INTEGER NOT NULL, member_epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rows (
    partition INTEGER NOT NULL, row_offset INTEGER NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (partition, row_offset));
CREATE TABLE IF NOT EXISTS writes (partition INTEGER, first INTEGER, count INTEGER, task INTEGER,
    attempt INTEGER, accepted INTEGER);
"""


class Fenced(Exception):
    """The sink holds a newer token for this partition: the writer is a zombie."""


class GuardedSink:
    def __init__(self, path: str, task: int, attempt: int, crash_after: int | None) -> None:
        self.path = path
        self.task = task
        self.attempt = attempt
        self.crash_after = crash_after
        self.batches = 0

    def __call__(self, batch: Batch) -> None:
        token = batch.token
        with sqlite3.connect(self.path, timeout=30, isolation_level=None) as db:
            db.execute("BEGIN IMMEDIATE")
            # The guard: advance the partition's token unless a newer one is stored.
            db.execute(
                "INSERT INTO fences VALUES (?, ?, ?) ON CONFLICT (partition) DO UPDATE SET "
                "assigned_epoch = excluded.assigned_epoch, member_epoch = excluded.member_epoch "
                "WHERE (excluded.assigned_epoch, excluded.member_epoch) >= (assigned_epoch, member_epoch)",
                (batch.partition.partition, token.assigned_epoch, token.member_epoch),
            )
            accepted = db.execute("SELECT changes()").fetchone()[0] == 1
            db.execute(
                "INSERT INTO writes VALUES (?, ?, ?, ?, ?, ?)",
                (
                    batch.partition.partition,
                    batch.offset,
                    len(batch.records),
                    self.task,
                    self.attempt,
                    accepted,
                ),
            )
            if not accepted:
                db.execute("COMMIT")
                raise Fenced(f"{batch.partition}: a newer owner wrote already")
            db.executemany(
                "INSERT INTO rows VALUES (?, ?, ?) ON CONFLICT (partition, row_offset) DO NOTHING",
                [
                    (batch.partition.partition, batch.offset + i, line.split(",", 2)[2])
                    for i, line in enumerate(batch.records)
                ],
            )
            db.execute("COMMIT")
        self.batches += 1
        if self.crash_after is not None and self.batches >= self.crash_after:
            # Killed in the middle: written to the sink, not committed. Said first, for the Java
            # stack trace Spark prints next looks like a failure of the job.
            print(CRASH_NOTICE.format(task=self.task, attempt=self.attempt), file=sys.stderr, flush=True)
            os._exit(17)


def sink_factory(path: str, crash_task: int, crash_after: int) -> Callable[[int, int], GuardedSink]:
    def make(task: int, attempt: int) -> GuardedSink:
        crash = crash_after if (task == crash_task and attempt == 0) else None
        return GuardedSink(path, task, attempt, crash)

    return make


# -- the coordinator ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: How long the example waits for its regroup server to answer.
START_TIMEOUT_S = 180.0


def start_server(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "REGROUP_LISTEN": f"127.0.0.1:{port}",
        "REGROUP_DATA_DIR": str(workdir / "regroup-data"),
        "REGROUP_HEARTBEAT_INTERVAL_MS": "200",
        "REGROUP_SESSION_TIMEOUT_MS": "3000",
        "REGROUP_ASSIGNMENT_INTERVAL_MS": "0",
        "REGROUP_LOG_LEVEL": "warning",
        "REGROUP_METRICS_LISTEN": "off",  # the example reads no metrics
    }
    env.pop("DATABASE_URL", None)
    log = (workdir / "regroup.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "regroup.server"], env=env, stdout=log, stderr=log)
    target = f"127.0.0.1:{port}"
    # The first start creates the embedded Postgres (initdb): a few seconds, much more on a
    # machine busy with other work.
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with SyncGroupAdmin(target, timeout=1) as admin:
                admin.list_groups()
            return server, target
        except Exception:  # noqa: BLE001 - not up yet, whatever the reason
            if server.poll() is not None:
                raise RuntimeError(f"regroup exited: see {workdir / 'regroup.log'}") from None
            time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"regroup did not start in {START_TIMEOUT_S:.0f} s: see {workdir / 'regroup.log'}")


# -- the job ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", help="a running regroup (default: start one on an embedded Postgres)")
    parser.add_argument("--workdir", type=Path, help="where the data, the sink and the logs go")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--crash-after", type=int, default=3, help="batches before task 1 kills itself")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="regroup-spark-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    topic_dir = generate(workdir, args.partitions, args.rows)
    sink_path = workdir / "sink.db"
    with sqlite3.connect(sink_path) as db:
        db.executescript(SCHEMA)

    # Spark first: starting it after a gRPC server in the same process makes gRPC warn about fork.
    spark = spark_session("regroup-spark-pipeline", cache_dir=Path.home() / ".cache" / "regroup-spark")
    server = None
    target = args.target
    if target is None:
        server, target = start_server(workdir)
    try:
        with SyncGroupAdmin(target) as admin:
            existing = {t.name for t in admin.describe_topics() if t.error_code == 0}
            if TOPIC not in existing:
                admin.create_topic(TOPIC, args.partitions)
        task = MemberTask(
            target=target,
            group_id=GROUP,
            topics=[TOPIC],
            make_source=lambda: FileSource(str(topic_dir)),
            make_sink=sink_factory(str(sink_path), crash_task=1, crash_after=args.crash_after),
            end_offsets={(TOPIC, p): args.rows for p in range(args.partitions)},
            batch_size=args.batch_size,
            options=MemberOptions(client_id="spark-task", rebalance_timeout_ms=30_000),
        )
        results = run_member_tasks(spark, args.tasks, task)
    finally:
        spark.stop()
        if server is not None:
            server.terminate()
            server.wait(timeout=30)

    with sqlite3.connect(sink_path) as db:
        total, distinct = db.execute(
            "SELECT count(*), count(DISTINCT partition * 1000000000 + row_offset) FROM rows"
        ).fetchone()
        written, rejected = db.execute(
            "SELECT coalesce(sum(count), 0), "
            "coalesce(sum(CASE WHEN accepted THEN 0 ELSE count END), 0) FROM writes"
        ).fetchone()
        per_partition = dict(db.execute("SELECT partition, count(*) FROM rows GROUP BY partition").fetchall())
    expected = args.partitions * args.rows
    summary = {
        "rows_expected": expected,
        "rows_in_sink": total,
        "distinct_rows_in_sink": distinct,
        "rows_written_by_tasks": written,
        "rows_written_twice": written - rejected - total,
        "rows_rejected_by_fence": rejected,
        "complete_partitions": sum(1 for p in range(args.partitions) if per_partition.get(p) == args.rows),
        "tasks": results,
        "seconds": round(time.monotonic() - started, 1),
        "workdir": str(workdir),
    }
    print(json.dumps(summary, indent=2))
    if not (total == distinct == expected):
        raise SystemExit(f"the sink does not hold every row exactly once: {total} rows, {distinct} distinct")
    return summary


if __name__ == "__main__":
    main()
