"""`python -m regroup.server` as `make run` starts it: embedded Postgres, migrations, graceful stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from regroup.server.main import main
from regroup.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from tests.support.wire import Stubs, WireMember


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _start(
    data_dir: Path, port: int, metrics_port: int = 0, **extra: str
) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(REGROUP_DATA_DIR=str(data_dir), REGROUP_LISTEN=f"127.0.0.1:{port}", **extra)
    # Another server of the test run may hold the default port: any free one.
    env.update(REGROUP_METRICS_LISTEN=f"127.0.0.1:{metrics_port}")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "regroup.server",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _wait_serving(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(300):
            try:
                status = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if status.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the service did not become healthy")


async def _stop(process: asyncio.subprocess.Process) -> list[dict[str, object]]:
    process.send_signal(signal.SIGTERM)
    stdout, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0
    return [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]


async def test_service_runs_on_its_embedded_postgres_and_keeps_data_across_restarts(tmp_path: Path) -> None:
    port, metrics_port = _free_port(), _free_port()
    process = await _start(tmp_path / "data", port, metrics_port)
    try:
        await _wait_serving(port)
        stubs = Stubs.connect(f"127.0.0.1:{port}")
        await stubs.create_topic("orders", 3)
        member = WireMember(stubs.coordinator, "g1", "m", ["orders"])
        await member.heartbeat()
        await stubs.channel.close()
        # The Prometheus endpoint of the process: the join's heartbeat wrote the group.
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        text = (await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())).decode()
        samples = {
            (s.name, tuple(v for k, v in sorted(s.labels.items()) if not k.startswith("otel_"))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("regroup_heartbeats_total", ("written",))] == 1
        assert samples[("regroup_group_epoch_bumps_total", ("member_joined",))] == 1
    finally:
        events = await _stop(process)
    started = next(e for e in events if e["event"] == "server_started")
    assert started["metrics"] == f"127.0.0.1:{metrics_port}"
    assert started["web_view"] == f"http://127.0.0.1:{metrics_port}/"  # docs/web-view.md
    names = [e["event"] for e in events]
    assert names[0] == "migrations_applied"
    assert {
        "server_started",
        "topic_created",
        "member_joined",
        "group_epoch_bumped",
        "server_stopped",
    } <= set(names)
    assert (tmp_path / "data" / "pgdata" / "PG_VERSION").exists()

    process = await _start(tmp_path / "data", port)
    try:
        await _wait_serving(port)
        stubs = Stubs.connect(f"127.0.0.1:{port}")
        group = await stubs.describe("g1")
        await stubs.channel.close()
    finally:
        events = await _stop(process)
    assert [m.member_id for m in group.members] == ["m"]
    loaded = next(e for e in events if e["event"] == "coordinator_loaded")
    assert (loaded["groups"], loaded["members"], loaded["topics"]) == (1, 1, 1)


def _postmaster(data_dir: Path) -> psutil.Process | None:
    """The running Postgres of the data dir, from the first line of its postmaster.pid."""
    try:
        pid = int((data_dir / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
        return None


async def _stopped(process: psutil.Process, timeout_s: float = 10) -> bool:
    """Polls until the process is gone; False if it is still running after the timeout."""
    for _ in range(int(timeout_s / 0.1)):
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_clean_stop_after_a_killed_instance_stops_the_embedded_postgres(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = _free_port()
    killed = await _start(data_dir, port)
    try:
        await _wait_serving(port)
        postmaster = _postmaster(data_dir)
        assert postmaster is not None
        killed.kill()  # SIGKILL: its pid stays in pgserver's list of the pgdata's users
        await killed.communicate()
        assert postmaster.is_running()

        process = await _start(data_dir, port)
        try:
            await _wait_serving(port)
            assert _postmaster(data_dir) == postmaster  # the same Postgres, reused
        finally:
            await _stop(process)
        assert await _stopped(postmaster), "the clean stop left the embedded Postgres running"
        assert _postmaster(data_dir) is None
    finally:
        # Never leave a process or a Postgres behind, whatever failed above.
        if killed.returncode is None:
            killed.kill()
            await killed.communicate()
        leftover = _postmaster(data_dir)
        if leftover is not None:
            leftover.terminate()
            await _stopped(leftover)


def test_bad_configuration_exits_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--session-timeout-ms", "abc"]) == 2
    # Named as the user gave it: the flag here (the variable when it came from the environment).
    assert "--session-timeout-ms must be an integer" in capsys.readouterr().err


async def test_nothing_forks_once_grpc_runs_and_every_log_line_is_json(tmp_path: Path) -> None:
    """gRPC's fork handlers print a line for every fork made while its threads run (its fork
    support on, as here): none may happen, from the embedded Postgres' start to its stop.
    pgserver's pg_ctl runs were such forks, and one was seen to end in a segmentation fault."""
    port = _free_port()
    process = await _start(tmp_path / "data", port, GRPC_ENABLE_FORK_SUPPORT="true")
    await _wait_serving(port)
    process.send_signal(signal.SIGINT)
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0
    assert [line for line in stderr.decode().splitlines() if "fork" in line] == []
    events = [json.loads(line)["event"] for line in stdout.decode().splitlines()]  # every line is JSON
    assert events[-1] == "server_stopped"
    assert _postmaster(tmp_path / "data") is None


