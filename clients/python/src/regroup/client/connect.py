"""ConnectWorker: a member of a Connect group, sharing connectors and tasks.

The same member as GroupMember (epochs, revoke-then-assign reconciliation,
fencing, client-side assignment) over ConnectGroupHeartbeat; its resources are
connector names (str) and `ConnectorTaskId` values, and its listener is a
`WorkerListener`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

from regroup.client.assignors.base import ClientAssignor
from regroup.client.member import GroupMember
from regroup.client.protocols import ConnectWire, Wire
from regroup.client.types import ConnectResource


class WorkerListener:
    """Callbacks around connector/task ownership; override what you need.

    `on_revoked`: stop these connectors and tasks (the coordinator hands them to
    another worker only after it returns). `on_assigned`: start them.
    `on_lost`: fenced or session expired; by default the same as `on_revoked`."""

    def on_revoked(self, resources: frozenset[ConnectResource]) -> Awaitable[None] | None:
        return None

    def on_assigned(self, resources: frozenset[ConnectResource]) -> Awaitable[None] | None:
        return None

    def on_lost(self, resources: frozenset[ConnectResource]) -> Awaitable[None] | None:
        return self.on_revoked(resources)


class ConnectWorker(GroupMember):
    """`worker = ConnectWorker(target, listener=...)`, then `await worker.join(group, url=...)`."""

    _wire: Wire = ConnectWire

    def __init__(self, target: Any, *, listener: Any = None, **kwargs: Any) -> None:
        super().__init__(target, listener=listener if listener is not None else WorkerListener(), **kwargs)

    async def join(  # type: ignore[override]
        self,
        group_id: str,
        *,
        url: str,
        instance_id: str | None = None,
        client_assignors: Sequence[ClientAssignor] | None = None,
        assignor: str | None = None,
    ) -> None:
        """Joins the Connect group; `client_assignors` (for example
        IncrementalCooperativeAssignor()) or a server-side `assignor` decide who runs what."""
        self._url = url
        await self._join(group_id, instance_id, assignor, client_assignors)

    def subscribe(self, *, topics: Sequence[str] | None = None, regex: str | None = None) -> None:
        raise TypeError("Connect workers share their group's connectors; they have no subscription")

    def _fields(self) -> dict[str, object]:
        return {
            "instance_id": self._instance_id,
            "rebalance_timeout_ms": self._options.rebalance_timeout_ms,
            "url": self._url,
            "server_assignor": self._server_assignor,
            "client_assignors": self._client_assignors_field(),
            "client_id": self._options.client_id,
            "owned": self._owned,
        }
