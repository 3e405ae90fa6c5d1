"""Metrics: the server's instruments (OpenTelemetry metrics API) and where they are exported.

`Metrics` holds every instrument; the write path, the scheduler and the servicers record
into it. Without a provider its instruments are the API's no-ops, which is what tests and
the in-memory seams get by default. `start_metrics` builds the SDK's `MeterProvider` with:

- a Prometheus endpoint (`REGROUP_METRICS_LISTEN`, default 127.0.0.1:9464, "off" for
  none), prometheus_client's WSGI app on a registry of this server's own, so that
  several servers in one process (tests) do not mix their figures; the HTTP server
  is server/webview.py's, which serves the web view on the same port;
- an OTLP exporter when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or
  `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` variable is set (its other `OTEL_*` variables
  apply as the exporter reads them).

Names follow OpenTelemetry's semantic conventions where one applies, as the pinned
opentelemetry-semantic-conventions package states them: `rpc.server.call.duration` (seconds),
with `rpc.system.name`, `rpc.method` (service/method), `rpc.response.status_code` and, when that
status is a server error, `error.type`. The rest are regroup's own under `regroup.`. Every
duration is in seconds and every histogram has bucket bounds that fit what it measures (the
SDK's default bounds, 0 to 10,000, are meant for milliseconds: 0.5 ms would land in 0 - 5 s).
An error is labelled by its code's name in lower case (`stale_member_epoch`), in every metric.
Counters whose labels are known start at 0 for each of them: a series that first appears at its
first increase hides that increase from `rate()` and `increase()`.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.semconv._incubating.attributes.rpc_attributes import (
    RPC_METHOD,
    RPC_RESPONSE_STATUS_CODE,
    RPC_SYSTEM_NAME,
    RpcSystemNameValues,
)
from opentelemetry.semconv._incubating.metrics.rpc_metrics import RPC_SERVER_CALL_DURATION
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE

from regroup.reconciler.errors import ErrorCode
from regroup.reconciler.history import BUMP_CAUSES

T = TypeVar("T")

#: The instrumentation scope of the server's metrics.
SCOPE = "regroup.server"

#: Attributes by (service, method, error code, status): built once, not per call.
_RpcKey = tuple[str, str, int, str]

#: A group's state and type as the gauges report them.
GroupCounts = Callable[[], Mapping[tuple[str, str], int]]

# -- bucket bounds (seconds) -------------------------------------------------------------

#: Calls and store transactions: a heartbeat answered from memory takes a few hundred
#: microseconds, one that writes milliseconds, one held up by a slow store seconds (its
#: statements give up after REGROUP_STORE_TIMEOUT_MS, 10 s by default).
CALL_BOUNDS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: Target computations: a small group's take microseconds, a 100,000-partition group's
#: (offloaded to a worker process) seconds, longer on a loaded machine.
COMPUTATION_BOUNDS = (*CALL_BOUNDS, 30.0, 60.0)
#: From an epoch bump to Stable: members learn of the change as they heartbeat (every
#: 5 s by default), and a member that does not revoke is removed by the rebalance timeout.
STABILIZATION_BOUNDS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

# -- the labels each counter starts with, at 0 --------------------------------------------


def error_name(code: int) -> str:
    """An error code as every metric labels it: its name in lower case (`none` for success)."""
    try:
        return ErrorCode(code).name.lower()
    except ValueError:  # a code this build does not know (a newer replica's): its number
        return str(code)


#: Why a group epoch was bumped (server/events.py: the member records' cause, or the
#: operation's through BUMP_CAUSES).
BUMP_REASONS = (
    "member_joined",
    "member_left",
    "member_metadata_changed",
    "member_fenced",
    *sorted(set(BUMP_CAUSES.values())),
)
COMPUTATION_MODES = ("inline", "offloaded")
TIMEOUT_KINDS = ("session", "rebalance")
STORE_OUTCOMES = ("ok", "failed")
#: A committed offset (`none`), a partition refused (reconciler/offsets.py's checks) or a
#: whole commit refused (the member's epoch, the coordinator): other codes appear as they occur.
OFFSET_OUTCOMES = tuple(
    error_name(code)
    for code in (
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ErrorCode.PARTITION_NOT_OWNED,
        ErrorCode.STALE_MEMBER_EPOCH,
        ErrorCode.FENCED_MEMBER_EPOCH,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    )
)


def _store_answers() -> bool:
    return True


def _none_rebalancing() -> float:
    return 0.0


@dataclass(frozen=True)
class Gauges:
    """What the observable gauges read when metrics are collected (never on a request)."""

    groups: GroupCounts
    members: Callable[[], int]
    revocations_pending: Callable[[], int]
    shards_held: Callable[[], int]
    #: Totals since the start, plain integers (read from any thread): lease rounds by
    #: outcome, and shards by how they moved (acquired, released, lost).
    lease_rounds: Callable[[], Mapping[str, int]] = dict
    shard_moves: Callable[[], Mapping[str, int]] = dict
    #: Whether the store answered its last check (server/storewatch.py), read from any thread.
    store_available: Callable[[], bool] = _store_answers
    #: Seconds the longest rebalance in progress has lasted (0: none), read on the loop.
    rebalance_longest: Callable[[], float] = _none_rebalancing


class Metrics:
    """Every instrument of the server. What a heartbeat records (its duration, its outcome)
    is kept in plain Python state and read at each collection; the rest goes through the
    SDK's instruments (bench/steady.py --metrics measures the difference on and off)."""

    def __init__(self, meter: Meter | None = None, rpc_durations: RpcDurations | None = None) -> None:
        meter = meter or otel_metrics.NoOpMeter(SCOPE)
        self.meter = meter
        #: rpc.server.call.duration, aggregated here: the SDK's Histogram.record costs 8 - 20 us a
        #: call (it cleans and hashes the five attributes each time), which measured 7 - 10% of
        #: a heartbeat that changes nothing; a bucket index and four additions cost about 1 us.
        #: The readers that `start_metrics` makes add it to every collection (`RpcDurations`).
        self.rpc_durations = rpc_durations or RpcDurations()
        #: Heartbeats answered that wrote nothing, and that wrote: plain integers on the hot
        #: path (a counter's add costs about 5 us in the SDK, a tenth of what regroup itself
        #: spends on such a heartbeat), read by an observable counter at each collection.
        self.heartbeats_unchanged = 0
        self.heartbeats_written = 0
        meter.create_observable_counter(
            "regroup.heartbeats",
            [self._observe_heartbeats],
            unit="{heartbeat}",
            description="Heartbeats answered, by outcome: unchanged (no write) or written.",
        )
        self.epoch_bumps = meter.create_counter(
            "regroup.group.epoch_bumps", unit="{bump}", description="Group epoch bumps, by reason."
        )
        self.computations = meter.create_counter(
            "regroup.assignment.computations",
            unit="{computation}",
            description="Target assignments computed, inline (in the request) or offloaded (worker process).",
        )
        self.computation_duration = meter.create_histogram(
            "regroup.assignment.computation.duration",
            unit="s",
            description="How long computing a target assignment took.",
            explicit_bucket_boundaries_advisory=COMPUTATION_BOUNDS,
        )
        self.stabilization = meter.create_histogram(
            "regroup.group.stabilization.duration",
            unit="s",
            description="From a group epoch bump until the group is Stable at that epoch or a later one.",
            explicit_bucket_boundaries_advisory=STABILIZATION_BOUNDS,
        )
        self.timeouts = meter.create_counter(
            "regroup.timeouts", unit="{timeout}", description="Session and rebalance timeouts that fired."
        )
        self.store_transactions = meter.create_counter(
            "regroup.store.transactions",
            unit="{transaction}",
            description="Group writes sent to Postgres, by outcome (ok, failed).",
        )
        self.store_duration = meter.create_histogram(
            "regroup.store.transaction.duration",
            unit="s",
            description="How long a group write took.",
            explicit_bucket_boundaries_advisory=CALL_BOUNDS,
        )
        self.offsets = meter.create_counter(
            "regroup.offsets",
            unit="{partition}",
            description="Partition offsets committed, or refused, by outcome (the error code's name).",
        )
        for counter, label, values in (
            (self.epoch_bumps, "reason", BUMP_REASONS),
            (self.computations, "mode", COMPUTATION_MODES),
            (self.timeouts, "kind", TIMEOUT_KINDS),
            (self.store_transactions, "outcome", STORE_OUTCOMES),
            (self.offsets, "outcome", OFFSET_OUTCOMES),
        ):
            for value in values:
                counter.add(0, {label: value})

    def _observe_heartbeats(self, _: CallbackOptions) -> Iterable[Observation]:
        # Two reads of ints another thread increments: each is atomic, and a total only grows.
        return [
            Observation(self.heartbeats_unchanged, {"outcome": "unchanged"}),
            Observation(self.heartbeats_written, {"outcome": "written"}),
        ]

    # -- recording ---------------------------------------------------------------------

    def rpc(self, service: str, method: str, started: float, error_code: int, status: str = "OK") -> None:
        """One answered RPC: `started` is `time.perf_counter()` at its start."""
        self.rpc_durations.record((service, method, error_code, status), time.perf_counter() - started)

    def heartbeat(self, written: bool) -> None:
        if written:
            self.heartbeats_written += 1
        else:
            self.heartbeats_unchanged += 1

    def epoch_bumped(self, reason: str) -> None:
        self.epoch_bumps.add(1, {"reason": reason})

    def computed(self, mode: str, seconds: float) -> None:
        self.computations.add(1, {"mode": mode})
        self.computation_duration.record(seconds, {"mode": mode})

    def stable(self, seconds: float) -> None:
        self.stabilization.record(seconds)

    def timed_out(self, kind: str) -> None:
        self.timeouts.add(1, {"kind": kind})

    def stored(self, seconds: float, ok: bool) -> None:
        outcome = {"outcome": "ok" if ok else "failed"}
        self.store_transactions.add(1, outcome)
        self.store_duration.record(seconds, outcome)

    def offsets_outcome(self, counts: Mapping[str, int]) -> None:
        for outcome, n in counts.items():
            self.offsets.add(n, {"outcome": outcome})

    # -- gauges --------------------------------------------------------------------------

    def observe(self, gauges: Gauges) -> None:
        """Registers the gauges, read from the coordinator at each collection."""

        def groups(_: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(n, {"group.type": kind, "group.state": state})
                for (kind, state), n in gauges.groups().items()
            ]

        def one(read: Callable[[], float]) -> Callable[[CallbackOptions], Iterable[Observation]]:
            return lambda _: [Observation(read())]

        self.meter.create_observable_gauge(
            "regroup.groups", [groups], unit="{group}", description="Groups in memory, by type and state."
        )
        self.meter.create_observable_gauge(
            "regroup.members", [one(gauges.members)], unit="{member}", description="Members of those groups."
        )
        self.meter.create_observable_gauge(
            "regroup.revocations.pending",
            [one(gauges.revocations_pending)],
            unit="{partition}",
            description="Partitions (or Connect resources) members were asked to revoke and have not yet.",
        )
        self.meter.create_observable_counter(
            "regroup.lease.rounds",
            [lambda _: [Observation(n, {"outcome": k}) for k, n in gauges.lease_rounds().items()]],
            unit="{round}",
            description="Lease rounds (one statement renewing, releasing and acquiring), by outcome.",
        )
        self.meter.create_observable_counter(
            "regroup.shard.moves",
            [lambda _: [Observation(n, {"move": k}) for k, n in gauges.shard_moves().items()]],
            unit="{shard}",
            description="Shards this replica acquired, released, or lost (taken while it could not renew).",
        )
        self.meter.create_observable_gauge(
            "regroup.shards.held",
            [one(gauges.shards_held)],
            unit="{shard}",
            description="Shards whose lease this replica holds.",
        )
        self.meter.create_observable_gauge(
            "regroup.store.available",
            [lambda _: [Observation(int(gauges.store_available()))]],
            description="1 while the store (Postgres) answered its last check, 0 while it does not.",
        )
        self.meter.create_observable_gauge(
            "regroup.group.rebalance.longest",
            [one(gauges.rebalance_longest)],
            unit="s",
            description="How long the longest rebalance in progress has lasted: since the earliest "
            "epoch bump of a group not Stable since (0 when every group is Stable or Empty).",
        )


