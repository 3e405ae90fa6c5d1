"""Integration fixtures: a real embedded Postgres, a real server on a loopback
port, and the real generated gRPC client."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from regroup.server.app import RegroupServer
from regroup.server.config import Settings
from tests.support.certs import Pki, make_pki
from tests.support.leases import MANUAL_LEASE_MS
from tests.support.pg import EmbeddedPostgres
from tests.support.service import Service, ServiceFactory
from tests.support.streams import StreamCoordinatorStub
from tests.support.wire import Stubs

#: How a test's heartbeats reach the server: "unary" (the RPCs) or "stream" (one shared
#: MemberStream, tests/support/streams.py). See `heartbeat_transports`.
TRANSPORTS = ("unary", "stream")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "heartbeat_transports(*names): run the test once per heartbeat transport (default: "
        "unary and stream); with stream, service.stubs.coordinator sends ConsumerGroupHeartbeat "
        "and ConnectGroupHeartbeat through a MemberStream and every other RPC as usual",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests (or modules) marked `heartbeat_transports` run once per transport: the
    stream's answers must be the unary RPC's, so the same assertions hold for both."""
    marker = metafunc.definition.get_closest_marker("heartbeat_transports")
    if marker is not None and "transport" in metafunc.fixturenames:
        metafunc.parametrize("transport", marker.args or TRANSPORTS, indirect=True)


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> str:
    """The heartbeat transport of the services this test starts (unary unless marked)."""
    name: str = getattr(request, "param", "unary")
    assert name in TRANSPORTS, name
    return name


@pytest.fixture(scope="session")
def postgres() -> Iterator[EmbeddedPostgres]:
    pg = EmbeddedPostgres()
    yield pg
    pg.close()


@pytest.fixture
async def database(postgres: EmbeddedPostgres) -> str:
    return await postgres.migrated_database()


@pytest.fixture
async def start_service(database: str, transport: str) -> AsyncIterator[ServiceFactory]:
    """Starts servers on the test's database; stops them all at the end. With the
    "stream" transport, each service's heartbeats go through a MemberStream."""
    started: list[Service] = []

    async def start(
        clock: Any = None,
        run_timers: bool = True,
        interceptors: Sequence[Any] = (),
        tracer_provider: Any = None,
        credentials: grpc.ChannelCredentials | None = None,
        **overrides: Any,
    ) -> Service:
        """`credentials`: the service's stubs speak TLS with them (for a server given
        tls_cert and tls_key)."""
        # Targets are computed on every bump unless a test asks for batching,
        # so that tests can drive rounds of heartbeats without waiting.
        overrides.setdefault("assignment_interval_ms", 0)
        # Many servers run in one process: a test that reads metrics asks for an endpoint.
        overrides.setdefault("metrics_listen", "off")
        if clock is not None:
            # A manual clock moves by minutes at once: see tests/support/leases.py.
            overrides.setdefault("lease_ms", MANUAL_LEASE_MS)
            overrides.setdefault("lease_renew_ms", MANUAL_LEASE_MS // 4)
        settings = Settings(listen="127.0.0.1:0", database_url=database, shutdown_grace_s=0.5, **overrides)
        server = RegroupServer(
            settings, run_timers=run_timers, interceptors=interceptors, tracer_provider=tracer_provider
        )
        if clock is not None:
            server.clock = clock
        await server.start()
        stubs = Stubs.connect(f"127.0.0.1:{server.port}", credentials)
        if transport == "stream":
            stubs = dataclasses.replace(stubs, coordinator=StreamCoordinatorStub(stubs.coordinator))  # type: ignore[arg-type]
        service = Service(server, stubs, settings)
        started.append(service)
        return service

    yield start
    for service in started:
        if isinstance(service.stubs.coordinator, StreamCoordinatorStub):
            await service.stubs.coordinator.close()
        await service.stubs.channel.close()
        await service.server.stop()


@pytest.fixture
async def service(start_service: ServiceFactory) -> Service:
    return await start_service()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A CA, the server's certificate files signed by it, and a client CA for mTLS."""
    return make_pki(tmp_path)
