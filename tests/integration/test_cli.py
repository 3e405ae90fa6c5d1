"""The `regroup` command, run as a user runs it (a subprocess, `python -m regroup.cli`)
against a real server: its text and --json output and its exit codes (docs/cli.md).

Each process costs a fraction of a second to start, so each test checks a whole story
with as few processes as it takes. The server runs on this test's event loop: the
processes are awaited with asyncio, never waited for in a blocking way.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import struct
import termios
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc

from regroup.client import ConnectWorker, GroupAdmin, GroupMember, WorkerListener
from regroup.v1 import coordinator_pb2
from tests.support import child
from tests.support.certs import CertificateAuthority
from tests.support.cli import CLI, address, regroup
from tests.support.replicas import FAST, owned_by, spread, topics_known
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, converge


async def commit(service: Service, member: WireMember, offsets: dict[int, int]) -> None:
    """Commits offsets of `orders` partitions as the member (with its epoch)."""
    (topic_id,) = member.owned
    request = coordinator_pb2.OffsetCommitRequest(
        group_id=member.group_id, member_id=member.member_id, member_epoch=member.epoch
    )
    request.topics.add(topic_id=topic_id).partitions.extend(
        coordinator_pb2.OffsetCommitRequest.Partition(partition=p, offset=o) for p, o in offsets.items()
    )
    response = await service.stubs.coordinator.OffsetCommit(request)
    assert response.error_code == 0 and all(p.error_code == 0 for t in response.topics for p in t.partitions)


async def test_topics(service: Service) -> None:
    run = await regroup(
        service, "topics", "create", "orders", "--partitions", "3", "--racks", "a,b", "--racks", "c"
    )
    assert run.code == 0 and re.fullmatch(r"Created topic orders \(\S+\) with 3 partitions\.\n", run.out), run
    run = await regroup(service, "topics", "create", "orders", "-p", "3")
    assert run.code == 2 and "topic orders: TOPIC_ALREADY_EXISTS" in run.err, run
    run = await regroup(service, "topics", "create", "orders", "-p", "3", "--if-not-exists", "--json")
    assert run.code == 0, run
    # The answer for a topic that was there carries neither its id nor its size: null, not 0.
    assert run.json()["topics"] == [
        {"name": "orders", "topic_id": None, "num_partitions": None, "error": None, "created": False}
    ]
    run = await regroup(service, "topics", "grow", "orders", "--partitions", "5")
    assert run.code == 2 and "new_partition_racks must give 2" in run.err, run  # racks for the new ones too
    run = await regroup(service, "topics", "grow", "orders", "--partitions", "5", "--racks", "d,e")
    assert run.code == 0 and run.out == "Topic orders has 5 partitions.\n", run
    run = await regroup(service, "topics", "grow", "orders", "--partitions", "2")
    assert run.code == 2 and "INVALID_PARTITIONS" in run.err, run
    run = await regroup(service, "topics", "describe", "orders", "missing", "--json")
    assert run.code == 2, run
    topic, missing = run.json()["topics"]
    assert topic["num_partitions"] == 5 and topic["partition_racks"] == ["a", "b", "c", "d", "e"], run
    assert missing["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION" and missing["num_partitions"] is None, run
    assert missing["topic_id"] is None, run
    run = await regroup(service, "topics", "describe")
    header, row = run.out.splitlines()
    assert header.split() == ["TOPIC", "TOPIC-ID", "PARTITIONS", "RACKS"], run
    assert row.split()[0] == "orders" and row.split()[1] == topic["topic_id"] and row.split()[2] == "5", run
    run = await regroup(service, "topics", "delete", "orders", "missing", "--json")
    assert run.code == 2, run
    deleted, missing = run.json()["topics"]
    assert deleted["name"] == "orders" and deleted["error"] is None
    assert missing["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION", run


async def test_groups_describe_and_offsets(service: Service) -> None:
    await service.stubs.create_topic("orders", 4)
    a = WireMember(service.stubs.coordinator, "g1", "m-a", ["orders"], instance_id="pod-a")
    b = WireMember(service.stubs.coordinator, "g1", "m-b", ["orders"])
    await converge(service.stubs, "g1", [a, b])
    a_partitions = sorted(p for _, p in a.partitions())
    await commit(service, a, {a_partitions[0]: 42})

    run = await regroup(service, "groups", "list", "--json")
    assert run.code == 0, run
    assert run.json() == {
        "groups": [
            {
                "group_id": "g1",
                "state": "Stable",
                "type": "consumer",
                "group_epoch": 2,
                "assignment_epoch": 2,
                "members": 2,
            }
        ]
    }

    # kafka-consumer-groups --describe: a row per partition, then a row per member.
    run = await regroup(service, "groups", "describe", "g1")
    assert run.code == 0, run
    lines = run.out.splitlines()
    assert lines[0].startswith("Group g1 (consumer): Stable, group epoch 2, assignment epoch 2"), run
    header = lines[2].split()
    assert header == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "COMMITTED-OFFSET",
        "MEMBER-ID",
        "CLIENT-ID",
        "HOST",
        "MEMBER-EPOCH",
        "STATE",
    ], run
    rows = {int(cells[2]): cells for cells in (line.split() for line in lines[3:7])}
    assert sorted(rows) == [0, 1, 2, 3], run
    first = rows[a_partitions[0]]
    assert first[:5] == ["g1", "orders", str(a_partitions[0]), "42", "m-a"] and first[-2:] == [
        "2",
        "ASSIGNED",
    ]
    assert all(rows[p][3] == "-" for p in rows if p != a_partitions[0]), run
    members = [line.split() for line in lines[8:]]
    assert members[0][:2] == ["MEMBER-ID", "INSTANCE-ID"] and "DRAIN" in members[0], run
    assert [m[0] for m in members[1:]] == ["m-a", "m-b"] and members[1][1] == "pod-a", run

    run = await regroup(service, "groups", "describe", "g1", "missing", "--json")
    assert run.code == 2 and "group missing: GROUP_ID_NOT_FOUND" in run.err, run
    found, missing = run.json()["groups"]
    assert missing["error"]["code"] == "GROUP_ID_NOT_FOUND" and missing["members"] == []
    assert found["error"] is None and found["state"] == "Stable" and found["group_epoch"] == 2
    by_id = {m["member_id"]: m for m in found["members"]}
    assert by_id["m-a"]["instance_id"] == "pod-a" and by_id["m-a"]["drain_state"] is None
    assert by_id["m-a"]["assignment"] == [
        {"topic": "orders", "topic_id": next(iter(a.owned)), "partitions": a_partitions}
    ]
    assert by_id["m-a"]["target_assignment"] == by_id["m-a"]["assignment"]
    assert by_id["m-a"]["pending_revocation"] == []
    rows_json = {r["partition"]: r for r in found["partitions"]}
    assert rows_json[a_partitions[0]] == {
        "group_id": "g1",
        "topic": "orders",
        "partition": a_partitions[0],
        "committed_offset": 42,
        "member_id": "m-a",
        "client_id": by_id["m-a"]["client_id"],
        "host": by_id["m-a"]["host"],
        "member_epoch": 2,
        "state": "ASSIGNED",
    }

    run = await regroup(service, "offsets", "show", "g1", "--json")
    assert run.code == 0, run
    (offset,) = run.json()["offsets"]
    assert offset["topic"] == "orders" and offset["partition"] == a_partitions[0] and offset["offset"] == 42
    assert offset["committed_member_epoch"] == 2 and offset["error"] is None
    assert offset["metadata"] is None  # committed without metadata

    # A third member: the target moves partitions to it, which the others must revoke first.
    c = WireMember(service.stubs.coordinator, "g1", "m-c", ["orders"])
    await c.heartbeat()
    await b.heartbeat()
    run = await regroup(service, "groups", "describe", "g1", "--json")
    (group,) = run.json()["groups"]
    states = {r["partition"]: (r["state"], r["member_id"]) for r in group["partitions"]}
    assert ("REVOKING", "m-b") in states.values() and group["state"] != "Stable", run
    assert any(m["pending_revocation"] for m in group["members"] if m["member_id"] == "m-b"), run

    run = await regroup(service, "groups", "delete", "g1", "--json")
    assert run.code == 2 and run.json()["groups"][0]["error"]["code"] == "NON_EMPTY_GROUP", run
    for member in (a, b, c):
        await member.leave()
    run = await regroup(service, "groups", "delete", "g1")
    assert run.code == 0 and run.out == "Deleted group g1.\n", run


async def test_connectors(service: Service) -> None:
    run = await regroup(service, "connectors", "put", "cc", "sink=3", "source=1", "--json")
    assert run.code == 0 and run.json() == {"group_id": "cc", "group_epoch": 0, "error": None}, run
    run = await regroup(service, "connectors", "list", "cc")
    assert run.code == 0 and run.out.split() == ["CONNECTOR", "TASKS", "sink", "3", "source", "1"], run
    run = await regroup(service, "connectors", "put", "cc", "sink")
    assert run.code == 1 and "expected NAME=TASKS" in run.err, run

    # A worker joins: describe shows the connectors and tasks it owns instead of partitions.
    async with ConnectWorker(address(service), listener=WorkerListener()) as worker:
        await worker.join("cc", url="http://worker-1:8083")
        async with asyncio.timeout(15):
            while len(worker.assignment().partitions) < 6:  # 2 connectors and 4 tasks
                await asyncio.sleep(0.05)
        run = await regroup(service, "groups", "describe", "cc")
        assert run.code == 0 and "Group cc (connect):" in run.out, run
        owns = "sink source sink/0-2 source/0"
        assert re.search(rf"{worker.member_id}\s.*\s{owns}\s+{owns}\s+-", run.out), run
        run = await regroup(service, "groups", "describe", "cc", "--json")
        (member,) = run.json()["groups"][0]["members"]
        assert member["connect_assignment"]["connectors"] == ["sink", "source"], run
        assert member["url"] == "http://worker-1:8083" and member["assignment"] == [], run
    run = await regroup(service, "connectors", "list", "nope", "--json")
    assert run.code == 2 and run.json()["error"]["code"] == "GROUP_ID_NOT_FOUND", run


async def test_history(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    a = WireMember(service.stubs.coordinator, "gh", "m-a", ["orders"])
    await converge(service.stubs, "gh", [a])
    await a.leave()

    run = await regroup(service, "groups", "history", "gh", "--json")
    assert run.code == 0, run
    events = run.json()["events"]
    types = [e["type"] for e in events]
    assert "MEMBER_LEFT" in types[:3] and types[-1] == "GROUP_CREATED", types
    assert [e["sequence"] for e in events] == sorted((e["sequence"] for e in events), reverse=True)
    joined = next(e for e in events if e["type"] == "MEMBER_JOINED")
    assert joined["member_id"] == "m-a" and joined["member_epoch"] >= 1 and joined["time"].endswith("Z")
    # What an event does not concern is null (docs/cli.md), not proto3's 0.
    assert joined["partitions_moved"] is None and joined["previous_group_epoch"] is None, joined
    assert joined["duration_ms"] is None and joined["partition_count"] is None, joined
    targets = [e for e in events if e["type"] == "TARGET_COMPUTED"]
    assert max(e["partitions_moved"] for e in targets) == 2, targets  # both partitions, to m-a
    assert all(e["member_epoch"] is None and e["partition_count"] is None for e in targets), targets
    bumped = next(e for e in events if e["type"] == "GROUP_EPOCH_BUMPED")
    assert isinstance(bumped["previous_group_epoch"], int) and bumped["partitions_moved"] is None, bumped

    run = await regroup(
        service,
        "groups",
        "history",
        "gh",
        "--type",
        "member_joined",
        "--type",
        "MEMBER_LEFT",
        "--oldest-first",
        "--since",
        "1h",
    )
    assert run.code == 0, run
    header, *rows = run.out.splitlines()
    assert header.split() == ["TIME", "TYPE", "REASON", "MEMBER", "EPOCHS", "MESSAGE"], run
    assert [row.split()[1] for row in rows] == ["MEMBER_JOINED", "MEMBER_LEFT"], run
    assert all(row.split()[3] == "m-a" for row in rows), run

    run = await regroup(service, "groups", "history", "gh", "--limit", "1", "--type", "no_such_type")
    assert run.code == 1 and "unknown event type" in run.err, run

    # A group that does not exist is refused as describe refuses it: exit 2, the same line.
    described = await regroup(service, "groups", "describe", "nobody")
    run = await regroup(service, "groups", "history", "nobody")
    assert run.code == described.code == 2 and run.out == "" and run.err == described.err, run
    assert run.err.startswith("regroup: group nobody: GROUP_ID_NOT_FOUND"), run
    run = await regroup(service, "groups", "history", "nobody", "--since", "1h", "--json")
    assert run.code == 2 and run.json()["error"]["code"] == "GROUP_ID_NOT_FOUND", run
    assert run.json()["events"] == [] and run.json()["more"] is False, run
    # A deleted group keeps its history: events that match nothing are no refusal.
    assert (await regroup(service, "groups", "delete", "gh")).code == 0
    run = await regroup(service, "groups", "history", "gh", "--type", "offsets_reset")
    assert run.code == 0 and run.out == "No events for group gh.\n", run
    run = await regroup(service, "groups", "history", "gh", "--limit", "1", "--json")
    assert run.code == 0 and run.json()["events"][0]["type"] == "GROUP_DELETED", run


@contextlib.asynccontextmanager
async def terminal(
    service: Service, *args: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, Callable[..., Any]]]:
    """Runs `regroup ARGS` in a pseudo-terminal of 200x60, as its own session with the
    terminal as controlling one (so that Ctrl-C, ^C written to it, is its SIGINT). Yields the
    process and `screen(pattern)`, which waits until the text drawn so far matches."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
    env = {**os.environ, "REGROUP_ADDRESS": address(service), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.pop("COLUMNS", None)

    # The terminal becomes the CLI's controlling one without forking this process, whose
    # gRPC threads run (tests/support/child.py).
    process = await asyncio.create_subprocess_exec(
        *child.command([*CLI, *args], controlling_terminal=True),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    os.set_blocking(master, False)
    drawn = bytearray()
    arrived = asyncio.Event()

    def readable() -> None:
        try:
            drawn.extend(os.read(master, 65536))
        except OSError:  # the process closed the terminal
            asyncio.get_running_loop().remove_reader(master)
        arrived.set()

    loop = asyncio.get_running_loop()
    loop.add_reader(master, readable)

    async def screen(pattern: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn.decode(errors="replace"))
            if re.search(pattern, text):
                return text
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{pattern!r} never drawn:\n{text[-3000:]}"
            arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), remaining)

    try:
        yield process, screen
        os.write(master, b"\x03")  # Ctrl-C, through the terminal
        await asyncio.wait_for(process.wait(), 20)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        loop.remove_reader(master)
        os.close(master)


