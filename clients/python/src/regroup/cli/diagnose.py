"""What to tell the user when the connection itself failed, beyond gRPC's own words.

gRPC reports a plain-text channel to a TLS server, and a TLS channel without a client
certificate to an mTLS server, alike: "Socket closed". Both servers accepted the TCP
connection and closed it, so after such a failure the command looks for itself: it opens
one TLS handshake to the address (no verification: it only asks what the server speaks)
and, if that succeeds, sends the HTTP/2 preface. A server that answers the handshake speaks
TLS; one that then closes instead of answering wants a client certificate (TLS 1.3 checks
it after the handshake). Handshake errors that gRPC does name (a TLS channel to a
plain-text server, a certificate that does not verify) need no probe.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from dataclasses import dataclass

from regroup.client.tls import TlsConfig

#: What gRPC says when the server accepted the connection and closed it in the handshake.
CLOSED = "Socket closed"
#: Only a connection that was never established is diagnosed (not a stream that ended).
NOT_CONNECTED = "failed to connect"
#: The client preface of HTTP/2 and an empty SETTINGS frame: a gRPC server answers it.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
#: At most this long for the probe: it runs once, after the call already failed.
PROBE_TIMEOUT_S = 2.0

TLS_FLAGS = "--tls (with --tls-ca FILE when its certificate is not from a public CA)"
CERT_FLAGS = "--tls-cert FILE --tls-key FILE"


@dataclass(frozen=True)
class Handshake:
    """What the server at an address did with a TLS handshake that sent no certificate."""

    #: It completed the handshake: the server speaks TLS.
    tls: bool
    #: It then closed the connection instead of answering: it requires a client certificate.
    wants_client_cert: bool


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a gRPC target such as host:port, [::1]:port or dns:///host:port;
    None for what a TCP probe cannot reach (unix sockets, a name without a port)."""
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        address = address.removeprefix(prefix)
    if address.startswith("unix") or "," in address:
        return None
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not host:
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


def probe(address: str, timeout: float = PROBE_TIMEOUT_S) -> Handshake | None:
    """One TLS handshake to `address`; None if it could not be made (nothing listens)."""
    where = host_port(address)
    if where is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # Only asking which protocol the server speaks: nothing is sent that needs trusting it.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection(where, timeout=timeout) as raw:
            try:
                tls = context.wrap_socket(raw, server_hostname=where[0])
            except ssl.SSLError as err:
                # An alert is a TLS server's refusal (TLS 1.2 refuses a missing client
                # certificate in the handshake); WRONG_VERSION_NUMBER and the like mean
                # bytes that are not TLS (a plain-text HTTP/2 server's answer).
                reason = err.reason or ""
                if "ALERT" not in reason:
                    return None
                return Handshake(tls=True, wants_client_cert="CERTIFICATE" in reason or "HANDSHAKE" in reason)
            with tls:
                return Handshake(tls=True, wants_client_cert=not _answers(tls))
    except OSError:
        return None


def _answers(tls: ssl.SSLSocket) -> bool:
    """Whether the server answers the HTTP/2 preface (rather than close or send an alert)."""
    with contextlib.suppress(OSError):
        tls.sendall(_PREFACE)
        return bool(tls.recv(9))
    return False


def hint(address: str, details: str, tls: TlsConfig | None) -> str | None:
    """A sentence saying what is wrong and which option fixes it, or None when unsure."""
    if "WRONG_VERSION_NUMBER" in details and tls is not None:
        return "the server does not speak TLS: leave out --tls and the --tls-* options"
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return "its certificate could not be verified: give the CA that issued it with --tls-ca FILE"
    if CLOSED not in details or NOT_CONNECTED not in details:
        return None
    found = probe(address)
    if found is None or not found.tls:
        return None
    if tls is None:
        needs = f"; it also requires a client certificate: {CERT_FLAGS}" if found.wants_client_cert else ""
        return f"the server speaks TLS and this command spoke plain text: add {TLS_FLAGS}{needs}"
    if not found.wants_client_cert:
        return None
    if tls.cert is None:
        return f"the server requires a client certificate (mTLS): add {CERT_FLAGS}"
    return (
        "the server closed the connection after the TLS handshake: it did not accept the client "
        "certificate of --tls-cert (is it issued by a CA the server trusts?)"
    )
