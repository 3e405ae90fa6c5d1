"""The service's default ports, held by plain listeners while a test runs.

`make run` (or `make run-cluster`) may be up while the tests run: a test or benchmark
that binds a default port then fails, or talks to the developer's server. Holding those
ports makes such a test fail every time, not only on a machine where something else
happens to listen there.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator

from regroup.server.cluster import DEFAULT_REPLICAS
from regroup.server.config import DEFAULT_LISTEN, DEFAULT_METRICS_LISTEN


def default_ports() -> list[tuple[str, int]]:
    """The API and metrics ports of `make run`, and the consecutive ones of `make run-cluster`."""
    ports = []
    for listen in (DEFAULT_LISTEN, DEFAULT_METRICS_LISTEN):
        host, _, port = listen.rpartition(":")
        ports += [(host, int(port) + i) for i in range(DEFAULT_REPLICAS)]
    return ports


@contextlib.contextmanager
def default_ports_held() -> Iterator[list[tuple[str, int]]]:
    """Listens on every default port for the duration; yields those it holds. A port some
    other process holds already (a `make run`) is occupied all the same, and skipped."""
    held: list[socket.socket] = []
    addresses = []
    try:
        for host, port in default_ports():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, port))
                sock.listen()
            except OSError as e:
                sock.close()
                if e.errno != errno.EADDRINUSE:
                    raise
                continue
            held.append(sock)
            addresses.append((host, port))
        yield addresses
    finally:
        for sock in held:
            sock.close()
