"""Group members inside Spark executors (`pip install regroup-client[spark]`).

A Spark job launches N long-running tasks; each task is a group member that
joins through the synchronous client, processes the partitions it owns,
commits, and hands partitions over cooperatively when tasks come and go. A task
that Spark kills or retries simply rejoins: its partitions move after its
session times out (or, for a static member, come back to the retry).

    spark = spark_session("pipeline")  # the master spark-submit was given, else local[2,4]
    results = run_member_tasks(spark, 3, MemberTask(target, "pipeline", ["rows"], make_source, make_sink))
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from regroup.client.errors import RegroupError
from regroup.client.member import MemberOptions
from regroup.client.processing import Batch, Mode, PartitionProcessor, PartitionSource
from regroup.client.sync import SyncGroupMember
from regroup.client.tls import TlsConfig
from regroup.client.types import TopicPartition

T = TypeVar("T")

#: JVM flags that halve the driver's start-up (see the toolchain notes).
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: The master when nobody chose one: two cores, and up to 4 attempts per task, so
#: that a killed task is retried (plain `local[2]` never retries).
DEFAULT_MASTER = "local[2,4]"

MasterSource = Literal[
    "active session", "argument", "spark-submit", "PYSPARK_SUBMIT_ARGS", "spark-defaults.conf", "default"
]


@dataclass(frozen=True, slots=True)
class MasterChoice:
    """Which master a session gets and who chose it."""

    master: str
    source: MasterSource

    @property
    def local(self) -> bool:
        """Everything runs on this machine (`local`, `local[...]`, `local-cluster[...]`)."""
        return self.master.startswith("local")


def submit_args_master(submit_args: str | None) -> str | None:
    """The master that PYSPARK_SUBMIT_ARGS hands spark-submit, if any.

    `--master` wins over `--conf spark.master=...`, as in spark-submit itself."""
    if not submit_args:
        return None
    try:
        words = shlex.split(submit_args)
    except ValueError:
        return None  # spark-submit will refuse it too; nothing to honour
    master: str | None = None
    conf_master: str | None = None
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        if word == "--master":
            master = following or None
        elif word.startswith("--master="):
            master = word.removeprefix("--master=") or None
        elif word in ("--conf", "-c") and following.startswith("spark.master="):
            conf_master = following.removeprefix("spark.master=") or None
        elif word.startswith("--conf=spark.master="):
            conf_master = word.removeprefix("--conf=spark.master=") or None
    return master or conf_master


_PROPERTY = re.compile(r"(?P<key>[^\s=:#!][^\s=:]*)\s*[=:\s]\s*(?P<value>.*?)\s*$")


def defaults_master(defaults_conf: str | None) -> str | None:
    """`spark.master` from the text of a spark-defaults.conf (`key value` or `key=value` lines)."""
    master: str | None = None
    for line in (defaults_conf or "").splitlines():
        # Java properties: the key ends at the first blank, '=' or ':' (a URL's '=' is the value's).
        match = _PROPERTY.match(line.strip())
        if match is not None and match["key"] == "spark.master" and match["value"]:
            master = match["value"]
    return master


def choose_master(
    master: str | None = None,
    *,
    active: str | None = None,
    running: str | None = None,
    submit_args: str | None = None,
    defaults_conf: str | None = None,
) -> MasterChoice:
    """Decides the master of a session without starting a JVM, first match wins:

    1. `active`: the master of a SparkSession already running in this process
       (Spark hands it back whatever the builder says);
    2. `master`: given by the caller's code (as `SparkSession.builder.master()`
       beats `spark-submit --master`);
    3. `running`: `spark.master` of a driver JVM that spark-submit (or the
       pyspark shell) started before this Python process;
    4. `submit_args`: PYSPARK_SUBMIT_ARGS, which the driver JVM will be started with;
    5. `defaults_conf`: the text of spark-defaults.conf;
    6. otherwise `DEFAULT_MASTER`.
    """
    if active:
        return MasterChoice(active, "active session")
    if master:
        return MasterChoice(master, "argument")
    if running:
        return MasterChoice(running, "spark-submit")
    from_args = submit_args_master(submit_args)
    if from_args:
        return MasterChoice(from_args, "PYSPARK_SUBMIT_ARGS")
    from_defaults = defaults_master(defaults_conf)
    if from_defaults:
        return MasterChoice(from_defaults, "spark-defaults.conf")
    return MasterChoice(DEFAULT_MASTER, "default")


def session_settings(
    choice: MasterChoice, cache_dir: Path | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """The Spark settings and the environment defaults a new session gets: `(conf, env)`.

    Only a local session is tuned: on a cluster the driver's address, the
    executors' Python and the JVM flags are the cluster's and the user's business
    (a loopback driver host would make the driver unreachable from executors, and
    this interpreter's path does not exist on them)."""
    if not choice.local:
        return {}, {}
    env = {
        # Workers must run this interpreter, which has the client installed.
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.python.worker.reuse": "false",
    }
    if choice.source != "spark-submit":  # else the driver JVM already runs with its own flags
        java = FAST_JVM
        if cache_dir is not None:
            archive = cache_dir / "spark.jsa"
            if archive.exists():
                java += f" -XX:SharedArchiveFile={archive} -Xlog:cds=off"
            else:
                java += f" -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off"
        conf["spark.driver.extraJavaOptions"] = java
    return conf, env


def _running_master() -> str | None:
    """`spark.master` of the driver JVM that spark-submit started, if this process runs under it.

    spark-submit (and the pyspark shell) start the JVM first and pass its gateway
    to Python in PYSPARK_GATEWAY_PORT; connecting to it costs no JVM start. Without
    it there is no JVM to ask, and none is started just to ask."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    master: str | None = SparkConf().get("spark.master", None)
    return master


def _defaults_conf() -> str | None:
    """The text of the spark-defaults.conf that spark-submit would read, if there is one."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None
    )
    if conf_dir is None:
        return None
    try:
        return Path(conf_dir, "spark-defaults.conf").read_text()
    except OSError:
        return None


