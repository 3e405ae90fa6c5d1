"""TLS for the server: its certificate and key, re-read when their files change.

cert-manager (or a kubelet updating a mounted Secret) replaces certificates in
place, with no restart: the files behind the configured paths are swapped, often
through a symlink. `CertificateFiles` stats the configured paths (following the
symlinks, never a descriptor opened earlier) and re-reads them when what they
point at changed. A new set that does not load (a key written before its
certificate, a truncated file) is refused with a warning and the one in use is
kept; the next check tries again.

gRPC asks for a new configuration at every TLS handshake, from one of its own
threads (`grpc.dynamic_ssl_server_credentials`): the checks are rate-limited
(`check_interval_s`) and serialised by a lock. Connections already open keep the
certificate they were set up with; every new one gets the current one.

Validation uses the standard `ssl` module, so the server needs no extra package:
a certificate that does not parse, a key that does not, or a key that does not
match the certificate, is a `CertificateError` naming the setting.
"""

from __future__ import annotations

import hashlib
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from .filewatch import FileSignature, file_signature

log = structlog.get_logger("regroup")

CERT = "REGROUP_TLS_CERT"
KEY = "REGROUP_TLS_KEY"
CLIENT_CA = "REGROUP_TLS_CLIENT_CA"
CA = "REGROUP_TLS_CA"

#: How often, at most, the files are looked at (each look is a stat per file).
DEFAULT_CHECK_INTERVAL_S = 1.0

_PEM_CERT = b"-----BEGIN CERTIFICATE-----"

#: What identifies the content behind a path without reading it: a symlink swap or
#: a rename changes the inode, a rewrite in place the size or the modification time.
Signature = tuple[FileSignature, ...]


class CertificateError(ValueError):
    """A certificate, key or CA file is missing or does not load; the message names the setting."""