async def test_watch_redraws_in_a_terminal_and_stops_on_ctrl_c(service: Service) -> None:
    await service.stubs.create_topic("orders", 4)
    a = WireMember(service.stubs.coordinator, "gw", "m-a", ["orders"])
    await converge(service.stubs, "gw", [a])
    async with terminal(service, "groups", "watch", "gw") as (process, screen):
        text = await screen(r"m-a\s.*orders:0-3")
        assert "Group gw (consumer): Stable" in text and "MEMBER_JOINED" in text
        # A second member joins: the view redraws with it, with what it is owed.
        b = WireMember(service.stubs.coordinator, "gw", "m-b", ["orders"])
        await b.heartbeat()
        await screen(r"m-b\s.*UNRELEASED_PARTITIONS")
        await converge(service.stubs, "gw", [a, b])
        # Each owns half, as its target says.
        await screen(
            r"Stable, group epoch 2.*\n(.*\n)*m-a\s.*(orders:\d-\d)\s+\2\s.*\nm-b\s.*(orders:\d-\d)\s+\3\s"
        )
    assert process.returncode == 0


async def test_watch_json_lines(service: Service) -> None:
    """--json: a line per message; the group need not exist yet."""
    env = {**os.environ, "REGROUP_ADDRESS": address(service)}
    process = await asyncio.create_subprocess_exec(
        *CLI, "groups", "watch", "later", "--json", stdout=asyncio.subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    try:
        first = json.loads(await asyncio.wait_for(process.stdout.readline(), 20))
        assert first["group"]["error"]["code"] == "GROUP_ID_NOT_FOUND", first
        await service.stubs.create_topic("orders", 1)
        await WireMember(service.stubs.coordinator, "later", "m-a", ["orders"]).heartbeat()
        while True:
            message = json.loads(await asyncio.wait_for(process.stdout.readline(), 20))
            if any(e["type"] == "MEMBER_JOINED" for e in message["events"]):
                break
        assert message["group"]["members"][0]["member_id"] == "m-a", message
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 20)
    assert process.returncode == 0


