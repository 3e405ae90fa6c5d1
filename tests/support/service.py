"""A running regroup server and a client connected to it (the `start_service` fixture of
tests/integration/conftest.py makes them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from regroup.server.app import RegroupServer
from regroup.server.clock import ManualClock
from regroup.server.config import Settings
from tests.support.wire import Stubs


@dataclasses.dataclass
class Service:
    """A running regroup server and a client connected to it."""

    server: RegroupServer
    stubs: Stubs
    settings: Settings

    @property
    def coordinator(self) -> Any:
        assert self.server.coordinator is not None
        return self.server.coordinator

    @property
    def clock(self) -> ManualClock:
        assert isinstance(self.server.clock, ManualClock)
        return self.server.clock


ServiceFactory = Callable[..., Awaitable[Service]]


async def _xmax(service: Service) -> int:
    """The next transaction id Postgres will hand out: it moves only when something writes."""
    rows = await service.coordinator.store.fetch("SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS x")
    return int(rows[0]["x"])
