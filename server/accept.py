"""Keeps several calls requested per method, so one busy method cannot queue the others.

grpc.aio's server loop asks gRPC core for the next call of each registered method one at a time: it
accepts one ConsumerGroupHeartbeat, then re-arms the request through `asyncio.wait`, which costs a
few event-loop iterations per accepted call. Under a burst of heartbeats every call waits in core
for its turn in that single pipeline, however cheap its handler; the stall benchmark measured
20-38 ms of queueing before the handler started, against 0.04 ms in the handler (docs/benchmarks.md).

`AcceptWidener` adds `depth - 1` more outstanding requests per registered method, each served by
its own small loop that hands the call to grpc's own per-call machinery (`_handle_rpc`, the same
coroutine the stock loop runs), so deadlines, cancellation and status codes behave exactly as
before. Calls accepted by the extra loops pass through the server's interceptors as the stock
loop's do: grpc keeps a server's interceptors where Python cannot read them, so `widened_server`
creates the server and its widener from one list (an interceptor that saw only some calls would
let tracing or authentication miss them silently). It relies on grpcio internals pinned in
requirements/runtime.txt; when they are missing it logs once and the server runs with the stock
single pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import structlog

log = structlog.get_logger(__name__)

try:  # grpcio private API; checked at import so a grpcio upgrade degrades, never crashes.
    from grpc._cython import cygrpc  # type: ignore[attr-defined]

    _HANDLE_RPC = cygrpc._handle_rpc
    _SCHEDULE_RPC = cygrpc._schedule_rpc_coro
    _METHOD_RESOLVER = cygrpc._MethodResolver
    _REQUEST_CALL_ERROR: type[BaseException] = cygrpc._RequestCallError
    SUPPORTED = True
except (ImportError, AttributeError):  # pragma: no cover - depends on the grpcio build
    SUPPORTED = False


def widened_server(
    depth: int,
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> tuple[grpc.aio.Server, AcceptWidener]:
    """A grpc.aio server and its widener, given the same interceptors."""
    server = grpc.aio.server(interceptors=list(interceptors) or None, options=list(options))
    return server, AcceptWidener(server, depth, interceptors)


class AcceptWidener:
    """Records a server's registered handlers, then widens its accept pipeline once it started.

    `interceptors` must be the ones the server was created with (see `widened_server`).
    """

    def __init__(
        self, server: grpc.aio.Server, depth: int, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
    ) -> None:
        if depth < 1:
            raise ValueError(f"accept depth must be at least 1, got {depth}")
        self._server = server
        self._depth = depth
        self._interceptors = tuple(interceptors)
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        self._loops: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[Any]] = set()
        #: Calls accepted by the extra requests (the stock loop's are not counted).
        self.accepted = 0
        original = server.add_registered_method_handlers

        def add_registered_method_handlers(
            service_name: str, method_handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
        ) -> None:
            for method, handler in method_handlers.items():
                # The method's path on the wire, as gRPC core registered it.
                self._handlers[f"/{service_name}/{method}"] = handler
            original(service_name, dict(method_handlers))

        # The generated add_*_to_server functions call this method; wrapping it on this one
        # instance is how the handlers become known without changing the generated code.
        server.add_registered_method_handlers = add_registered_method_handlers  # type: ignore[method-assign]

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self._handlers)

    def start(self) -> int:
        """Call after `server.start()`; returns how many extra requests are outstanding."""
        if self._depth == 1 or not self._handlers:
            return 0
        aio = getattr(self._server, "_server", None)  # grpc.aio's Cython server, also private
        if not SUPPORTED or not hasattr(aio, "_make_request_call_future"):
            log.warning("accept_widening_unavailable", grpcio=grpc.__version__)
            return 0
        loop = asyncio.get_running_loop()
        resolver = _METHOD_RESOLVER([], dict(self._handlers))
        for method in self._handlers:
            for _ in range(self._depth - 1):
                task = loop.create_task(self._accept(aio, method, resolver, loop), name=f"accept {method}")
                self._loops.add(task)
                task.add_done_callback(self._loops.discard)
        return len(self._loops)

    async def _accept(self, aio: Any, method: str, resolver: Any, loop: asyncio.AbstractEventLoop) -> None:
        method_bytes = method.encode()
        while aio.is_running():
            try:
                rpc_state = await aio._make_request_call_future(method_bytes)
            except _REQUEST_CALL_ERROR:
                # Core fails outstanding requests when the server shuts down; a failure while
                # still running is transient, as grpc's own loop treats it: ask again.
                continue
            except Exception:
                # A persistent failure (core refusing the request itself) would spin if retried;
                # this loop ends and the method keeps grpc's own pipeline.
                log.exception("accept_loop_failed", method=method)
                return
            self.accepted += 1
            # As grpc's own loop calls it: the server's interceptors, then the handler.
            coro = _HANDLE_RPC(method, resolver, self._interceptors, rpc_state, loop, False)
            call = loop.create_task(_SCHEDULE_RPC(coro, rpc_state, loop, method), name="rpc_task")
            # The loop holds tasks weakly; keep each call alive until it ends.
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    async def stop(self) -> None:
        """Ends the accept loops; the server's shutdown has already failed their requests."""
        for task in list(self._loops):
            task.cancel()
        if self._loops:
            await asyncio.gather(*self._loops, return_exceptions=True)
