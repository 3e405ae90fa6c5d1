"""Certificates made in the test, with the `cryptography` package: a CA, server
certificates for the loopback addresses, client certificates.

Keys are EC P-256: generating one takes well under a millisecond, so every test
makes its own and no key material is checked in.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The names every server certificate here is valid for: where tests reach the server.
LOOPBACK_NAMES = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class Issued:
    """A certificate (PEM) with its private key (PEM, unencrypted PKCS#8)."""

    cert: bytes
    key: bytes
    serial: int
    common_name: str

    def write(self, folder: Path, name: str) -> tuple[Path, Path]:
        """Writes `name.crt` and `name.key` into `folder`; returns their paths."""
        cert, key = folder / f"{name}.crt", folder / f"{name}.key"
        cert.write_bytes(self.cert)
        key.write_bytes(self.key)
        return cert, key


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=1)
    )


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, common_name: str = "regroup test CA") -> None:
        self.common_name = common_name
        self._key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        )
        self._cert = _validity(builder).sign(self._key, hashes.SHA256())
        self.cert = self._cert.public_bytes(serialization.Encoding.PEM)

    def write(self, folder: Path, name: str = "ca") -> Path:
        path = folder / f"{name}.crt"
        path.write_bytes(self.cert)
        return path

    def issue(
        self,
        common_name: str,
        *,
        names: tuple[str, ...] = (),
        server: bool = True,
        client: bool = False,
    ) -> Issued:
        """A certificate for `common_name`, valid for the DNS names and IP addresses in
        `names`, usable for server and/or client authentication."""
        key = _key()
        serial = x509.random_serial_number()
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(_general_names(names)), critical=False
            )
        cert = _validity(builder).sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key), serial, common_name)

    def server(self, common_name: str = "regroup", *, client: bool = False) -> Issued:
        """A server certificate for the loopback names (`client`: also valid as a client's,
        as a replica's must be under mTLS, where it forwards calls with it)."""
        return self.issue(common_name, names=LOOPBACK_NAMES, server=True, client=client)

    def client(self, common_name: str = "client") -> Issued:
        return self.issue(common_name, server=False, client=True)


def _general_names(names: tuple[str, ...]) -> list[x509.GeneralName]:
    general: list[x509.GeneralName] = []
    for name in names:
        try:
            general.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            general.append(x509.DNSName(name))
    return general


def serial_of(pem: bytes) -> int:
    """The serial number of a PEM certificate."""
    return x509.load_pem_x509_certificate(pem).serial_number


def serial_of_der(der: bytes) -> int:
    """The serial number of a DER certificate (what `ssl` hands back from a handshake)."""
    return x509.load_der_x509_certificate(der).serial_number


@dataclass
class Pki:
    """A CA, the server's certificate files signed by it, and a client CA for mTLS."""

    folder: Path
    ca: CertificateAuthority
    server: Issued
    cert: Path
    key: Path
    ca_file: Path
    clients: CertificateAuthority
    clients_file: Path

    def settings(self, *, mutual: bool = False) -> dict[str, Any]:
        settings: dict[str, Any] = {"tls_cert": self.cert, "tls_key": self.key}
        if mutual:
            settings["tls_client_ca"] = self.clients_file
        return settings

    def credentials(self, client: Issued | None = None) -> grpc.ChannelCredentials:
        if client is None:
            return grpc.ssl_channel_credentials(self.ca.cert)
        return grpc.ssl_channel_credentials(self.ca.cert, client.key, client.cert)


def make_pki(folder: Path) -> Pki:
    """A server CA and a client CA, and the server's files, written under `folder`."""
    ca, clients = CertificateAuthority("servers"), CertificateAuthority("clients")
    # Valid for client authentication too: a replica forwards calls with it under mTLS.
    server = ca.server("replica", client=True)
    cert, key = server.write(folder, "server")
    return Pki(folder, ca, server, cert, key, ca.write(folder), clients, clients.write(folder, "clients"))
