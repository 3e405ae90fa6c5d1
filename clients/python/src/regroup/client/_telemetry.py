"""OpenTelemetry spans when the application installed OpenTelemetry; nothing otherwise."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:  # An optional dependency: the client needs only grpcio and protobuf.
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised where OpenTelemetry is absent
    _trace = None  # type: ignore[assignment]
    _propagate = None  # type: ignore[assignment]


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    if _trace is None:
        yield None
        return
    tracer = _trace.get_tracer("regroup.client")
    with tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


def trace_metadata() -> tuple[tuple[str, str], ...] | None:
    """The current span's context as gRPC metadata (W3C `traceparent`, and `baggage`), so
    that the coordinator's span of the call joins the caller's trace; None without one."""
    if _propagate is None:
        return None
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return tuple(carrier.items()) or None
