"""structlog set-up: JSON lines on stdout, one event name per state change."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

import structlog

from .telemetry import add_trace_ids


def configure_logging(level: str = "info", *, cache: bool = True) -> None:
    """`cache`: each logger keeps the configuration it first logged with (cheaper for the
    process's life); off where the configuration is put back afterwards (`logging_at`)."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            add_trace_ids,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=cache,
    )


@contextlib.contextmanager
def logging_at(level: str) -> Iterator[None]:
    """Logs as the server does at `level` for the duration, then as before: for benchmarks,
    which also run inside a test's process, where a logger that cached the benchmark's
    configuration would keep it for every later test (and its captured logs)."""
    previous = structlog.get_config()
    configure_logging(level, cache=False)
    try:
        yield
    finally:
        structlog.configure(**previous)
