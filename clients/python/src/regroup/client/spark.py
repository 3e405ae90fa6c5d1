"""Group members inside Spark executors (`pip install regroup-client[spark]`).

A Spark job launches N long-running tasks; each task is a group member that
joins through the synchronous client, processes the partitions it owns,
commits, and hands partitions over cooperatively when tasks come and go. A task
that Spark kills or retries simply rejoins: its partitions move after its
session times out (or, for a static member, come back to the retry).

    spark = local_session("pipeline")
    results = run_member_tasks(spark, 3, MemberTask(target, "pipeline", ["rows"], make_source, make_sink))
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from regroup.client.errors import RegroupError
from regroup.client.member import MemberOptions
from regroup.client.processing import Batch, Mode, PartitionProcessor, PartitionSource
from regroup.client.sync import SyncGroupMember
from regroup.client.types import TopicPartition

T = TypeVar("T")

#: JVM flags that halve the driver's start-up (see the toolchain notes).
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_session(app_name: str, master: str = "local[2,4]", cache_dir: Path | None = None) -> Any:
    """A quiet, fast-starting local SparkSession whose Python workers run this interpreter.

    `local[2,4]`: two cores, and up to 4 attempts per task, so that a killed task
    is retried (plain `local[2]` never retries). With `cache_dir`, the JVM's
    class-data archive is kept there and reused (start-up drops to a few seconds).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java = FAST_JVM
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        archive = cache_dir / "spark.jsa"
        if archive.exists():
            java += f" -XX:SharedArchiveFile={archive} -Xlog:cds=off"
        else:
            java += f" -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off"
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", java)
        .config("spark.python.worker.reuse", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def run_member_tasks(spark: Any, tasks: int, task: Callable[[int, int], T]) -> list[T]:
    """Runs `task(index, attempt)` as `tasks` long-running Spark tasks and returns their results.

    Each task is one partition of a `tasks`-element RDD; `attempt` is Spark's
    attempt number (0 first, higher when Spark retries a failed task)."""

    def one(index: int, _rows: Any) -> list[T]:
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        return [task(index, attempt)]

    rdd = spark.sparkContext.parallelize(range(tasks), tasks)
    results: list[T] = rdd.mapPartitionsWithIndex(one).collect()
    return results


@dataclass
class MemberTask:
    """A Spark task that is a group member processing its partitions until all are done.

    Everything here is pickled to the executors: give factories, not open
    connections. `partitions` and `end_offset` say when the job is complete:
    every partition committed at its end."""

    target: str
    group_id: str
    topics: list[str]
    make_source: Callable[[], PartitionSource]
    make_sink: Callable[[int, int], Callable[[Batch], None]]
    end_offsets: dict[tuple[str, int], int]
    mode: Mode = "at_least_once"
    batch_size: int = 500
    static: bool = False
    options: MemberOptions = field(default_factory=MemberOptions)

    def __call__(self, index: int, attempt: int) -> dict[str, Any]:
        sink = self.make_sink(index, attempt)
        processor = PartitionProcessor(self.make_source(), sink, mode=self.mode, batch_size=self.batch_size)
        with SyncGroupMember(self.target, listener=processor, options=self.options) as member:
            member.join(
                self.group_id,
                topics=self.topics,
                instance_id=f"{self.group_id}-task-{index}" if self.static else None,
            )
            stats = processor.run(member, until=lambda: self.complete(member))
            return {
                "task": index,
                "attempt": attempt,
                "member_id": member.member_id,
                "batches": stats.batches,
                "records": stats.records,
                "refused_commits": stats.refused_commits,
                "partitions": sorted(str(tp) for tp in stats.partitions_seen),
            }

    def complete(self, member: SyncGroupMember) -> bool:
        try:
            committed = member.committed()
        except RegroupError:
            return False  # mid-rebalance (a stale epoch): ask again next round
        by_name = {(tp.topic, tp.partition): offset for tp, offset in committed.items()}
        return all(by_name.get(key, 0) >= end for key, end in self.end_offsets.items())


__all__ = ["MemberTask", "TopicPartition", "local_session", "run_member_tasks"]