async def test_group_calls_follow_not_coordinator(start_service: ServiceFactory) -> None:
    """Two replicas that do not forward: describe and watch, sent to the one that does not
    own the group, go where its NOT_COORDINATOR answer says."""
    a = await start_service(forward=False, **FAST)
    b = await start_service(forward=False, **FAST)
    await spread([a, b])
    group = owned_by(b)
    await a.stubs.create_topic("orders", 2)
    await topics_known([a, b], "orders")
    member = WireMember(b.stubs.coordinator, group, "m-a", ["orders"])
    await converge(b.stubs, group, [member])

    run = await regroup(a, "groups", "describe", group, "--json")
    assert run.code == 0 and run.json()["groups"][0]["members"][0]["member_id"] == "m-a", run
    env = {**os.environ, "REGROUP_ADDRESS": address(a)}
    process = await asyncio.create_subprocess_exec(
        *CLI, "groups", "watch", group, "--json", stdout=asyncio.subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    try:
        first = json.loads(await asyncio.wait_for(process.stdout.readline(), 20))
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 20)
    assert first["group"]["error"] is None and first["group"]["members"][0]["member_id"] == "m-a", first
    assert process.returncode == 0


async def test_watch_goes_on_when_the_coordinator_stops(start_service: ServiceFactory) -> None:
    """The replica serving the stream stops (a rollout): the view opens it again at the
    bootstrap address, which now owns the group, and keeps showing its events."""
    a = await start_service(**FAST)
    b = await start_service(**FAST)
    await spread([a, b])
    group = owned_by(b)
    await a.stubs.create_topic("orders", 2)
    await topics_known([a, b], "orders")
    first = WireMember(a.stubs.coordinator, group, "m-a", ["orders"])
    await converge(a.stubs, group, [first])
    env = {**os.environ, "REGROUP_ADDRESS": address(a)}
    process = await asyncio.create_subprocess_exec(
        *CLI, "groups", "watch", group, "--json", stdout=asyncio.subprocess.PIPE, env=env
    )
    assert process.stdout is not None

    sequences: list[int] = []

    async def until(member_id: str) -> None:
        assert process.stdout is not None
        while True:
            message = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
            sequences.extend(e["sequence"] for e in message["events"])
            if any(e["member_id"] == member_id for e in message["events"]):
                return

    try:
        await until("m-a")  # the history sent first
        await b.server.stop()  # hands its shards over at once
        second = WireMember(a.stubs.coordinator, group, "m-b", ["orders"])
        async with asyncio.timeout(30):
            while (await second.heartbeat()).error_code != 0:  # until a serves the group
                await asyncio.sleep(0.1)
        await until("m-b")
        # The reopened stream's history is not printed again.
        assert sequences == sorted(set(sequences)), sequences
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 20)
    assert process.returncode == 0