#: gRPC status codes a server reports as errors (OpenTelemetry's gRPC conventions): the
#: others (INVALID_ARGUMENT, PERMISSION_DENIED, ...) are the caller's, and get no error.type.
GRPC_SERVER_ERRORS = frozenset(
    {"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"}
)


class _Series:
    """One attribute set's cumulative histogram, as the SDK's explicit-bucket aggregation
    keeps it: a value v falls in the first bucket whose bound is >= v."""

    __slots__ = ("count", "counts", "max", "min", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(CALL_BOUNDS) + 1)
        self.sum = 0.0
        self.count = 0
        self.min = math.inf
        self.max = -math.inf


class RpcDurations:
    """rpc.server.call.duration, recorded on the event loop and read as OpenTelemetry points."""

    NAME = RPC_SERVER_CALL_DURATION
    UNIT = "s"
    DESCRIPTION = "Duration of the RPCs this server answered."

    def __init__(self) -> None:
        self.series: dict[_RpcKey, _Series] = {}
        self.start_ns = time.time_ns()

    def record(self, key: _RpcKey, seconds: float) -> None:
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = _Series()
        series.counts[bisect.bisect_left(CALL_BOUNDS, seconds)] += 1
        series.sum += seconds
        series.count += 1
        if seconds < series.min:
            series.min = seconds
        if seconds > series.max:
            series.max = seconds

    def points(self) -> list[Any]:
        """A consistent copy, as HistogramDataPoints (call it on the loop that records)."""
        from opentelemetry.sdk.metrics.export import HistogramDataPoint

        now = time.time_ns()
        return [
            HistogramDataPoint(
                attributes=rpc_attributes(key),
                start_time_unix_nano=self.start_ns,
                time_unix_nano=now,
                count=s.count,
                sum=s.sum,
                bucket_counts=list(s.counts),
                explicit_bounds=list(CALL_BOUNDS),
                min=s.min,
                max=s.max,
            )
            for key, s in list(self.series.items())
        ]


