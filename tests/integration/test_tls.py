"""TLS and mTLS against a real server, with certificates made in the test: plain text
and unknown CAs are refused, the client's `tls=` works end to end, mTLS wants a
certificate from the client CA, a rotated certificate reaches new connections
without a restart, the widened accept loops serve TLS calls, and replicas forward
to each other over TLS."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from regroup.client import (
    GroupAdmin,
    GroupMember,
    MemberOptions,
    SyncGroupAdmin,
    TimedOut,
    TlsConfig,
    Unavailable,
)
from regroup.server.accept import SUPPORTED
from regroup.server.config import ConfigError
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.certs import CertificateAuthority, Pki, serial_of_der
from tests.support.replicas import FAST, owned_by, spread
from tests.support.service import ServiceFactory
from tests.support.wire import Stubs, WireMember, converge

#: A client that gives up soon (a refused handshake is retried as any unreachable address).
QUICK = {"timeout": 0.3, "retry_backoff_ms": 20, "retry_backoff_max_ms": 50}


def address(service: Any) -> str:
    return f"127.0.0.1:{service.server.port}"


async def health(target: str, credentials: grpc.ChannelCredentials | None) -> Any:
    """The server's health, over a new channel (TLS with `credentials`, else plain text)."""
    channel = (
        grpc.aio.insecure_channel(target)
        if credentials is None
        else grpc.aio.secure_channel(target, credentials)
    )
    async with channel:
        return await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)