async def test_exit_codes(service: Service) -> None:
    """1 usage, 3 unreachable, 4 timeout, 5 unsupported; the others are covered above."""
    run = await regroup(service, "offsets", "reset", "g", "--to-offset", "1", "--delete")
    assert run.code == 1 and "exactly one of --to-offset, --shift-by and --delete" in run.err, run
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{closed.getsockname()[1]}"
    run = await regroup(nobody, "groups", "list")
    assert run.code == 3 and f"cannot reach the coordinator at {nobody}" in run.err, run
    # A port that accepts connections and never answers: the call's deadline passes.
    connections: list[asyncio.StreamWriter] = []
    silent = await asyncio.start_server(lambda _, writer: connections.append(writer), "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    async with silent:
        run = await regroup(f"127.0.0.1:{port}", "groups", "list", "--request-timeout", "0.5")
        for writer in connections:
            writer.close()
            await writer.wait_closed()
    assert run.code == 4, run
    # An older server: a gRPC server without the GroupAdmin service answers UNIMPLEMENTED.
    older = grpc.aio.server()
    port = older.add_insecure_port("127.0.0.1:0")
    await older.start()
    try:
        run = await regroup(f"127.0.0.1:{port}", "topics", "describe")
    finally:
        await older.stop(None)
    assert run.code == 5 and "does not support DescribeTopics" in run.err, run


async def test_tls_and_tokens(start_service: ServiceFactory, tmp_path: Path) -> None:
    """The client's TLS (CA, client certificate and key) and its bearer token, against an
    mTLS server with a tokens file."""
    servers, clients = CertificateAuthority("servers"), CertificateAuthority("clients")
    server_cert, server_key = servers.server("replica").write(tmp_path, "server")
    client = clients.client("ops")
    client_cert, client_key = client.write(tmp_path, "client")
    ca = str(servers.write(tmp_path, "ca"))
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps([{"principal": "User:ops", "sha256": hashlib.sha256(b"s3cret").hexdigest()}])
    )
    (tmp_path / "token").write_text("s3cret\n")
    service = await start_service(
        credentials=grpc.ssl_channel_credentials(servers.cert, client.key, client.cert),
        tls_cert=server_cert,
        tls_key=server_key,
        tls_client_ca=clients.write(tmp_path, "clients"),
        tokens_file=tokens,
    )
    mtls = ("--tls-ca", ca, "--tls-cert", str(client_cert), "--tls-key", str(client_key))
    run = await regroup(service, "topics", "create", "orders", "-p", "1", *mtls, REGROUP_TOKEN="s3cret")
    assert run.code == 0, run
    run = await regroup(service, "topics", "describe", *mtls, "--token-file", str(tmp_path / "token"))
    assert run.code == 0 and "orders" in run.out, run
    # A bad token has its own exit code, and says where the token came from (never the token).
    run = await regroup(service, "topics", "describe", *mtls, REGROUP_TOKEN="wrong")
    assert run.code == 6 and "did not accept the token" in run.err and "REGROUP_TOKEN" in run.err, run
    assert "Unknown bearer token" in run.err and "wrong" not in run.err, run
    # Without a client certificate, or in plain text, the handshake fails: not reachable. gRPC
    # says "Socket closed" for both; the command says what is missing and which options give it.
    run = await regroup(service, "topics", "describe", "--tls-ca", ca, REGROUP_TOKEN="s3cret")
    assert run.code == 3 and "requires a client certificate (mTLS): add --tls-cert FILE --tls-key FILE" in (
        run.err
    ), run
    run = await regroup(service, "topics", "describe", REGROUP_TOKEN="s3cret")
    assert run.code == 3 and "speaks TLS and this command spoke plain text: add --tls" in run.err, run
    assert "it also requires a client certificate: --tls-cert FILE --tls-key FILE" in run.err, run
    run = await regroup(service, "topics", "describe", "--tls-cert", str(client_cert))
    assert run.code == 1 and "--tls-cert and --tls-key go together" in run.err, run


