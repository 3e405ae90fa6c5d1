"""The server's TLS files: validation with the setting named, and reloading when they
change (a symlink swap as cert-manager and the kubelet do it, a rewrite in place),
refusing a new set that does not load and keeping the one in use."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from regroup.server.config import ConfigError, load_settings
from regroup.server.forwarding import Forwarder
from regroup.server.main import main
from regroup.server.tls import (
    CertificateError,
    CertificateFiles,
    TlsPaths,
    certificate_fetcher,
    channel_credentials,
    fingerprint,
    load,
    server_credentials,
)
from tests.support.certs import CertificateAuthority, Issued


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


@pytest.fixture
def pair(ca: CertificateAuthority, tmp_path: Path) -> TlsPaths:
    cert, key = ca.server("one").write(tmp_path, "server")
    return TlsPaths(cert, key)


def swap(folder: Path, issued: Issued, name: str) -> TlsPaths:
    """Installs `issued` as cert-manager's mounted Secret does: the files are written into
    a new folder and the `current` symlink is switched to it in one rename."""
    target = folder / name
    target.mkdir()
    issued.write(target, "tls")
    link = folder / "current.tmp"
    link.symlink_to(target)
    os.replace(link, folder / "current")
    return TlsPaths(folder / "current" / "tls.crt", folder / "current" / "tls.key")


def test_a_valid_pair_loads(ca: CertificateAuthority, pair: TlsPaths) -> None:
    material = load(pair)
    assert material.cert == pair.cert.read_bytes() and material.key == pair.key.read_bytes()
    assert (material.client_ca, material.ca, material.generation) == (None, None, 1)
    assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", fingerprint(material.cert))


def test_the_fingerprint_reads_as_openssl_prints_it(ca: CertificateAuthority, pair: TlsPaths) -> None:
    """The logged fingerprint (server_started, tls_reloaded) is what README.md says:
    `openssl x509 -noout -fingerprint -sha256` prints `sha256 Fingerprint=AB:CD:...`,
    and the log holds what follows the `=`, so an operator can compare the two."""
    chain = pair.cert.read_bytes() + ca.cert  # of a chain, the first certificate's
    digest = x509.load_pem_x509_certificate(pair.cert.read_bytes()).fingerprint(hashes.SHA256())
    assert fingerprint(chain) == ":".join(f"{byte:02X}" for byte in digest)
    if shutil.which("openssl") is None:
        return  # the format is checked above; openssl's own output where it is installed
    printed = subprocess.run(
        ["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", str(pair.cert)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    label, value = printed.split("=", 1)
    assert label.lower() == "sha256 fingerprint", printed
    assert fingerprint(chain) == value


def test_the_peer_ca_is_the_ca_else_the_client_ca(ca: CertificateAuthority, pair: TlsPaths) -> None:
    other = CertificateAuthority("other")
    client_ca = ca.write(pair.cert.parent, "clients")
    peer_ca = other.write(pair.cert.parent, "peers")
    assert load(TlsPaths(pair.cert, pair.key, client_ca)).peer_ca == ca.cert
    assert load(TlsPaths(pair.cert, pair.key, client_ca, peer_ca)).peer_ca == other.cert
    assert load(pair).peer_ca is None  # gRPC's default roots


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("missing cert", "REGROUP_TLS_CERT ({cert}) does not exist"),
        ("missing key", "REGROUP_TLS_KEY ({key}) does not exist"),
        ("cert not pem", "REGROUP_TLS_CERT ({cert}) holds no PEM certificate"),
        ("cert garbled", "REGROUP_TLS_CERT ({cert}) holds a certificate that does not parse"),
        ("key not pem", "REGROUP_TLS_KEY ({key}) holds no PEM private key"),
        ("key garbled", "REGROUP_TLS_KEY ({key}) holds no usable private key"),
        ("key of another", "REGROUP_TLS_KEY ({key}) is not the key of the certificate in REGROUP_TLS_CERT"),
    ],
)
def test_a_broken_file_is_named(ca: CertificateAuthority, pair: TlsPaths, broken: str, message: str) -> None:
    if broken == "missing cert":
        pair.cert.unlink()
    elif broken == "missing key":
        pair.key.unlink()
    elif broken == "cert not pem":
        pair.cert.write_bytes(b"hello")
    elif broken == "cert garbled":
        pair.cert.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    elif broken == "key not pem":
        pair.key.write_bytes(b"\x00\x01")
    elif broken == "key garbled":
        pair.key.write_bytes(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    else:
        pair.key.write_bytes(ca.server("two").key)
    with pytest.raises(CertificateError) as error:
        load(pair)
    assert message.format(cert=pair.cert, key=pair.key) in str(error.value)


def test_a_client_ca_that_does_not_parse_is_named(pair: TlsPaths) -> None:
    bad = pair.cert.parent / "clients.crt"
    bad.write_bytes(b"not a certificate")
    with pytest.raises(CertificateError, match=r"REGROUP_TLS_CLIENT_CA .* holds no PEM certificate"):
        load(TlsPaths(pair.cert, pair.key, client_ca=bad))


def test_a_rewrite_in_place_is_taken_at_the_next_look(ca: CertificateAuthority, pair: TlsPaths) -> None:
    clock = Clock()
    files = CertificateFiles(pair, clock=clock, check_interval_s=1.0)
    assert files.check() is None  # too soon, and nothing changed anyway
    new = ca.server("two")
    new.write(pair.cert.parent, "server")
    clock.now = 0.5
    assert files.check() is None  # paced: not looked at yet
    clock.now = 1.0
    material = files.check()
    assert material is not None and material.cert == new.cert and material.generation == 2
    assert files.current is material
    clock.now = 2.0
    assert files.check() is None  # nothing changed since


def test_a_symlink_swap_is_taken(ca: CertificateAuthority, tmp_path: Path) -> None:
    clock = Clock()
    paths = swap(tmp_path, ca.server("one"), "v1")
    files = CertificateFiles(paths, clock=clock, check_interval_s=0)
    assert files.check() is None
    new = ca.server("two")
    swap(tmp_path, new, "v2")
    material = files.check()
    assert material is not None and material.cert == new.cert


def test_a_half_written_pair_is_refused_once_and_the_old_one_kept(
    ca: CertificateAuthority, pair: TlsPaths
) -> None:
    files = CertificateFiles(pair, clock=Clock(), check_interval_s=0)
    old = files.current
    new = ca.server("two")
    pair.cert.write_bytes(new.cert)  # the key comes later
    assert files.check() is None
    assert files.current is old and files.refused == 1
    assert files.check() is None and files.refused == 1  # logged once, not at every handshake
    pair.key.write_bytes(new.key)
    material = files.check()
    assert material is not None and material.cert == new.cert and material.key == new.key
    assert material.generation == 2


def test_a_removed_file_keeps_the_set_in_use(pair: TlsPaths) -> None:
    files = CertificateFiles(pair, clock=Clock(), check_interval_s=0)
    old = files.current
    pair.key.unlink()
    assert files.check() is None and files.current is old and files.refused == 1


def test_a_changed_client_ca_is_taken(ca: CertificateAuthority, pair: TlsPaths) -> None:
    clients = ca.write(pair.cert.parent, "clients")
    files = CertificateFiles(TlsPaths(pair.cert, pair.key, clients), clock=Clock(), check_interval_s=0)
    assert files.mutual
    other = CertificateAuthority("other")
    clients.write_bytes(ca.cert + other.cert)
    material = files.check()
    assert material is not None and material.client_ca == ca.cert + other.cert


def test_grpc_credentials_are_made_from_the_current_set(pair: TlsPaths) -> None:
    files = CertificateFiles(pair)
    assert isinstance(server_credentials(files), grpc.ServerCredentials)
    assert isinstance(channel_credentials(files.current, mutual=True), grpc.ChannelCredentials)


def test_grpc_gets_a_change_once_even_when_another_user_checked_first(
    ca: CertificateAuthority, pair: TlsPaths
) -> None:
    files = CertificateFiles(pair, clock=Clock(), check_interval_s=0)
    fetch = certificate_fetcher(files)
    assert fetch() is None  # gRPC has the initial set
    ca.server("two").write(pair.cert.parent, "server")
    assert files.check() is not None  # the forwarder looked first
    assert isinstance(fetch(), grpc.ServerCertificateConfiguration)
    assert fetch() is None


async def test_the_forwarder_opens_new_channels_when_the_files_change(
    ca: CertificateAuthority, pair: TlsPaths
) -> None:
    files = CertificateFiles(pair, clock=Clock(), check_interval_s=0)
    forwarder = Forwarder("r1", tls=files)
    first = forwarder.coordinator("127.0.0.1:1")
    assert forwarder.coordinator("127.0.0.1:1") is first and forwarder.admin("127.0.0.1:1") is not None
    ca.server("two").write(pair.cert.parent, "server")
    second = forwarder.coordinator("127.0.0.1:1")
    # A channel keeps its credentials: the next calls go over a new one, the old one is
    # closed once calls on it may have ended (at once when the forwarder closes).
    assert second is not first and len(forwarder._retired) == 1
    await forwarder.close()
    assert not forwarder._retired


def test_settings_check_the_files_at_start(ca: CertificateAuthority, pair: TlsPaths) -> None:
    clients = ca.write(pair.cert.parent, "clients")
    settings = load_settings(
        {
            "REGROUP_TLS_CERT": str(pair.cert),
            "REGROUP_TLS_KEY": str(pair.key),
            "REGROUP_TLS_CLIENT_CA": str(clients),
        }
    )
    assert settings.tls_paths() == TlsPaths(pair.cert, pair.key, clients)
    assert load_settings({}).tls_paths() is None  # plain text by default


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REGROUP_TLS_CERT": "{cert}"}, "REGROUP_TLS_CERT is set but REGROUP_TLS_KEY is not"),
        ({"REGROUP_TLS_KEY": "{key}"}, "REGROUP_TLS_KEY is set but REGROUP_TLS_CERT is not"),
        (
            {"REGROUP_TLS_CLIENT_CA": "{cert}"},
            "REGROUP_TLS_CLIENT_CA is set without REGROUP_TLS_CERT and REGROUP_TLS_KEY",
        ),
        ({"REGROUP_TLS_CA": "{cert}"}, "REGROUP_TLS_CA is set without REGROUP_TLS_CERT"),
        (
            {"REGROUP_TLS_CERT": "{cert}", "REGROUP_TLS_KEY": "{cert}"},
            "REGROUP_TLS_KEY ({cert}) holds no PEM private key",
        ),
        (
            {"REGROUP_TLS_CERT": "{cert}", "REGROUP_TLS_KEY": "{other_key}"},
            "REGROUP_TLS_KEY ({other_key}) is not the key of the certificate",
        ),
        (
            {"REGROUP_TLS_CERT": "{cert}", "REGROUP_TLS_KEY": "{key}", "REGROUP_TLS_CLIENT_CA": "{nowhere}"},
            "REGROUP_TLS_CLIENT_CA ({nowhere}) does not exist",
        ),
    ],
)
def test_bad_tls_settings_are_refused_with_the_variable_named(
    ca: CertificateAuthority, pair: TlsPaths, env: dict[str, str], message: str
) -> None:
    _, other_key = ca.server("other").write(pair.cert.parent, "other")
    names = {"cert": pair.cert, "key": pair.key, "other_key": other_key, "nowhere": pair.cert.parent / "none"}
    with pytest.raises(ConfigError) as error:
        load_settings({name: value.format(**names) for name, value in env.items()})
    assert message.format(**names) in str(error.value)


def test_the_command_line_says_what_is_wrong_and_exits_2(
    ca: CertificateAuthority, pair: TlsPaths, capsys: pytest.CaptureFixture[str]
) -> None:
    _, other_key = ca.server("other").write(pair.cert.parent, "other")
    assert main(["--tls-cert", str(pair.cert), "--tls-key", str(other_key)]) == 2
    error = capsys.readouterr().err
    # Named as given: the flags (issue 37).
    assert error.startswith("regroup: configuration error: --tls-key")
    assert "is not the key of the certificate in --tls-cert" in error
