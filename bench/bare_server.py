"""The baseline: a bare grpc.aio GroupCoordinator whose handler does nothing.

Same service, same request and response types, same event loop (uvloop),
server options and accept depth (`REGROUP_ACCEPT_DEPTH`, see
server/accept.py) as regroup; it parses the request and returns a constant
response, which is the least any coordinator has to do per heartbeat.

    python -m bench.bare_server PORT [asyncio]
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import grpc

from regroup.server.accept import AcceptWidener
from regroup.server.config import load_settings
from regroup.v1 import coordinator_pb2, coordinator_pb2_grpc

RESPONSE = coordinator_pb2.ConsumerGroupHeartbeatResponse(
    member_epoch=1, heartbeat_interval_ms=5000, session_timeout_ms=45000
)


class BareCoordinator(coordinator_pb2_grpc.GroupCoordinatorServicer):
    async def ConsumerGroupHeartbeat(
        self, request: coordinator_pb2.ConsumerGroupHeartbeatRequest, context: Any
    ) -> coordinator_pb2.ConsumerGroupHeartbeatResponse:
        return RESPONSE


async def serve(port: int) -> None:
    limit = 4 * 1024 * 1024
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
    )
    depth = load_settings(os.environ).accept_depth  # parsed and checked as regroup does
    widener = AcceptWidener(server, depth)
    coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server(BareCoordinator(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    widener.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await server.stop(0.5)
    await widener.stop()


if __name__ == "__main__":
    if sys.argv[2:] == ["asyncio"]:  # the standard loop, to measure what uvloop saves
        asyncio.run(serve(int(sys.argv[1])))
    else:
        import uvloop

        uvloop.run(serve(int(sys.argv[1])))