def rpc_attributes(key: _RpcKey) -> dict[str, str]:
    """A call's attributes (built at each collection, not per call): the conventions'
    fully-qualified `rpc.method`, and the response's error code by name."""
    service, method, code, status = key
    attributes = {
        RPC_SYSTEM_NAME: RpcSystemNameValues.GRPC.value,
        RPC_METHOD: f"{service}/{method}",
        RPC_RESPONSE_STATUS_CODE: status,
        "regroup.error_code": error_name(code),
    }
    if status in GRPC_SERVER_ERRORS:
        attributes[ERROR_TYPE] = status
    return attributes


def with_rpc_durations(metrics_data: Any, points: list[Any]) -> Any:
    """`metrics_data` (one collection of the SDK) with rpc.server.call.duration added to the
    server's scope, as a cumulative histogram."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Histogram,
        Metric,
        MetricsData,
        ResourceMetrics,
        ScopeMetrics,
    )

    if metrics_data is None or not points:
        return metrics_data
    metric = Metric(
        RpcDurations.NAME,
        RpcDurations.DESCRIPTION,
        RpcDurations.UNIT,
        Histogram(points, AggregationTemporality.CUMULATIVE),
    )
    resources = []
    for resource in metrics_data.resource_metrics:
        scopes = list(resource.scope_metrics)
        for i, scope in enumerate(scopes):
            if scope.scope.name == SCOPE:
                scopes[i] = ScopeMetrics(scope.scope, [*scope.metrics, metric], scope.schema_url)
                break
        resources.append(ResourceMetrics(resource.resource, scopes, resource.schema_url))
    return MetricsData(resources)


def merging(reader_type: type[T], points: Callable[[], list[Any]]) -> type[T]:
    """A subclass of an SDK MetricReader whose every collection also carries the RPC
    durations. It overrides `_receive_metrics`, the hook through which MetricReader.collect
    hands each collection to its subclass (the Prometheus reader's collector, the periodic
    reader's exporter); tests/unit/server/test_telemetry.py and tests/integration/test_metrics.py
    read the histogram back through it."""

    class Merging(reader_type):  # type: ignore[valid-type,misc]
        def _receive_metrics(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> None:
            merged = with_rpc_durations(metrics_data, points())
            super()._receive_metrics(merged, timeout_millis, **kwargs)

    Merging.__name__ = f"RpcDurations{reader_type.__name__}"
    return Merging


def on_loop_call(
    loop: asyncio.AbstractEventLoop, read: Callable[[], T], timeout_s: float = 2.0
) -> Callable[[], T]:
    """`read`, run on `loop`'s thread when called from another (a scrape), directly on it."""
    loop_thread = threading.get_ident()  # called on the loop's thread

    def on_the_loop() -> T:
        if threading.get_ident() == loop_thread:
            return read()
        future = concurrent.futures.Future[T]()

        def call() -> None:
            try:
                future.set_result(read())
            except Exception as e:  # noqa: BLE001 - handed to the reader, which reports it
                future.set_exception(e)

        loop.call_soon_threadsafe(call)
        return future.result(timeout_s)

    return on_the_loop


def on_loop(loop: asyncio.AbstractEventLoop, gauges: Gauges, timeout_s: float = 2.0) -> Gauges:
    """`gauges` read on `loop`'s thread: Prometheus scrapes from its own thread, while the
    groups change on the loop (iterating them from another thread could see a dict change
    size). A read from the loop's own thread (an in-process reader) runs directly."""
    return Gauges(
        on_loop_call(loop, gauges.groups, timeout_s),
        on_loop_call(loop, gauges.members, timeout_s),
        on_loop_call(loop, gauges.revocations_pending, timeout_s),
        on_loop_call(loop, gauges.shards_held, timeout_s),
        gauges.lease_rounds,
        gauges.shard_moves,
        gauges.store_available,
        on_loop_call(loop, gauges.rebalance_longest, timeout_s),
    )


@dataclass
class MetricsRuntime:
    """The SDK's provider and the Prometheus endpoint of one server, stopped together."""

    metrics: Metrics
    provider: Any = None
    http: Any = None
    thread: Any = None
    #: The Prometheus endpoint's port (0 when there is none).
    port: int = 0
    #: What the port serves (webview.HttpApp): /metrics, and the web view once asked to.
    app: Any = None

    def shutdown(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
        if self.provider is not None:
            self.provider.shutdown()


def otlp_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    )


def start_metrics(listen: str, replica_id: str, environ: Mapping[str, str] = os.environ) -> MetricsRuntime:
    """The provider for `listen` (host:port of the Prometheus endpoint, or "off") and OTLP
    if the environment asks for it; plain no-ops when neither. Call it on the event loop
    that will record: the readers read the RPC durations on it."""
    durations = RpcDurations()
    points = on_loop_call(asyncio.get_running_loop(), durations.points)
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource

    readers: list[MetricReader] = []
    http = thread = app = None
    port = 0
    if listen != "off":
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, make_wsgi_app

        from .webview import HttpApp, serve

        registry = CollectorRegistry(auto_describe=True)
        readers.append(merging(PrometheusMetricReader, points)(registry=registry))
        app = HttpApp(make_wsgi_app(registry))
        http, thread = serve(listen, app)
        port = int(http.server_port)
    if otlp_wanted(environ):
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers.append(merging(PeriodicExportingMetricReader, points)(OTLPMetricExporter()))
    if not readers:
        return MetricsRuntime(Metrics())
    resource = Resource.create({"service.name": "regroup", "service.instance.id": replica_id})
    # No exemplars: sampling them costs every record a look at the current span.
    provider = MeterProvider(
        resource=resource, metric_readers=readers, exemplar_filter=AlwaysOffExemplarFilter()
    )
    metrics = Metrics(provider.get_meter(SCOPE), durations)
    return MetricsRuntime(metrics, provider, http, thread, port, app)


# -- traces ----------------------------------------------------------------------------------


def tracing_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Traces are off unless the standard OpenTelemetry variables ask for them: an OTLP
    endpoint, or OTEL_TRACES_EXPORTER naming an exporter; OTEL_SDK_DISABLED=true wins."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters == "none":
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(exporters or endpoint)


def start_tracing(replica_id: str, environ: Mapping[str, str] = os.environ) -> Any:
    """A TracerProvider exporting as OTEL_TRACES_EXPORTER says (otlp, the default, and/or
    console), sampled as OTEL_TRACES_SAMPLER says (the SDK reads it); None when off."""
    if not tracing_wanted(environ):
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporters: list[SpanExporter] = []
    for name in (environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp").split(","):
        name = name.strip()
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console or none).")
    resource = Resource.create({"service.name": "regroup", "service.instance.id": replica_id})
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def add_trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the trace and span ids of the span the event was logged in."""
    context = otel_trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = format(context.trace_id, "032x")
        event["span_id"] = format(context.span_id, "016x")
    return event