async def refused(target: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await health(target, credentials)
    return error.value.code()


def peer_serial(port: int) -> int:
    """The serial of the certificate the server presents to a new connection."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only reading what is presented
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return serial_of_der(der)


async def test_a_plain_text_client_is_refused(start_service: ServiceFactory, pki: Pki) -> None:
    service = await start_service(credentials=pki.credentials(), **pki.settings())
    target = address(service)
    assert await refused(target, None) == grpc.StatusCode.UNAVAILABLE
    # A client that does not trust the server's CA is refused as well.
    stranger = grpc.ssl_channel_credentials(CertificateAuthority("stranger").cert)
    assert await refused(target, stranger) == grpc.StatusCode.UNAVAILABLE
    answer = await health(target, pki.credentials())
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_member_joins_and_gets_partitions_over_tls(start_service: ServiceFactory, pki: Pki) -> None:
    service = await start_service(credentials=pki.credentials(), **pki.settings())
    target = address(service)
    # The CA as a path here, as PEM bytes below: both are read where the channel opens.
    async with GroupAdmin(target, tls=TlsConfig(ca=pki.ca_file)) as admin:
        await admin.create_topics({"orders": 4})
    async with GroupMember(target, tls=TlsConfig(ca=pki.ca.cert)) as member:
        await member.join("g1", topics=["orders"])
        owned = await member.wait_for_assignment(lambda a: len(a.partitions) == 4)
        assert owned.member_epoch > 0
    # The blocking admin as well.
    with SyncGroupAdmin(target, tls=TlsConfig(ca=pki.ca_file)) as sync_admin:
        described = await asyncio.to_thread(sync_admin.describe_groups, ["g1"])
    assert described[0].group_id == "g1"


async def test_the_client_names_a_tls_mismatch_and_the_option_that_fixes_it(
    start_service: ServiceFactory, pki: Pki
) -> None:
    """gRPC reports these as "Socket closed" or a failed handshake; the client's error
    says what they mean (issue 38)."""
    tls_only = address(await start_service(credentials=pki.credentials(), **pki.settings()))
    client = pki.clients.client("worker-1")
    mutual = address(await start_service(credentials=pki.credentials(client), **pki.settings(mutual=True)))
    plain = address(await start_service())
    stranger = CertificateAuthority("other clients").client("worker-2")
    cases = [
        (tls_only, None, "perhaps the server speaks TLS only: pass tls=TlsConfig(ca=...)"),
        (
            mutual,
            TlsConfig(ca=pki.ca_file),
            "perhaps the server requires a client certificate (mTLS): pass TlsConfig(cert=..., key=...)",
        ),
        (
            mutual,
            TlsConfig(ca=pki.ca_file, cert=stranger.cert, key=stranger.key),
            "perhaps the server did not accept the client certificate: give TlsConfig a certificate "
            "signed by the server's client CA",
        ),
        (plain, TlsConfig(ca=pki.ca_file), "perhaps the server speaks plain text, not TLS: leave tls= out"),
        (
            tls_only,
            TlsConfig(ca=CertificateAuthority("stranger").cert),
            "perhaps the server's certificate is not signed by a CA the client trusts",
        ),
    ]
    for target, tls, hint in cases:
        async with GroupAdmin(target, tls=tls, **QUICK) as admin:
            with pytest.raises(Unavailable) as error:
                await admin.list_groups()
        assert error.value.address == target
        assert f"cannot reach {target}" in str(error.value) and hint in str(error.value), str(error.value)
    # So does a member that cannot join.
    options = MemberOptions(retry_backoff_ms=20, retry_backoff_max_ms=50)
    async with GroupMember(mutual, tls=TlsConfig(ca=pki.ca_file), options=options) as member:
        with pytest.raises(TimedOut) as joining:
            await member.join("g", topics=["orders"], timeout=0.3)
    assert "perhaps the server requires a client certificate (mTLS)" in str(joining.value)
    # The blocking admin says the same.
    with SyncGroupAdmin(tls_only, **QUICK) as sync_admin, pytest.raises(Unavailable) as error:
        await asyncio.to_thread(sync_admin.list_groups)  # the servers run on this loop
    assert "perhaps the server speaks TLS only" in str(error.value)
    # A channel the application made may speak anything: no guess then.
    factory = grpc.aio.insecure_channel
    async with GroupAdmin(tls_only, channel_factory=factory, **QUICK) as admin:
        with pytest.raises(Unavailable) as error:
            await admin.list_groups()
    assert "Socket closed" in str(error.value) and "perhaps" not in str(error.value)


async def test_the_server_name_can_be_overridden(start_service: ServiceFactory, tmp_path: Path) -> None:
    ca = CertificateAuthority()
    cert, key = ca.issue("regroup", names=("regroup.internal",)).write(tmp_path, "server")
    service = await start_service(tls_cert=cert, tls_key=key)
    target = address(service)
    async with GroupAdmin(target, tls=TlsConfig(ca=ca.cert), **QUICK) as admin:
        with pytest.raises(Unavailable) as error:
            await admin.create_topics({"orders": 1})  # 127.0.0.1 is not a name of the certificate
        assert error.value.status == grpc.StatusCode.UNAVAILABLE
        assert "does not name the host dialled: " in str(error.value)
        assert "TlsConfig(server_name_override=...)" in str(error.value)
    tls = TlsConfig(ca=ca.cert, server_name_override="regroup.internal")
    async with GroupAdmin(target, tls=tls) as admin:
        await admin.create_topics({"orders": 1})


async def test_mtls_wants_a_certificate_from_the_client_ca(start_service: ServiceFactory, pki: Pki) -> None:
    client = pki.clients.client("worker-1")
    service = await start_service(credentials=pki.credentials(client), **pki.settings(mutual=True))
    target = address(service)
    assert await refused(target, pki.credentials()) == grpc.StatusCode.UNAVAILABLE  # no certificate
    other = CertificateAuthority("other clients").client("worker-2")
    assert await refused(target, pki.credentials(other)) == grpc.StatusCode.UNAVAILABLE
    assert (await health(target, pki.credentials(client))).status == health_pb2.HealthCheckResponse.SERVING

    tls = TlsConfig(ca=pki.ca_file, cert=client.cert, key=client.key)
    async with GroupAdmin(target, tls=tls) as admin:
        await admin.create_topics({"orders": 2})
    paths = client.write(pki.folder, "worker-1")
    async with GroupMember(target, tls=TlsConfig(ca=pki.ca_file, cert=paths[0], key=paths[1])) as member:
        await member.join("g1", topics=["orders"])
        owned = await member.wait_for_assignment(lambda a: len(a.partitions) == 2)
        assert owned.member_epoch > 0


async def test_a_rotated_certificate_reaches_new_connections_without_a_restart(
    start_service: ServiceFactory, pki: Pki
) -> None:
    service = await start_service(credentials=pki.credentials(), **pki.settings())
    target, port = address(service), service.server.port
    old_channel = grpc.aio.secure_channel(target, pki.credentials())
    old_stub = health_pb2_grpc.HealthStub(old_channel)
    await old_stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert await asyncio.to_thread(peer_serial, port) == pki.server.serial

    # A new certificate from a new CA, with another name; each file is replaced by a
    # rename, the key after the certificate (in between they do not match: refused).
    new_ca = CertificateAuthority("servers 2027")
    new = new_ca.issue("replica-2027", names=("localhost", "127.0.0.1"))
    for path, content in ((pki.cert, new.cert), (pki.key, new.key)):
        staged = path.with_suffix(".new")
        staged.write_bytes(content)
        os.replace(staged, path)

    deadline = time.monotonic() + 10
    while await asyncio.to_thread(peer_serial, port) != new.serial:
        assert time.monotonic() < deadline, "the server never presented the new certificate"
        await asyncio.sleep(0.2)
    # A new client that trusts only the new CA gets in; one that trusts only the old
    # CA does not; the connection made before keeps working.
    new_credentials = grpc.ssl_channel_credentials(new_ca.cert)
    assert (await health(target, new_credentials)).status == health_pb2.HealthCheckResponse.SERVING
    assert await refused(target, pki.credentials()) == grpc.StatusCode.UNAVAILABLE
    await old_stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
    await old_channel.close()
    tls = service.server.tls
    assert tls is not None and tls.current.cert == new.cert and tls.current.generation == 2


async def test_bad_tls_files_stop_the_start_with_the_setting_named(
    start_service: ServiceFactory, pki: Pki
) -> None:
    _, other_key = pki.ca.server("other").write(pki.folder, "other")
    with pytest.raises(ConfigError, match=r"REGROUP_TLS_KEY .* is not the key of the certificate"):
        await start_service(tls_cert=pki.cert, tls_key=other_key)
    with pytest.raises(ConfigError, match="REGROUP_TLS_KEY is set but REGROUP_TLS_CERT is not"):
        await start_service(tls_key=pki.key)
    with pytest.raises(ConfigError, match=r"REGROUP_TLS_CLIENT_CA .* does not exist"):
        await start_service(**pki.settings(), tls_client_ca=pki.folder / "missing.crt")


@pytest.mark.skipif(not SUPPORTED, reason="this grpcio build lacks the internals the widener uses")
async def test_the_extra_accept_loops_serve_tls_calls(start_service: ServiceFactory, pki: Pki) -> None:
    service = await start_service(accept_depth=8, credentials=pki.credentials(), **pki.settings(mutual=True))
    target = address(service)
    client = pki.clients.client()
    # Four connections, a hundred calls on each at once: more than one accept loop takes them.
    connections = [Stubs.connect(target, pki.credentials(client)) for _ in range(4)]
    try:
        request = coordinator_pb2.FindCoordinatorRequest(group_id="g1")
        answers = await asyncio.gather(
            *(s.coordinator.FindCoordinator(request, timeout=10) for s in connections for _ in range(100))
        )
    finally:
        for stubs in connections:
            await stubs.channel.close()
    assert len(answers) == 400 and {a.error_code for a in answers} == {common_pb2.NONE}
    widener = service.server.widener
    assert widener is not None and widener.accepted > 0


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
async def test_replicas_forward_to_each_other_over_tls(
    start_service: ServiceFactory, pki: Pki, mutual: bool
) -> None:
    client = pki.clients.client()
    credentials = pki.credentials(client if mutual else None)
    # Without mTLS the replicas verify each other with REGROUP_TLS_CA; under mTLS with the
    # client CA by default, which must then have signed the replicas' certificates too.
    settings = {"tls_cert": pki.cert, "tls_key": pki.key, "tls_ca": pki.ca_file}
    if mutual:
        both = pki.folder / "both.crt"
        both.write_bytes(pki.clients.cert + pki.ca.cert)
        settings = {"tls_cert": pki.cert, "tls_key": pki.key, "tls_client_ca": both}
    a = await start_service(credentials=credentials, **FAST, **settings)
    await a.stubs.create_topic("orders", 4)
    b = await start_service(credentials=credentials, **FAST, **settings)
    await spread([a, b])
    group = owned_by(b)
    members = [WireMember(a.stubs.coordinator, group, f"m{i}", ["orders"]) for i in range(2)]
    await converge(a.stubs, group, members)
    forwarder = a.server._forwarder
    assert forwarder is not None and forwarder.forwarded > 0 and forwarder.failed == 0
    assert a.coordinator.group(group) is None and b.coordinator.group(group) is not None
    described = await a.stubs.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[group]))
    assert described.groups[0].error_code == common_pb2.NONE and len(described.groups[0].members) == 2


async def test_a_plain_text_health_port_serves_probes_that_cannot_speak_tls(
    start_service: ServiceFactory, pki: Pki
) -> None:
    """REGROUP_HEALTH_LISTEN: Kubernetes' gRPC probes cannot do TLS; this port answers the
    health service in plain text, and nothing else, while the API stays TLS only."""
    service = await start_service(
        credentials=pki.credentials(), health_listen="127.0.0.1:0", **pki.settings(mutual=True)
    )
    probe = f"127.0.0.1:{service.server.health_port}"
    assert service.server.health_port not in (0, service.server.port)
    assert (await health(probe, None)).status == health_pb2.HealthCheckResponse.SERVING
    assert await refused(address(service), None) == grpc.StatusCode.UNAVAILABLE
    async with grpc.aio.insecure_channel(probe) as channel:
        heartbeat = channel.unary_unary(
            "/regroup.v1.GroupCoordinator/ConsumerGroupHeartbeat",
            request_serializer=coordinator_pb2.ConsumerGroupHeartbeatRequest.SerializeToString,
            response_deserializer=coordinator_pb2.ConsumerGroupHeartbeatResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await heartbeat(coordinator_pb2.ConsumerGroupHeartbeatRequest(group_id="g"), timeout=5)
        assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # The same health service: a stop is seen on the probe port too.
    await service.server.stop()
    with pytest.raises(grpc.aio.AioRpcError):
        await health(probe, None)