@dataclass(frozen=True, slots=True)
class TlsPaths:
    cert: Path
    key: Path
    #: Require client certificates signed by this CA (mTLS).
    client_ca: Path | None = None
    #: The CA that signed the other replicas' server certificates (forwarding).
    ca: Path | None = None

    def named(self) -> list[tuple[str, Path]]:
        found = [(CERT, self.cert), (KEY, self.key)]
        found += [(CLIENT_CA, self.client_ca)] if self.client_ca is not None else []
        found += [(CA, self.ca)] if self.ca is not None else []
        return found


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """The PEM contents of one consistent, validated read of the files."""

    cert: bytes
    key: bytes
    client_ca: bytes | None
    ca: bytes | None
    #: 1 for the set loaded at start, one more at each change taken.
    generation: int

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the first certificate (DER), as `openssl x509 -fingerprint -sha256` shows it
        (see `fingerprint`)."""
        return fingerprint(self.cert)

    @property
    def peer_ca(self) -> bytes | None:
        """The CA to verify other replicas with: REGROUP_TLS_CA, else the client CA, else
        None (gRPC's default roots)."""
        return self.ca if self.ca is not None else self.client_ca


def fingerprint(pem: bytes) -> str:
    """Upper-case hex bytes joined by colons: what `openssl x509 -noout -fingerprint -sha256`
    prints after `sha256 Fingerprint=`, so that an operator can compare the log with it."""
    der = ssl.PEM_cert_to_DER_cert(_first_certificate(pem).decode("ascii"))
    return hashlib.sha256(der).digest().hex(":").upper()


def _first_certificate(pem: bytes) -> bytes:
    start = pem.index(_PEM_CERT)
    end_marker = b"-----END CERTIFICATE-----"
    end = pem.index(end_marker, start) + len(end_marker)
    return pem[start:end]


def signature(paths: TlsPaths) -> Signature:
    """What the paths point at now (None for a path that does not exist)."""
    return tuple(file_signature(path) for _, path in paths.named())


def _read(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CertificateError(f"{setting} ({path}) does not exist.") from None
    except OSError as e:
        raise CertificateError(f"{setting} ({path}) cannot be read: {e.strerror or e}.") from None


def _check_certificates(setting: str, path: Path, pem: bytes) -> None:
    """`pem` holds certificates only, every one of which parses."""
    text = pem.decode("ascii", errors="replace")
    if _PEM_CERT not in pem:
        raise CertificateError(f"{setting} ({path}) holds no PEM certificate (-----BEGIN CERTIFICATE-----).")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as e:
        raise CertificateError(f"{setting} ({path}) holds a certificate that does not parse: {e}.") from None


def _no_password() -> bytes:
    # An encrypted key would otherwise make OpenSSL prompt on the terminal; gRPC
    # takes unencrypted keys only, so an empty password fails such a key at once.
    return b""


def _check_pair(paths: TlsPaths) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(paths.cert, paths.key, password=_no_password)
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise CertificateError(
                f"{KEY} ({paths.key}) is not the key of the certificate in {CERT} ({paths.cert})."
            ) from None
        raise CertificateError(
            f"{KEY} ({paths.key}) holds no usable private key (PEM, unencrypted): {e}."
        ) from None
    except OSError as e:
        raise CertificateError(f"{CERT} or {KEY} cannot be read: {e}.") from None


def load(paths: TlsPaths, generation: int = 1) -> TlsMaterial:
    """Reads and validates the files once; CertificateError says what is wrong.

    The key is checked against the certificate by loading both from their paths,
    then the files are read again: a set that changed meanwhile is refused (its
    checked and its read contents might differ), and is taken at a later look."""
    read = {setting: _read(setting, path) for setting, path in paths.named()}
    for setting, path in paths.named():
        if setting != KEY:
            _check_certificates(setting, path, read[setting])
    if b"PRIVATE KEY-----" not in read[KEY]:
        raise CertificateError(
            f"{KEY} ({paths.key}) holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)."
        )
    _check_pair(paths)
    if any(_read(setting, path) != read[setting] for setting, path in paths.named()):
        raise CertificateError(f"{CERT} and {KEY} changed while being read.")
    return TlsMaterial(
        cert=read[CERT],
        key=read[KEY],
        client_ca=read.get(CLIENT_CA),
        ca=read.get(CA),
        generation=generation,
    )


class CertificateFiles:
    """The server's TLS files, re-read when they change (see the module's docs).

    `load()` at construction raises CertificateError; later changes that do not
    load are logged and skipped. `clock` (monotonic seconds) paces the checks."""

    def __init__(
        self,
        paths: TlsPaths,
        *,
        clock: Callable[[], float] = time.monotonic,
        check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
    ) -> None:
        self.paths = paths
        self._clock = clock
        self._interval_s = check_interval_s
        self._lock = threading.Lock()
        seen = signature(paths)
        self._current = load(paths)
        #: What the paths pointed at when the current set was read, or when a set was refused.
        self._seen = seen
        self._checked_at = clock()
        #: Changes refused because they did not load (each logged once).
        self.refused = 0

    @property
    def current(self) -> TlsMaterial:
        return self._current

    @property
    def mutual(self) -> bool:
        """Client certificates are required (REGROUP_TLS_CLIENT_CA is set)."""
        return self.paths.client_ca is not None

    def check(self) -> TlsMaterial | None:
        """The new set when the files changed since the last look and load, else None.

        Several users may check (gRPC's handshakes, the forwarder): each compares the
        `current` generation with the one it uses rather than relying on this answer."""
        with self._lock:
            now = self._clock()
            if now - self._checked_at < self._interval_s:
                return None
            self._checked_at = now
            seen = signature(self.paths)
            if seen == self._seen:
                return None
            try:
                material = load(self.paths, self._current.generation + 1)
            except CertificateError as e:
                if signature(self.paths) != seen:
                    return None  # still being written: the next look sees where it ends
                self._seen = seen  # not again until the files change once more
                self.refused += 1
                log.warning("tls_reload_refused", error=str(e), fingerprint=self._current.fingerprint)
                return None
            self._seen = seen
            self._current = material
        log.info(
            "tls_reloaded",
            generation=material.generation,
            fingerprint=material.fingerprint,
            client_ca=material.client_ca is not None,
        )
        return material


def _configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(material.key, material.cert)], root_certificates=material.client_ca
    )


def certificate_fetcher(files: CertificateFiles) -> Callable[[], grpc.ServerCertificateConfiguration | None]:
    """What gRPC calls at each handshake: the new configuration when the files changed
    since it last got one, else None (unchanged)."""
    # The generation gRPC has: the forwarder's check may be the one that took a change.
    served = [files.current.generation]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        # An exception here would fail the handshake: none escapes.
        try:
            files.check()
        except Exception:
            log.exception("tls_reload_failed")
            return None
        material = files.current
        if material.generation == served[0]:
            return None
        served[0] = material.generation
        return _configuration(material)

    return fetch


def server_credentials(files: CertificateFiles) -> grpc.ServerCredentials:
    """Credentials that serve the current certificate to every new connection, and
    require client certificates signed by the client CA when one is configured."""
    return grpc.dynamic_ssl_server_credentials(
        _configuration(files.current),
        # types-grpcio leaves out the None that gRPC documents as "unchanged".
        certificate_fetcher(files),  # type: ignore[arg-type]
        require_client_authentication=files.mutual,
    )


def channel_credentials(material: TlsMaterial, *, mutual: bool) -> grpc.ChannelCredentials:
    """Credentials for calls to another replica: its certificate verified with the peer
    CA and, under mTLS, this replica's own certificate presented as the client's."""
    if mutual:
        return grpc.ssl_channel_credentials(
            root_certificates=material.peer_ca, private_key=material.key, certificate_chain=material.cert
        )
    return grpc.ssl_channel_credentials(root_certificates=material.peer_ca)
