"""TLS for the client's channels: `GroupMember(..., tls=TlsConfig(ca=...))`.

Every channel the client opens, to the bootstrap address and to each coordinator it
follows, is then a TLS channel with these settings. Files are read each time a
channel is opened, so a client certificate rotated on disk is used by the next
channel (a running channel keeps the one it connected with).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

#: PEM content (bytes, or text that starts with "-----BEGIN"), or the path of a PEM file.
PemSource = bytes | str | os.PathLike[str]


@dataclass(frozen=True)
class TlsConfig:
    """How the client speaks TLS.

    `ca`: the CA certificates that verify the server (default: gRPC's bundled roots,
    or the file named by GRPC_DEFAULT_SSL_ROOTS_FILE_PATH). `cert` and `key`: the
    client certificate and its key, for a server that requires one (mTLS); both or
    neither. `server_name_override`: the name the server's certificate is checked
    against instead of the host of the address (tests, or an address that is an IP
    the certificate does not name). Each is PEM content or a path; a config of paths
    is small to pickle (a Spark task) but the files must exist where it is used."""

    ca: PemSource | None = None
    cert: PemSource | None = None
    key: PemSource | None = None
    server_name_override: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("TlsConfig: cert and key go together (a client certificate needs its key)")

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials, from the files as they are now."""
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca), private_key=_pem(self.key), certificate_chain=_pem(self.cert)
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name_override is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name_override)]


def _pem(source: PemSource | None) -> bytes | None:
    if source is None or isinstance(source, bytes):
        return source
    if isinstance(source, str) and source.lstrip().startswith("-----BEGIN"):
        return source.encode("ascii")
    return Path(source).read_bytes()


def aio_connector(
    tls: TlsConfig | None, interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None
) -> Callable[[str], grpc.aio.Channel]:
    """How an asyncio client opens its channels: the bootstrap one, and one per
    coordinator it follows, all alike (insecure without `tls`)."""

    def connect(address: str) -> grpc.aio.Channel:
        if tls is None:
            return grpc.aio.insecure_channel(address, interceptors=interceptors)
        return grpc.aio.secure_channel(
            address, tls.credentials(), options=tls.channel_options(), interceptors=interceptors
        )

    return connect


def blocking_connector(tls: TlsConfig | None) -> Callable[[str], grpc.Channel]:
    """`aio_connector` for blocking channels."""

    def connect(address: str) -> grpc.Channel:
        if tls is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, tls.credentials(), options=tls.channel_options())

    return connect


def check_factory(tls: TlsConfig | None, channel_factory: object) -> None:
    """`tls=` and `channel_factory=` both say how channels are opened: one at most."""
    if tls is not None and channel_factory is not None:
        raise ValueError(
            "pass tls= or channel_factory=, not both: a channel_factory makes TLS channels itself"
        )
