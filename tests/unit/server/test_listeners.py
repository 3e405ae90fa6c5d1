"""Listening addresses are checked before the start and never shared (server/listeners.py)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from regroup.server.listeners import GRPC_OPTIONS, ListenError, add_port, check_free


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port a plain TCP listener of another program holds."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


@pytest.fixture
async def grpc_port() -> AsyncIterator[int]:
    """A port a gRPC server with gRPC's default options (SO_REUSEPORT on) listens on, as
    another regroup of an earlier version, or any other gRPC service, would."""
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield port
    await server.stop(0)


def _refusal(setting: str, address: str) -> ListenError:
    with pytest.raises(ListenError) as raised:
        check_free(setting, address)
    return raised.value


def test_a_port_held_by_a_plain_listener_is_refused_on_every_form_of_its_address(held_port: int) -> None:
    for address in (f"127.0.0.1:{held_port}", f"0.0.0.0:{held_port}", f"[::]:{held_port}", f":{held_port}"):
        error = _refusal("REGROUP_LISTEN", address)
        assert str(error) == f"cannot listen on {address} (REGROUP_LISTEN): the address is already in use"
        assert (error.setting, error.address) == ("REGROUP_LISTEN", address)


async def test_a_port_held_by_a_grpc_server_with_so_reuseport_is_refused(grpc_port: int) -> None:
    error = _refusal("REGROUP_HEALTH_LISTEN", f"127.0.0.1:{grpc_port}")
    assert "already in use" in str(error)


async def test_the_services_grpc_options_make_the_bind_itself_fail(grpc_port: int) -> None:
    """A listener that appears between the check and the bind: gRPC's default would share
    the port (SO_REUSEPORT on both sides); the service's options refuse it."""
    shared = grpc.aio.server()
    assert shared.add_insecure_port(f"127.0.0.1:{grpc_port}") == grpc_port  # what gRPC does by default
    ours = grpc.aio.server(options=list(GRPC_OPTIONS))
    with pytest.raises(ListenError, match=r"\(REGROUP_LISTEN\): the address is already in use"):
        add_port("REGROUP_LISTEN", f"127.0.0.1:{grpc_port}", ours.add_insecure_port)
    await shared.stop(0)
    await ours.stop(0)


def test_a_free_port_and_port_zero_pass() -> None:
    check_free("REGROUP_LISTEN", "127.0.0.1:0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    check_free("REGROUP_METRICS_LISTEN", f"127.0.0.1:{port}")


def test_a_port_whose_listener_left_connections_in_time_wait_is_free() -> None:
    """A restart on the same port must not wait for the old connections to time out."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC and socketserver do
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = listener.accept()
            accepted.close()  # the listening side closes first: its end goes to TIME_WAIT
    check_free("REGROUP_LISTEN", f"127.0.0.1:{port}")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("no-such-host.invalid:5000", "the host cannot be resolved"),
        ("192.0.2.1:5000", "the address cannot be bound (Cannot assign requested address)"),
        ("127.0.0.1:70000", "not a host:port address"),
        ("127.0.0.1:http", "not a host:port address"),
    ],
)
def test_an_address_that_cannot_be_bound_says_why(address: str, reason: str) -> None:
    assert reason in str(_refusal("REGROUP_METRICS_LISTEN", address))