async def test_tls_mismatches_name_the_option(start_service: ServiceFactory, tmp_path: Path) -> None:
    """Plain text to a TLS server, TLS to a plain-text one, and a CA that does not verify the
    server: each exits 3 with the option that fixes it."""
    servers = CertificateAuthority("servers")
    server_cert, server_key = servers.server("replica").write(tmp_path, "server")
    secure = await start_service(
        credentials=grpc.ssl_channel_credentials(servers.cert), tls_cert=server_cert, tls_key=server_key
    )
    plain = await start_service()
    run = await regroup(secure, "topics", "describe")
    assert run.code == 3 and "speaks TLS and this command spoke plain text: add --tls (with --tls-ca" in (
        run.err
    ), run
    assert "client certificate" not in run.err, run  # this one does not ask for one
    other_ca = str(CertificateAuthority("another").write(tmp_path, "other"))
    run = await regroup(secure, "topics", "describe", "--tls-ca", other_ca)
    assert run.code == 3 and "could not be verified: give the CA that issued it with --tls-ca" in run.err, run
    run = await regroup(plain, "topics", "describe", "--tls-ca", str(servers.write(tmp_path, "ca")))
    assert run.code == 3 and "does not speak TLS: leave out --tls and the --tls-* options" in run.err, run


async def test_members_drain(service: Service) -> None:
    await service.stubs.create_topic("orders", 4)
    a = WireMember(service.stubs.coordinator, "gd", "m-a", ["orders"], instance_id="pod-a")
    b = WireMember(service.stubs.coordinator, "gd", "m-b", ["orders"])
    await converge(service.stubs, "gd", [a, b])

    run = await regroup(service, "members", "drain", "gd", "--instance-id", "pod-a", "--json")
    assert run.code == 0 and run.json()["drain_state"] == "DRAINING" and run.json()["member_id"] == "m-a", run
    # Nobody heartbeats: m-a keeps its partitions, and --wait runs out of time.
    run = await regroup(
        service, "members", "drain", "gd", "--instance-id", "pod-a", "--wait", "--timeout", "0.5"
    )
    assert run.code == 4 and "still DRAINING" in run.err, run
    # With heartbeats, m-a revokes and is DRAINED; m-b owns everything.
    waiting = asyncio.create_task(
        regroup(
            service, "members", "drain", "gd", "--member-id", "m-a", "--wait", "--timeout", "30", "--json"
        )
    )
    while not waiting.done():
        await a.heartbeat()
        await b.heartbeat()
        await asyncio.sleep(0.05)
    run = waiting.result()
    assert run.code == 0 and run.json()["drain_state"] == "DRAINED", run
    assert not a.partitions() and len(b.partitions()) == 4
    run = await regroup(service, "groups", "describe", "gd", "--json")
    by_id = {m["member_id"]: m for m in run.json()["groups"][0]["members"]}
    assert by_id["m-a"]["drain_state"] == "DRAINED" and by_id["m-b"]["drain_state"] is None, run

    run = await regroup(service, "members", "drain", "gd", "--member-id", "m-a", "--undrain")
    assert run.code == 0 and "in service" in run.out, run
    run = await regroup(service, "members", "drain", "gd", "--member-id", "nobody", "--json")
    assert run.code == 2 and "UNKNOWN_MEMBER_ID" in run.err, run
    assert run.json()["error"]["code"] == "UNKNOWN_MEMBER_ID" and run.json()["group_epoch"] is None, run
    run = await regroup(service, "members", "drain", "gd", "--member-id", "m-a", "--undrain", "--wait")
    assert run.code == 1, run
    # A member that leaves while --wait waits for it is as good as drained.
    waiting = asyncio.create_task(
        regroup(service, "members", "drain", "gd", "--member-id", "m-b", "--wait", "--json")
    )
    async with asyncio.timeout(20):  # the command has drained it and is waiting
        while not any(
            m.drain_state for m in (await service.stubs.describe("gd")).members if m.member_id == "m-b"
        ):
            await asyncio.sleep(0.05)
    await b.leave()
    run = await waiting
    assert run.code == 0 and run.json()["left"] is True and run.json()["drain_state"] is None, run


