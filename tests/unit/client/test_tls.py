"""The client's TlsConfig: PEM content or paths, read when a channel opens; `tls=`
reaches every client, and is refused beside a channel_factory."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import grpc
import pytest

from regroup.client import GroupAdmin, GroupMember, SyncGroupAdmin, SyncGroupMember, TlsConfig
from regroup.client.spark import MemberTask
from regroup.client.tls import _pem
from tests.support.certs import CertificateAuthority


def test_pem_comes_from_bytes_text_or_a_path(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    path = ca.write(tmp_path)
    assert _pem(ca.cert) == ca.cert
    assert _pem(ca.cert.decode()) == ca.cert
    assert _pem(path) == _pem(str(path)) == ca.cert
    assert _pem(None) is None


def test_a_path_is_read_when_a_channel_opens(tmp_path: Path) -> None:
    tls = TlsConfig(ca=tmp_path / "ca.crt")
    with pytest.raises(FileNotFoundError):
        tls.credentials()
    CertificateAuthority().write(tmp_path)
    assert isinstance(tls.credentials(), grpc.ChannelCredentials)


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(ValueError, match="cert and key go together"):
        TlsConfig(cert=b"x")
    with pytest.raises(ValueError, match="cert and key go together"):
        TlsConfig(key=b"x")


def test_the_server_name_override_is_a_channel_option() -> None:
    assert TlsConfig().channel_options() == []
    assert TlsConfig(server_name_override="regroup.internal").channel_options() == [
        ("grpc.ssl_target_name_override", "regroup.internal")
    ]


def _sink(index: int, attempt: int) -> Any:
    return print


def test_a_config_of_paths_travels_to_spark_executors(tmp_path: Path) -> None:
    tls = TlsConfig(ca=tmp_path / "ca.crt", cert=b"c", key=b"k")
    task = MemberTask("127.0.0.1:1", "g", ["t"], list, _sink, {}, tls=tls)
    assert pickle.loads(pickle.dumps(task)).tls == tls


def test_a_spark_task_passes_its_tls_and_token_to_its_member(monkeypatch: pytest.MonkeyPatch) -> None:
    from regroup.client import spark

    made: dict[str, Any] = {}

    class Member:
        def __init__(self, target: str, **kwargs: Any) -> None:
            made.update(kwargs, target=target)
            raise RuntimeError("stop here")

    monkeypatch.setattr(spark, "SyncGroupMember", Member)
    tls = TlsConfig(ca=b"ca")
    task = MemberTask("127.0.0.1:1", "g", ["t"], list, _sink, {}, tls=tls, token="s3cret")
    with pytest.raises(RuntimeError, match="stop here"):
        task(0, 0)
    assert (made["target"], made["tls"], made["token"]) == ("127.0.0.1:1", tls, "s3cret")
    assert pickle.loads(pickle.dumps(task)).token == "s3cret"


async def test_tls_beside_a_channel_factory_is_refused() -> None:
    tls = TlsConfig()
    with pytest.raises(ValueError, match="tls= or channel_factory="):
        GroupMember("127.0.0.1:1", tls=tls, channel_factory=grpc.aio.insecure_channel)
    with pytest.raises(ValueError, match="tls= or channel_factory="):
        GroupAdmin("127.0.0.1:1", tls=tls, channel_factory=grpc.aio.insecure_channel)
    with pytest.raises(ValueError, match="tls= or channel_factory="):
        SyncGroupAdmin("127.0.0.1:1", tls=tls, channel_factory=grpc.insecure_channel)
    with pytest.raises(ValueError, match="tls= or channel_factory="):
        SyncGroupMember("127.0.0.1:1", tls=tls, channel_factory=grpc.aio.insecure_channel)


async def test_every_channel_a_member_opens_is_a_tls_one(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    secure_channel = grpc.aio.secure_channel

    def recording(target: str, *args: Any, **kwargs: Any) -> grpc.aio.Channel:
        opened.append(target)
        return secure_channel(target, *args, **kwargs)

    monkeypatch.setattr(grpc.aio, "secure_channel", recording)
    member = GroupMember("127.0.0.1:1", tls=TlsConfig(ca=CertificateAuthority().cert))
    try:
        assert member._router.follow("g", "127.0.0.1:2")  # a coordinator followed
    finally:
        await member.close()
    assert opened == ["127.0.0.1:1", "127.0.0.1:2"]
