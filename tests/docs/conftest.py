"""One real regroup server and one embedded Postgres for every code block of the docs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.pg import EmbeddedPostgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_serving(address: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise AssertionError(f"regroup exited with {server.returncode}:\n{log.read_text()[-3000:]}")
            try:
                response = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise AssertionError(f"regroup did not serve within 60 s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def docs_postgres() -> Iterator[EmbeddedPostgres]:
    pg = EmbeddedPostgres()
    yield pg
    pg.close()


@pytest.fixture(scope="session")
def regroup_http_address() -> str:
    """host:port of the docs' server's metrics port, which serves the web view too: blocks
    read it from REGROUP_HTTP_ADDRESS (docs/web-view.md), as REGROUP_ADDRESS for gRPC."""
    return f"127.0.0.1:{_free_port()}"


@pytest.fixture(scope="session")
def regroup_address(
    docs_postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory, regroup_http_address: str
) -> Iterator[str]:
    """`python -m regroup.server` (what `make run` starts) on its own database; its address."""
    database = asyncio.run(docs_postgres.migrated_database())
    address = f"127.0.0.1:{_free_port()}"
    env = {
        **os.environ,
        "DATABASE_URL": database,
        "REGROUP_LISTEN": address,
        # Snippets join, wait for partitions and leave: a short interval settles them quickly,
        # and a member a snippet failed to close frees its partitions within seconds.
        "REGROUP_HEARTBEAT_INTERVAL_MS": "250",
        "REGROUP_SESSION_TIMEOUT_MS": "5000",
        "REGROUP_LOG_LEVEL": "warning",
        # A free port, not the default one, which other servers of the run may hold.
        "REGROUP_METRICS_LISTEN": regroup_http_address,
    }
    log = tmp_path_factory.mktemp("regroup") / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "regroup.server"], env=env, stdout=out, stderr=out)
    try:
        _wait_serving(address, server, log)
        yield address
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="session")
def scratch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtual environment for the `pip install` lines of the docs (see shell_env)."""
    path = tmp_path_factory.mktemp("scratch-venv")
    venv.create(path, with_pip=False)
    return path
