"""`spark-submit --master X job.py`: the job's `spark_session()` runs on X (issue 19).

One JVM start (spark-submit's own); the decision itself is unit-tested without a
JVM in tests/unit/client/test_spark_session.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from regroup.client.spark import FAST_JVM
from tests.support.java import require_java
from tests.support.timing import scaled

pytest.importorskip("pyspark")

JOB = textwrap.dedent(
    """
    import json
    from regroup.client.spark import spark_session

    spark = spark_session("submit-check")
    sc = spark.sparkContext
    count = sc.parallelize(range(12), 3).map(lambda x: x * 2).count()
    print(json.dumps({"master": sc.master, "app": sc.appName, "count": count}))
    spark.stop()
    """
)


@pytest.mark.timeout(scaled(180))
def test_the_master_given_to_spark_submit_is_honoured(tmp_path: Path) -> None:
    require_java()
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[3]",
            "--conf",
            "spark.ui.enabled=false",
            "--driver-java-options",
            FAST_JVM,
            str(job),
        ],
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    # Before issue 19's fix the helper replaced it with its own local[2,4].
    assert result == {"master": "local[3]", "app": "submit-check", "count": 12}