def spark_session(app_name: str, master: str | None = None, cache_dir: Path | None = None) -> Any:
    """The SparkSession to run member tasks on: the one the user gave, or a local one.

    The master comes from, in order: a session already active in this process
    (returned as it is), the `master` argument, `spark-submit --master` (or
    `--conf spark.master`), PYSPARK_SUBMIT_ARGS, spark-defaults.conf; only when
    none of them names one is it `local[2,4]` (see `choose_master`). A local
    session is made quiet and fast to start, with Python workers running this
    interpreter; with `cache_dir`, the JVM's class-data archive is kept there and
    reused (start-up drops to a few seconds). A session on a cluster gets only its
    app name: the driver address, executors' Python (`PYSPARK_PYTHON`) and JVM
    options stay as submitted (docs/spark.md).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    choice = choose_master(
        master,
        active=active.sparkContext.master if active is not None else None,
        running=_running_master(),
        submit_args=os.environ.get("PYSPARK_SUBMIT_ARGS"),
        defaults_conf=_defaults_conf(),
    )
    if active is not None:
        return active
    if cache_dir is not None and choice.local:
        cache_dir.mkdir(parents=True, exist_ok=True)
    conf, env = session_settings(choice, cache_dir)
    for name, value in env.items():
        os.environ.setdefault(name, value)
    builder = SparkSession.builder.appName(app_name)
    if choice.source in ("argument", "default"):
        # Otherwise Spark reads the master from where the user put it.
        builder = builder.master(choice.master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if choice.local:
        session.sparkContext.setLogLevel("ERROR")
    return session


#: The former name, kept for existing callers: it no longer forces a local master.
local_session = spark_session


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
    every partition committed at its end. `tls` makes the members' channels TLS
    ones; the files it names are read on the executors (PEM bytes travel with it).
    `token` is the bearer token sent with every call (access control)."""

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
    tls: TlsConfig | None = None
    token: str | None = None

    def __call__(self, index: int, attempt: int) -> dict[str, Any]:
        sink = self.make_sink(index, attempt)
        processor = PartitionProcessor(self.make_source(), sink, mode=self.mode, batch_size=self.batch_size)
        with SyncGroupMember(
            self.target, listener=processor, options=self.options, tls=self.tls, token=self.token
        ) as member:
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


__all__ = [
    "DEFAULT_MASTER",
    "MasterChoice",
    "MemberTask",
    "TlsConfig",
    "TopicPartition",
    "choose_master",
    "local_session",
    "run_member_tasks",
    "session_settings",
    "spark_session",
]
