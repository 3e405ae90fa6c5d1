"""Builds and runs the service: store, migrations, runtime, gRPC server."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from regroup.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc

from . import sql
from .accept import AcceptWidener, widened_server
from .access import Access
from .aclfile import AccessFileError
from .clock import Clock, SystemClock
from .config import ConfigError, Settings
from .embedded import STOP_WAIT_S, EmbeddedPostgresError, PostgresKeeper
from .forwarding import Forwarder
from .identity import ReplicaIdentity, claim_identity
from .leasekeeper import LeaseSettings
from .listeners import GRPC_OPTIONS, ListenError, add_port, check_free
from .migrate import Migration, apply_migrations, discover
from .runtime import Coordinator
from .service import GroupAdminService, GroupCoordinatorService
from .store import PostgresStore, StoreUnavailable
from .storewatch import StoreWatch
from .streams import StreamClosed, StreamHub, StreamLimits
from .telemetry import MetricsRuntime, on_loop, start_metrics, start_tracing
from .tls import CertificateError, CertificateFiles, server_credentials
from .webview import GroupReader, load_files

log = structlog.get_logger("regroup")

SERVICE_NAMES = (
    coordinator_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["GroupAdmin"].full_name,
)
#: The health names that follow the store: the whole server ("") and its services.
#: NOT_SERVING while Postgres does not answer, for readiness probes.
READINESS_NAMES = ("", *SERVICE_NAMES)
#: A health name that is SERVING from the moment the server accepts calls until it
#: begins to stop, whatever the store does. The chart's liveness probe reads it (a
#: database outage must not restart replicas), and so does its readiness probe by
#: default: a replica that cannot store still renews its members' sessions, while
#: one taken out of its Service would make them lose their partitions.
PROCESS_NAME = "process"


async def resolve_database_url(settings: Settings) -> tuple[str, PostgresKeeper | None]:
    """DATABASE_URL if set, else the embedded Postgres under the data directory, with its
    keeper (to close when done; StoreUnavailable when it cannot start)."""
    if settings.database_url:
        return settings.database_url, None
    try:
        keeper = await asyncio.to_thread(PostgresKeeper.start, settings.data_dir)
    except EmbeddedPostgresError as e:
        raise StoreUnavailable(str(e)) from e
    return keeper.dsn, keeper


async def close_embedded(keeper: PostgresKeeper | None, wait_s: float = STOP_WAIT_S) -> None:
    """Stops the embedded Postgres (if this process was its last user), waiting at most
    `wait_s` (the server's stop bound leaves it `embedded.STOP_WAIT_S`): its keeper
    finishes alone after that."""
    if keeper is not None and not await asyncio.to_thread(keeper.close, wait_s):
        log.warning(
            "embedded_postgres_still_stopping",
            message=f"the embedded Postgres did not stop within {wait_s:.0f} s; it finishes on its own",
        )


def advertised_address(settings: Settings, port: int) -> str:
    """REGROUP_ADVERTISED_ADDRESS, else the listen host (this host's name when it
    listens on every interface) with the port bound."""
    if settings.advertised_address:
        return settings.advertised_address
    host = settings.listen.rpartition(":")[0]
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = socket.gethostname()
    return f"{host}:{port}"


def load_tls(settings: Settings) -> CertificateFiles | None:
    """The TLS files, loaded and checked (ConfigError naming the setting), or None for plain text."""
    paths = settings.tls_paths()
    if paths is None:
        return None
    try:
        return CertificateFiles(paths)
    except CertificateError as e:
        raise ConfigError(str(e)) from None


def load_access(settings: Settings) -> Access:
    """The ACL and tokens files, loaded and checked (ConfigError naming the file and entry)."""
    try:
        return Access.from_files(settings.acl_file, settings.tokens_file)
    except AccessFileError as e:
        raise ConfigError(str(e)) from None


#: Hosts that only this machine reaches: an open server there is today's `make run`.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def warn_if_open(settings: Settings, access: Access) -> None:
    """Logs once, at start, that anyone who reaches the port may do anything."""
    host = settings.listen.rpartition(":")[0]
    if access.acl is None and host not in LOOPBACK_HOSTS:
        log.warning(
            "access_control_off",
            listen=settings.listen,
            message="REGROUP_ACL_FILE is not set: every caller may join, commit for and delete any group",
        )


def find_migrations(settings: Settings) -> list[Migration]:
    """REGROUP_MIGRATIONS_DIR's migrations, else the packaged ones; MigrationError if there are none.

    Called before any database is started or reached, so that a broken install says so first.
    """
    return discover(settings.migrations_dir)


async def run_migrations(dsn: str, migrations: list[Migration], shards: int = 64) -> list[str]:
    """Applies the migrations; the first time, also fixes the database's shard count
    (REGROUP_SHARDS), which later replicas then read instead of their own setting."""
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError) as e:
        raise StoreUnavailable(f"Cannot connect to Postgres: {e}") from e
    try:
        applied = await apply_migrations(conn, migrations)
        stored = int(await conn.fetchval(sql.SHARD_COUNT, str(shards)))
    finally:
        await conn.close()
    if stored != shards:
        log.warning(
            "shard_count_fixed",
            configured=shards,
            stored=stored,
            message="REGROUP_SHARDS is fixed when the database is first migrated; the stored count is used",
        )
    return applied


#: How long the last metrics and spans may take to reach their exporters on stop.
TELEMETRY_FLUSH_S = 2.0


async def bounded_in_thread(work: Callable[[], object], timeout_s: float, what: str) -> bool:
    """Runs `work()` in a daemon thread and waits for it at most `timeout_s`; True when it
    finished. asyncio.to_thread's threads are joined when the process exits, so a call
    stuck there would hold the exit too; a daemon thread is left behind instead."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def run() -> None:
        try:
            work()
        except Exception:
            log.exception(f"{what}_failed")
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(finished)

    threading.Thread(target=run, name=f"regroup-{what}", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except TimeoutError:
        log.warning(f"{what}_timed_out", timeout_s=timeout_s)
        return False
    return True


@dataclass
class RegroupServer:
    """The whole service; `start()` returns once it accepts requests."""

    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    run_timers: bool = True
    #: Server interceptors (tracing, authentication): every call passes through them,
    #: whichever accept loop took it.
    interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
    coordinator: Coordinator | None = None
    port: int = 0
    #: Where other replicas and clients reach this one (REGROUP_ADVERTISED_ADDRESS).
    address: str = ""
    _forwarder: Forwarder | None = None
    _server: grpc.aio.Server | None = None
    _store: PostgresStore | None = None
    _health: health.aio.HealthServicer | None = None
    _widener: AcceptWidener | None = None
    _watch: StoreWatch | None = None
    _metrics: MetricsRuntime | None = None
    _health_server: grpc.aio.Server | None = None
    #: The plain-text health port (REGROUP_HEALTH_LISTEN; 0 when off).
    health_port: int = 0
    #: Where the server's spans go: None reads the standard OTEL_* variables (off unless they
    #: ask for traces); tests give an SDK TracerProvider with an in-memory exporter.
    tracer_provider: Any = None
    _own_tracer_provider: Any = None
    #: The embedded Postgres' keeper (None with DATABASE_URL), closed last on stop.
    _embedded: PostgresKeeper | None = None
    #: Which replica this process is (server/identity.py), held until the stop ends.
    identity: ReplicaIdentity = field(default_factory=ReplicaIdentity)

    @property
    def metrics_port(self) -> int:
        """The Prometheus endpoint's port (0 when there is none)."""
        return 0 if self._metrics is None else self._metrics.port

    #: The member streams (GroupCoordinator.MemberStream) open now.
    streams: StreamHub | None = None

    #: The TLS files served (None: plain text), re-read when they change.
    tls: CertificateFiles | None = None

    #: The ACL and tokens in use (both off without REGROUP_ACL_FILE and REGROUP_TOKENS_FILE).
    access: Access = field(default_factory=Access)
    #: Looks at their files every second (Access.watch), calls or not.
    _access_watch: asyncio.Task[None] | None = None

    def check_listeners(self) -> None:
        """ListenError for the first listening address (API, health, metrics and web view)
        that another process holds or that cannot be bound: before anything starts."""
        settings = self.settings
        for setting, address in (
            ("REGROUP_LISTEN", settings.listen),
            ("REGROUP_HEALTH_LISTEN", settings.health_listen),
            ("REGROUP_METRICS_LISTEN", settings.metrics_listen),
        ):
            if address != "off":
                check_free(setting, address)

    def _bind(self) -> tuple[grpc.aio.Server, AcceptWidener]:
        """The metrics endpoint started, and the API and health servers with their ports
        bound (not yet started); ListenError when one cannot be bound."""
        assert self._store is not None
        try:
            self._metrics = start_metrics(self.settings.metrics_listen, self._store.replica_id)
        except OSError as e:
            reason = "the address is already in use" if e.errno == errno.EADDRINUSE else e.strerror
            raise ListenError("REGROUP_METRICS_LISTEN", self.settings.metrics_listen, str(reason)) from e
        # Bound before the coordinator starts: its leases advertise the address.
        limit = self.settings.max_message_bytes
        server, widener = widened_server(
            self.settings.accept_depth,
            interceptors=self.interceptors,
            options=[
                *GRPC_OPTIONS,
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
            ],
        )
        self._server = server
        if self.tls is None:
            self.port = add_port("REGROUP_LISTEN", self.settings.listen, server.add_insecure_port)
        else:
            # The extra accept loops take calls from the same core server, so from this
            # port's TLS connections only: no call reaches the handlers in plain text.
            credentials = server_credentials(self.tls)
            self.port = add_port(
                "REGROUP_LISTEN",
                self.settings.listen,
                lambda address: server.add_secure_port(address, credentials),
            )
        self._health = health.aio.HealthServicer()
        if self.settings.health_listen != "off":
            # REGROUP_HEALTH_LISTEN: the same health service on a plain-text port of its own
            # and nothing else, for probes that cannot speak TLS; it answers until the server stops.
            health_server = grpc.aio.server(options=list(GRPC_OPTIONS))
            health_pb2_grpc.add_HealthServicer_to_server(self._health, health_server)
            self._health_server = health_server
            self.health_port = add_port(
                "REGROUP_HEALTH_LISTEN", self.settings.health_listen, health_server.add_insecure_port
            )
        return server, widener

    async def _unbind(self) -> None:
        """Lets go of the ports `_bind` took: gRPC listens from the bind on, and only
        a server that started releases its ports when it stops."""
        for server in (self._server, self._health_server):
            if server is not None:
                await server.start()
                await server.stop(0)
        self._server = self._health_server = None

    async def start(self) -> None:
        self.check_listeners()
        self.tls = load_tls(self.settings)
        self.access = load_access(self.settings)
        migrations = find_migrations(self.settings)
        # Before any database is reached, as the migrations: a broken install says so first.
        web_files = load_files() if self.settings.web_view_served() else None
        self.identity = claim_identity(
            self.settings.replica_id, not self.settings.database_url, self.settings.data_dir
        )
        try:
            dsn, self._embedded = await resolve_database_url(self.settings)
            applied = await run_migrations(dsn, migrations, self.settings.shards)
            if applied:
                log.info("migrations_applied", migrations=applied)
            self._store = await PostgresStore.connect(
                dsn, self.identity.replica_id, timeout_s=self.settings.store_timeout_ms / 1000
            )
        except BaseException:
            embedded, self._embedded = self._embedded, None
            await close_embedded(embedded)
            self.identity.release()
            raise
        try:
            server, widener = self._bind()
        except BaseException:
            # A port taken since check_listeners: nothing of this start may stay behind.
            await self._unbind()
            await self.stop()
            raise
        assert self._metrics is not None and self._health is not None
        self.address = advertised_address(self.settings, self.port)
        self.coordinator = Coordinator(
            self._store,
            self.settings.group_config(),
            self.clock,
            run_timers=self.run_timers,
            leases=LeaseSettings(
                shards=self.settings.shards,
                lease_ms=self.settings.lease_ms,
                renew_ms=self.settings.lease_renew_ms,
                address=self.address,
                sole=self.identity.sole,
            ),
        )
        self.coordinator.writer.metrics = self._metrics.metrics
        self.coordinator.writer.history_max_events = self.settings.history_max_events
        self.coordinator.history_max_age_ms = self.settings.history_max_age_ms
        provider = self.tracer_provider
        if provider is None:
            provider = self._own_tracer_provider = start_tracing(self._store.replica_id)
        if provider is not None:
            self.coordinator.writer.tracer = provider.get_tracer("regroup.server")
        self._metrics.metrics.observe(on_loop(asyncio.get_running_loop(), self.coordinator.gauges()))
        if web_files is not None and self._metrics.app is not None:
            reader = GroupReader(
                self.coordinator,
                asyncio.get_running_loop(),
                max_message_bytes=self.settings.max_message_bytes,
            )
            self._metrics.app.serve_view(reader, web_files)
        limit = self.settings.max_message_bytes
        self._forwarder = Forwarder(
            self._store.replica_id, enabled=self.settings.forward, max_message_bytes=limit, tls=self.tls
        )
        self.streams = StreamHub(
            StreamLimits(
                max_batch=self.settings.stream_max_batch,
                max_members=self.settings.stream_max_members,
                max_pending=self.settings.stream_max_pending,
            )
        )
        coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server(
            GroupCoordinatorService(
                self.coordinator, self._forwarder, access=self.access, streams=self.streams
            ),
            server,
        )
        admin = GroupAdminService(
            self.coordinator, max_message_bytes=limit, forwarder=self._forwarder, access=self.access
        )
        admin_pb2_grpc.add_GroupAdminServicer_to_server(admin, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (
                *SERVICE_NAMES,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        await self.coordinator.start()
        await server.start()
        extra = widener.start()
        self._widener = widener
        for name in (*READINESS_NAMES, PROCESS_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        await self._start_health_port()
        self._watch = StoreWatch(self._store.ping, self._store_changed, self.settings.store_check_ms / 1000)
        self.coordinator.watch = self._watch
        self._watch.start()
        if self.access.enabled:
            self._access_watch = asyncio.create_task(self.access.watch(), name="regroup-access-watch")
        host = self.settings.listen.rpartition(":")[0]
        log.info(
            "server_started",
            listen=f"{host}:{self.port}",
            advertised=self.address,
            replica_id=self._store.replica_id,
            extra_accepts=extra,
            metrics=self._metrics_address(),
            web_view=f"http://{self._metrics_address()}/" if web_files is not None else "off",
            tls="off" if self.tls is None else "mtls" if self.tls.mutual else "tls",
            fingerprint=None if self.tls is None else self.tls.current.fingerprint,
            acl="off" if self.access.acl is None else str(self.access.acl.path),
            tokens="off" if self.access.tokens is None else str(self.access.tokens.path),
        )
        warn_if_open(self.settings, self.access)

    def _metrics_address(self) -> str:
        if self._metrics is None or not self._metrics.port:
            return "off"
        return f"{self.settings.metrics_listen.rpartition(':')[0]}:{self._metrics.port}"

    async def _start_health_port(self) -> None:
        """Starts the health port bound by `_bind` (REGROUP_HEALTH_LISTEN), if any."""
        if self._health_server is not None:
            await self._health_server.start()

    async def _store_changed(self, available: bool) -> None:
        if available and self.coordinator is not None:
            self.coordinator.store_available()
        if self._health is not None:
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if available
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            for name in READINESS_NAMES:
                await self._health.set(name, status)

    @property
    def widener(self) -> AcceptWidener | None:
        """The extra accept loops of the running server (None once stopped)."""
        return self._widener

    async def stop(self) -> None:
        """Stops accepting calls, lets in-flight ones finish, then releases the store."""
        health_servicer, server, store = self._health, self._server, self._store
        coordinator = self.coordinator
        self._health = self._server = self._store = None
        watch, self._watch = self._watch, None
        if watch is not None:
            await watch.stop()
        access_watch, self._access_watch = self._access_watch, None
        if access_watch is not None:
            access_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await access_watch
        if health_servicer is not None:
            await health_servicer.enter_graceful_shutdown()
        if coordinator is not None:
            # First: other replicas take the shards over at once (a call still running
            # here finds its write fenced and is answered NOT_COORDINATOR).
            await coordinator.release_shards()
        widener, self._widener = self._widener, None
        if self.streams is not None:
            # Streams last as long as their clients: end them now (their members go on
            # with unary heartbeats, which reach the replicas that took the shards over).
            self.streams.close_all(
                StreamClosed(grpc.StatusCode.UNAVAILABLE, "The server is stopping: reopen the stream.")
            )
        if coordinator is not None:
            # So do WatchGroup streams (their groups are served elsewhere now): open, they
            # would hold the drain below for its whole grace.
            coordinator.history.close_all("The server is stopping: watch the group again.")
        if server is not None:
            await server.stop(self.settings.shutdown_grace_s)
        health_server, self._health_server = self._health_server, None
        if health_server is not None:  # after the drain: probes read NOT_SERVING meanwhile
            await health_server.stop(0)
        if widener is not None:
            await widener.stop()
        if coordinator is not None:
            await coordinator.stop()
        forwarder, self._forwarder = self._forwarder, None
        if forwarder is not None:
            await forwarder.close()
        metrics, self._metrics = self._metrics, None
        provider, self._own_tracer_provider = self._own_tracer_provider, None
        # The last metrics and spans go to their exporters, within a bound: one that does
        # not answer (an OTLP collector away) must hold neither the stop nor the exit.
        flushes = [metrics.shutdown] if metrics is not None else []
        if provider is not None:
            flushes.append(provider.shutdown)
        await asyncio.gather(*(bounded_in_thread(f, TELEMETRY_FLUSH_S, "telemetry_flush") for f in flushes))
        if store is not None:
            await store.close()
        embedded, self._embedded = self._embedded, None
        await close_embedded(embedded)
        self.identity.release()
        if store is not None:
            log.info("server_stopped")

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()
