"""ConnectWorker: a member of a Connect group, sharing connectors and tasks.

The same member as GroupMember (epochs, revoke-then-assign reconciliation,
fencing, client-side assignment) over ConnectGroupHeartbeat; its resources are
connector names (str) and `ConnectorTaskId` values, and its listener is a
`WorkerListener`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, runtime_checkable

from regroup.client.assignors.base import ClientAssignor
from regroup.client.member import GroupMember, _Why
from regroup.client.protocols import ConnectWire, Wire
from regroup.client.types import ConnectResource


@runtime_checkable
class ConnectListener(Protocol):
    """What a ConnectWorker's listener is: three callbacks, each given a frozenset of
    connector names (str) and ConnectorTaskId values, each a plain function or a
    coroutine function (plain functions for a SyncConnectWorker). Subclass
    `WorkerListener` to override only some."""

    def on_revoked(self, resources: frozenset[ConnectResource]) -> Awaitable[None] | None:
        """Stop these: another worker gets them once this returns."""

    def on_assigned(self, resources: frozenset[ConnectResource]) -> Awaitable[None] | None:
        """Start these."""

    def on_lost(self, resources: frozenset[ConnectResource]) -> Awaitable[None] | None:
        """These were taken away without a revocation (fenced, session expired)."""


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

    def __init__(self, target: Any, *, listener: ConnectListener | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self._listener = listener if listener is not None else WorkerListener()

    async def join(  # type: ignore[override]
        self,
        group_id: str,
        *,
        url: str,
        instance_id: str | None = None,
        client_assignors: Sequence[ClientAssignor] | None = None,
        assignor: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - GroupMember.join's
    ) -> None:
        """Joins the Connect group; `client_assignors` (for example
        IncrementalCooperativeAssignor()) or a server-side `assignor` decide who runs what.
        `timeout` as for GroupMember.join."""
        self._url = url
        await self._join(group_id, instance_id, assignor, client_assignors, timeout)

    async def _why_nothing_assigned(self) -> _Why:
        return _Why(
            "nothing assigned yet: has the group connectors (GroupAdmin.put_connectors), "
            "and more of them and their tasks than workers?",
            logging.INFO,
        )

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
