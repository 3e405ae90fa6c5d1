"""Which master `regroup.client.spark.spark_session` picks, and what it tunes, without a JVM.

The user's choice wins wherever it was made (issue 19: the helper used to force
`local[2,4]` and a loopback driver even under `spark-submit --master ...`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from regroup.client.spark import (
    DEFAULT_MASTER,
    MasterChoice,
    MasterSource,
    choose_master,
    defaults_master,
    local_session,
    session_settings,
    spark_session,
    submit_args_master,
)


def test_local_only_when_nobody_chose_a_master() -> None:
    assert choose_master() == MasterChoice(DEFAULT_MASTER, "default")
    assert choose_master(submit_args="pyspark-shell", defaults_conf="spark.ui.enabled false\n").source == (
        "default"
    )


@pytest.mark.parametrize(
    ("args", "master"),
    [
        ("--master spark://head:7077 pyspark-shell", "spark://head:7077"),
        ("--master=yarn --deploy-mode client pyspark-shell", "yarn"),
        ("--conf spark.master=k8s://https://api:6443 pyspark-shell", "k8s://https://api:6443"),
        ("-c spark.master=yarn pyspark-shell", "yarn"),
        ("--conf=spark.master=yarn pyspark-shell", "yarn"),
        # spark-submit's own precedence: --master over --conf spark.master.
        ("--conf spark.master=yarn --master 'local[3]' pyspark-shell", "local[3]"),
        ("--driver-memory 2g pyspark-shell", None),
        ("--master", None),
        ("", None),
        (None, None),
    ],
)
def test_the_master_in_pyspark_submit_args(args: str | None, master: str | None) -> None:
    assert submit_args_master(args) == master


def test_the_master_in_spark_defaults_conf() -> None:
    text = (
        "# spark-defaults.conf\n"
        "spark.driver.memory   4g\n"
        "spark.master          k8s://https://api.example:6443?x=1\n"
        "spark.masterless      yarn\n"
    )
    assert defaults_master(text) == "k8s://https://api.example:6443?x=1"
    assert defaults_master("spark.master=yarn") == "yarn"
    assert defaults_master("spark.master: local[3]") == "local[3]"
    assert defaults_master("# spark.master yarn\nspark.master\n") is None
    assert defaults_master(None) is None


def test_precedence_active_session_then_code_then_submit_then_env_then_defaults() -> None:
    every = {
        "active": "local[5]",
        "running": "yarn",
        "submit_args": "--master spark://head:7077 pyspark-shell",
        "defaults_conf": "spark.master k8s://https://api:6443",
    }
    assert choose_master("local[1]", **every) == MasterChoice("local[5]", "active session")
    del every["active"]
    assert choose_master("local[1]", **every) == MasterChoice("local[1]", "argument")
    assert choose_master(None, **every) == MasterChoice("yarn", "spark-submit")
    del every["running"]
    assert choose_master(None, **every) == MasterChoice("spark://head:7077", "PYSPARK_SUBMIT_ARGS")
    del every["submit_args"]
    assert choose_master(None, **every) == MasterChoice("k8s://https://api:6443", "spark-defaults.conf")


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2,4]", True),
        ("local[*]", True),
        ("local-cluster[2,1,1024]", True),
        ("yarn", False),
        ("spark://head:7077", False),
        ("k8s://https://api:6443", False),
    ],
)
def test_which_masters_are_local(master: str, local: bool) -> None:
    assert MasterChoice(master, "argument").local is local


def test_a_cluster_session_keeps_the_driver_address_python_and_jvm_flags_of_the_submission() -> None:
    sources: tuple[MasterSource, ...] = (
        "spark-submit",
        "PYSPARK_SUBMIT_ARGS",
        "spark-defaults.conf",
        "argument",
    )
    for source in sources:
        conf, env = session_settings(MasterChoice("k8s://https://api:6443", source), Path("/tmp/cache"))
        assert conf == {} and env == {}, source


def test_a_local_session_is_tuned_for_this_machine(tmp_path: Path) -> None:
    conf, env = session_settings(MasterChoice(DEFAULT_MASTER, "default"), tmp_path)
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert env == {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    assert f"-XX:ArchiveClassesAtExit={tmp_path / 'spark.jsa'}" in conf["spark.driver.extraJavaOptions"]
    (tmp_path / "spark.jsa").write_bytes(b"")
    conf, _ = session_settings(MasterChoice(DEFAULT_MASTER, "default"), tmp_path)
    assert f"-XX:SharedArchiveFile={tmp_path / 'spark.jsa'}" in conf["spark.driver.extraJavaOptions"]


def test_local_under_spark_submit_leaves_the_running_jvms_flags_alone() -> None:
    conf, _ = session_settings(MasterChoice("local[3]", "spark-submit"))
    assert "spark.driver.extraJavaOptions" not in conf
    assert conf["spark.driver.host"] == "127.0.0.1"


def test_the_former_name_is_the_same_helper() -> None:
    assert local_session is spark_session
