"""Listening sockets that are never shared with another process.

gRPC core binds its ports with SO_REUSEPORT unless told otherwise, and Linux then lets
a second server bind a port that a running one already listens on: the kernel spreads
new connections over both, so one address answers for two unrelated coordinators.
Every listener of the service refuses that instead:

- `check_free` binds each address once, before anything is started, with SO_REUSEADDR
  (a port whose old connections are in TIME_WAIT is free: a restart must not wait for
  them) and without SO_REUSEPORT, which Linux refuses while any socket listens there;
- gRPC servers are created with `GRPC_OPTIONS` (no SO_REUSEPORT), so that a listener
  that appears between the check and the bind still makes the bind fail, and
  `add_port` turns that failure into the same error;
- the HTTP endpoint (metrics, web view) is a socketserver, which never sets SO_REUSEPORT.

A refusal is a `ListenError` naming the setting, the address and why, which the
command line prints as one line before exiting with 1.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable

#: The options every gRPC server of the service is created with.
GRPC_OPTIONS: tuple[tuple[str, int], ...] = (("grpc.so_reuseport", 0),)


class ListenError(Exception):
    """A listening address of the service that cannot be used."""

    def __init__(self, setting: str, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address} ({setting}): {reason}")
        self.setting = setting
        self.address = address
        self.reason = reason


def split_host_port(address: str) -> tuple[str | None, int]:
    """`host:port`, `[v6]:port` or `:port` as getaddrinfo takes them (None: every interface)."""
    host, _, port_text = address.rpartition(":")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    return (host.strip("[]") or None), port


def check_free(setting: str, address: str) -> None:
    """Raises ListenError unless every address `address` resolves to can be bound now."""
    try:
        host, port = split_host_port(address)
    except ValueError:
        raise ListenError(setting, address, "not a host:port address with a port from 0 to 65535") from None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ListenError(setting, address, f"the host cannot be resolved ({e.strerror})") from None
    bound = 0
    refusal: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        try:
            _try_bind(family, kind, proto, sockaddr)
            bound += 1
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ListenError(setting, address, "the address is already in use") from None
            refusal = e
    if bound == 0 and refusal is not None:
        raise ListenError(setting, address, f"the address cannot be bound ({refusal.strerror})")


def _try_bind(family: int, kind: int, proto: int, sockaddr: tuple[object, ...]) -> None:
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # As gRPC binds "[::]": one socket for IPv4 and IPv6, so an IPv4 listener conflicts.
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        probe.bind(sockaddr)


def add_port(setting: str, address: str, bind: Callable[[str], int]) -> int:
    """`bind(address)` (a gRPC server's add_insecure_port or add_secure_port); the port bound.

    gRPC raises RuntimeError (or returns 0) without saying why; the address is checked
    again to say it, as `check_free` would have before the start.
    """
    try:
        port = bind(address)
    except RuntimeError:
        port = 0
    if port == 0:
        check_free(setting, address)
        raise ListenError(setting, address, "the address cannot be bound")
    return port
