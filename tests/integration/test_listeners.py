"""A port in use ends the start with one line naming the setting: never a shared port."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Iterator

import pytest

from regroup.server.app import RegroupServer
from regroup.server.config import Settings
from regroup.server.listeners import ListenError
from regroup.v1 import admin_pb2
from tests.support.service import ServiceFactory


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port a plain TCP listener of another program holds."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


async def test_a_second_server_on_a_running_servers_port_refuses_to_start(
    start_service: ServiceFactory, database: str
) -> None:
    first = await start_service()
    await first.stubs.create_topic("orders", 3)
    address = f"127.0.0.1:{first.server.port}"
    second = RegroupServer(Settings(listen=address, database_url=database, metrics_listen="off"))
    with pytest.raises(ListenError) as raised:
        await second.start()
    assert str(raised.value) == f"cannot listen on {address} (REGROUP_LISTEN): the address is already in use"
    assert second.coordinator is None, "refused before anything started"
    # Every call on the port still reaches the first server, and only it.
    for _ in range(6):
        described = await first.stubs.admin.DescribeTopics(admin_pb2.DescribeTopicsRequest())
        assert [t.name for t in described.topics] == ["orders"]


@pytest.mark.parametrize(
    ("field", "setting"),
    [("health_listen", "REGROUP_HEALTH_LISTEN"), ("metrics_listen", "REGROUP_METRICS_LISTEN")],
)
async def test_every_listener_refuses_a_port_in_use(
    database: str, held_port: int, field: str, setting: str
) -> None:
    address = f"127.0.0.1:{held_port}"
    listeners = {"metrics_listen": "off", field: address}
    settings = Settings(listen="127.0.0.1:0", database_url=database, **listeners)
    server = RegroupServer(settings)
    with pytest.raises(ListenError, match=rf"^cannot listen on {address} \({setting}\): .*already in use$"):
        await server.start()


async def test_a_port_taken_after_the_check_stops_what_the_start_began(database: str, held_port: int) -> None:
    """The health port taken between the check and the bind: the start fails with the same
    error and leaves nothing running (the store closed, the API port free again)."""
    settings = Settings(
        listen="127.0.0.1:0",
        database_url=database,
        metrics_listen="off",
        health_listen=f"127.0.0.1:{held_port}",
    )
    server = RegroupServer(settings)
    server.check_listeners = lambda: None  # type: ignore[method-assign]
    with pytest.raises(ListenError, match="REGROUP_HEALTH_LISTEN"):
        await server.start()
    assert server.coordinator is None
    assert server._store is None
    assert server.port != 0
    with socket.socket() as again:
        again.bind(("127.0.0.1", server.port))  # the API port bound on the way was let go


@pytest.mark.parametrize("variable", ["REGROUP_LISTEN", "REGROUP_METRICS_LISTEN", "REGROUP_HEALTH_LISTEN"])
async def test_the_command_exits_1_with_one_line_naming_the_setting(held_port: int, variable: str) -> None:
    """As `make run` starts it. The ports are checked before the database is reached: the
    DATABASE_URL here answers nothing, and the error is still the port's."""
    address = f"127.0.0.1:{held_port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
    env.update(
        DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        REGROUP_LISTEN="127.0.0.1:0",
        REGROUP_METRICS_LISTEN="127.0.0.1:0",
    )
    env[variable] = address
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "regroup.server",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 1
    assert stderr.decode().splitlines() == [
        f"regroup: cannot listen on {address} ({variable}): the address is already in use"
    ]


async def test_a_port_given_as_a_flag_is_named_as_the_flag(held_port: int) -> None:
    address = f"127.0.0.1:{held_port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
    env.update(DATABASE_URL="postgresql://nobody@127.0.0.1:1/none", REGROUP_METRICS_LISTEN="off")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "regroup.server",
        "--listen",
        address,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 1
    assert stderr.decode().splitlines() == [
        f"regroup: cannot listen on {address} (--listen): the address is already in use"
    ]