def test_the_tests_postgres_forks_nothing_in_a_process_running_grpc(tmp_path: Path) -> None:
    """The tests' embedded Postgres (tests/support/pg.py) started, taken away and brought
    back, and stopped from a process whose gRPC threads run, as a test process's do."""
    script = f"""
import asyncio, os, signal, time
from pathlib import Path
import grpc
from regroup.server.embedded import PostgresKeeper

async def main() -> None:
    server = grpc.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()
    keeper = await asyncio.to_thread(PostgresKeeper.start, Path({str(tmp_path)!r}), "delete")
    os.kill(keeper.pid, signal.SIGQUIT)  # an outage, as StoppablePostgres makes one
    while Path({str(tmp_path / "pgdata" / "postmaster.pid")!r}).exists():
        await asyncio.sleep(0.05)
    await asyncio.to_thread(keeper.restart)
    assert await asyncio.to_thread(keeper.close, 60)
    await server.stop(0)

asyncio.run(main())
"""
    env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "true"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stderr.splitlines() if "fork" in line] == []


async def test_a_stop_ends_within_its_bound_whatever_hangs(tmp_path: Path) -> None:
    """The bound: REGROUP_SHUTDOWN_GRACE_S + 2 x REGROUP_STORE_TIMEOUT_MS + 5 s (docs/operations.md),
    here 1 + 2 + 5 s, with an OTLP collector that takes connections and never answers (the
    last metrics and spans cannot be delivered) and a WatchGroup stream open (it would hold
    the drain for its whole grace)."""
    bound_s = 1 + 2 * 1 + 5
    with socket.socket() as collector:
        collector.bind(("127.0.0.1", 0))
        collector.listen(64)  # never accepted: every export waits for an answer
        port = _free_port()
        process = await _start(
            tmp_path / "data",
            port,
            REGROUP_SHUTDOWN_GRACE_S="1",
            REGROUP_STORE_TIMEOUT_MS="1000",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.getsockname()[1]}",
            OTEL_TRACES_EXPORTER="otlp",
        )
        await _wait_serving(port)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            watch = admin_pb2_grpc.GroupAdminStub(channel).WatchGroup(
                admin_pb2.WatchGroupRequest(group_id="g")
            )
            await watch.read()
            started = time.monotonic()
            process.send_signal(signal.SIGINT)
            stdout, _ = await asyncio.wait_for(process.communicate(), timeout=60)
            took = time.monotonic() - started
    assert process.returncode == 0
    assert took < bound_s, f"the stop took {took:.1f} s, beyond its bound of {bound_s} s"
    assert json.loads(stdout.decode().splitlines()[-1])["event"] == "server_stopped"


async def test_a_killed_make_run_serves_its_groups_again_at_once_not_after_its_lease(tmp_path: Path) -> None:
    """The default single-process set-up keeps its replica id in the data directory
    (server/identity.py): started again after a SIGKILL, it takes its earlier leases over at
    once. With a minute-long lease, waiting for them would take a minute; the member here
    keeps its epoch and its partitions."""
    lease_ms = 60_000
    port = _free_port()
    killed = await _start(tmp_path / "data", port, REGROUP_LEASE_MS=str(lease_ms))
    process = None
    try:
        await _wait_serving(port)
        stubs = Stubs.connect(f"127.0.0.1:{port}")
        await stubs.create_topic("orders", 3)
        member = WireMember(stubs.coordinator, "g1", "m", ["orders"])
        await member.heartbeat()
        await member.heartbeat()
        epoch, owned = member.epoch, member.partitions()
        await stubs.channel.close()
        killed.kill()
        await killed.communicate()
        started = time.monotonic()

        process = await _start(tmp_path / "data", port, REGROUP_LEASE_MS=str(lease_ms))
        await _wait_serving(port)
        stubs = Stubs.connect(f"127.0.0.1:{port}")
        member.stub = stubs.coordinator
        while (await member.heartbeat()).error_code != common_pb2.NONE:
            assert time.monotonic() - started < lease_ms / 2000, f"still refused: {member.last}"
            await asyncio.sleep(0.1)
        assert (member.epoch, member.partitions()) == (epoch, owned)
        await stubs.channel.close()
    finally:
        if killed.returncode is None:
            killed.kill()
            await killed.communicate()
        if process is not None:
            await _stop(process)