async def test_offsets_reset(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    a = WireMember(service.stubs.coordinator, "gr", "m-a", ["orders"])
    await converge(service.stubs, "gr", [a])
    await commit(service, a, {0: 10, 1: 20})

    run = await regroup(service, "offsets", "reset", "gr", "--to-offset", "0")
    assert run.code == 2 and "NON_EMPTY_GROUP" in run.err, run
    await a.leave()

    # Without --execute: the plan, and nothing changes.
    run = await regroup(service, "offsets", "reset", "gr", "--to-offset", "0")
    assert run.code == 0 and "Dry run: nothing changed" in run.out, run
    run = await regroup(service, "offsets", "reset", "gr", "--shift-by", "5", "--topic", "orders:1", "--json")
    plan = run.json()
    assert plan["dry_run"] and not plan["applied"], run
    assert [(p["partition"], p["current_offset"], p["new_offset"]) for p in plan["partitions"]] == [
        (1, 20, 25)
    ]
    run = await regroup(service, "offsets", "show", "gr", "--json")
    assert [o["offset"] for o in run.json()["offsets"]] == [10, 20], run

    run = await regroup(
        service, "offsets", "reset", "gr", "--shift-by", "5", "--topic", "orders:1", "--execute", "--json"
    )
    assert run.code == 0 and run.json()["applied"], run
    run = await regroup(service, "offsets", "reset", "gr", "--delete", "--topic", "orders:0", "--execute")
    assert run.code == 0, run
    run = await regroup(service, "offsets", "show", "gr", "--json")
    assert [(o["partition"], o["offset"]) for o in run.json()["offsets"]] == [(1, 25)], run


async def test_describe_a_redundant_rack_aware_group(service: Service) -> None:
    async with GroupAdmin(address(service)) as admin:
        await admin.create_topic("shards", 2, racks=["r1", "r2"])
    async with GroupMember(address(service)) as a, GroupMember(address(service)) as b:
        await a.join("copies", topics=["shards"], replicas=2, rack_id="r1")
        await b.join("copies", topics=["shards"], replicas=2, rack_id="r2")
        for member in (a, b):
            await member.wait_for_assignment(lambda got: len(got) == 2)
        run = await regroup(service, "groups", "describe", "copies")
        assert run.code == 0, run
        summary = run.out.splitlines()[0]
        assert "2 copies of each partition (2 now)" in summary and "rack-local" in summary, run
        # A row per copy holder: both partitions, each held by both members.
        run = await regroup(service, "groups", "describe", "copies", "--json")
        assert run.code == 0, run
        (group,) = run.json()["groups"]
        holders = sorted((p["partition"], p["member_id"]) for p in group["partitions"])
        assert holders == sorted((p, m.member_id) for p in (0, 1) for m in (a, b)), run
