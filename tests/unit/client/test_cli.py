"""The `regroup` command's pieces that need no server: the base client stays free of
click and rich, the hint without the cli extra, and the parsing and rendering helpers.
(tests/integration/test_cli.py runs every command against a real server.)"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from regroup.cli.app import cli
from regroup.cli.describe import ASSIGNED, ASSIGNING, REVOKING, UNASSIGNED, member_json, partition_rows
from regroup.cli.diagnose import hint, host_port
from regroup.cli.events import event_json, since_ms, type_value
from regroup.cli.exits import BAD_TOKEN, DESCRIPTIONS, ERROR, OK, REFUSED, TIMEOUT, UNREACHABLE, UNSUPPORTED
from regroup.cli.main import HINT
from regroup.cli.output import partitions_text, ranges, timestamp
from regroup.client.tls import TlsConfig
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.doc_blocks import parse


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_base_client_imports_neither_click_nor_rich() -> None:
    run = _python(
        "import sys, regroup.client, regroup.cli, regroup.cli.main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'rich')))"
    )
    assert run.returncode == 0 and run.stdout == "[]\n", run


@pytest.mark.parametrize("missing", ["click", "rich"])
def test_without_the_cli_extra_the_command_says_what_to_install(missing: str) -> None:
    # None in sys.modules makes the import fail as if the package were not installed.
    run = _python(f"import sys; sys.modules[{missing!r}] = None\nfrom regroup.cli.main import main; main()")
    assert run.returncode == 1 and run.stderr == HINT + "\n" and run.stdout == "", run
    assert "pip install 'regroup-client[cli]'" in HINT


def test_ranges_and_partitions() -> None:
    assert ranges([5, 0, 1, 2, 3, 9, 10]) == "0-3,5,9-10"
    assert ranges([]) == ""
    assignment = common_pb2.Assignment(
        topic_partitions=[
            common_pb2.TopicPartitions(topic_name="orders", partitions=[3, 0, 1]),
            common_pb2.TopicPartitions(topic_name="clicks", partitions=[7]),
            common_pb2.TopicPartitions(topic_name="empty", partitions=[]),
        ]
    )
    assert partitions_text(assignment) == "clicks:7 orders:0-1,3"
    assert partitions_text(common_pb2.Assignment()) == "-"


def test_times() -> None:
    assert timestamp(1_795_739_336_471) == "2026-11-27T00:28:56.471Z"
    assert timestamp(0) == "-"
    now = 1_800_000_000_000
    assert since_ms("10m", now) == now - 600_000
    assert since_ms("1.5h", now) == now - 5_400_000
    assert since_ms("2026-11-27T00:28:56.471Z") == 1_795_739_336_471
    assert since_ms("2026-11-27T00:28:56.471") == 1_795_739_336_471  # UTC unless it says
    with pytest.raises(click.BadParameter):
        since_ms("yesterday")


def test_event_types_by_any_spelling() -> None:
    expected = admin_pb2.GROUP_EVENT_TYPE_MEMBER_JOINED
    assert type_value("member_joined") == type_value("MEMBER-JOINED") == expected
    assert type_value("GROUP_EVENT_TYPE_MEMBER_JOINED") == expected
    with pytest.raises(click.BadParameter, match="session_expired"):
        type_value("joined")


def test_partition_rows_say_who_owns_what() -> None:
    def assignment(*partitions: int) -> common_pb2.Assignment:
        return common_pb2.Assignment(
            topic_partitions=[common_pb2.TopicPartitions(topic_name="t", partitions=partitions)]
        )

    old = admin_pb2.DescribedMember(
        member_id="old",
        assignment=assignment(0),
        pending_revocation=assignment(1),
        target_assignment=assignment(0),
    )
    new = admin_pb2.DescribedMember(member_id="new", target_assignment=assignment(1, 2))
    group = admin_pb2.DescribedGroup(group_id="g", members=[new, old])
    offsets = coordinator_pb2.OffsetFetchResponse(
        topics=[
            coordinator_pb2.OffsetFetchResponse.Topic(
                name="t",
                partitions=[
                    coordinator_pb2.OffsetFetchResponse.Partition(partition=p, offset=o)
                    for p, o in ((0, 10), (3, 30), (4, -1))
                ],
            )
        ]
    )
    rows = [
        (r.partition, r.committed_offset, r.member and r.member.member_id, r.state)
        for r in partition_rows(group, offsets)
    ]
    assert rows == [
        (0, 10, "old", ASSIGNED),
        (1, None, "old", REVOKING),  # the owner still revoking it, not the next one
        (2, None, "new", ASSIGNING),
        (3, 30, None, UNASSIGNED),
    ]


def test_the_prestop_example_is_a_valid_manifest_whose_hook_the_command_accepts() -> None:
    """docs/cli.md's preStop example cannot run here (no cluster): its manifest is checked
    against Kubernetes' schemas, and its hook's command line against the command's parser."""
    root = Path(__file__).resolve().parents[3]
    (block,) = [
        b for b in parse((root / "docs" / "cli.md").read_text(), "docs/cli.md") if b.language == "yaml"
    ]
    validate = Path(sys.executable).parent / "kubernetes-validate"
    run = subprocess.run(
        [str(validate), "--strict", "--quiet", "-"],
        input=block.code,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (container,) = yaml.safe_load(block.code)["spec"]["template"]["spec"]["containers"]
    shell, dash_c, line = container["lifecycle"]["preStop"]["exec"]["command"]
    assert (shell, dash_c) == ("sh", "-c")
    argv = shlex.split(line.replace('"$POD_NAME"', "orders-workers-7d9f-abcde"))
    assert argv[:3] == ["regroup", "members", "drain"] and "--wait" in argv
    # Parsed as the command would parse it (nothing is called).
    members = cli.commands["members"]
    assert isinstance(members, click.Group)
    params = members.commands["drain"].make_context("drain", argv[3:]).params
    assert params["instance_id"] == "orders-workers-7d9f-abcde" and params["wait"] and params["timeout"] == 60
    grace = yaml.safe_load(block.code)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > params["timeout"], "the grace period must outlast the drain"


def test_the_exit_codes_of_the_docs_are_the_commands() -> None:
    """docs/cli.md's table lists every exit code the command has (exits.DESCRIPTIONS), 6 (a
    token the coordinator does not accept, issue 38) included, and no other."""
    docs = (Path(__file__).resolve().parents[3] / "docs" / "cli.md").read_text()
    section = docs.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = [int(m) for m in re.findall(r"^\| (\d+) \|", section, re.M)]
    assert documented == sorted(DESCRIPTIONS) and BAD_TOKEN in documented, documented
    assert BAD_TOKEN not in (OK, ERROR, REFUSED, UNREACHABLE, TIMEOUT, UNSUPPORTED)


def test_grpc_targets_to_probe() -> None:
    assert host_port("127.0.0.1:50051") == ("127.0.0.1", 50051)
    assert host_port("dns:///regroup.example.internal:443") == ("regroup.example.internal", 443)
    assert host_port("[::1]:50051") == ("::1", 50051)
    assert host_port("unix:/run/regroup.sock") is None
    assert host_port("regroup") is None


def test_handshake_errors_grpc_names_need_no_probe() -> None:
    """Nothing listens at the address given: the hints that gRPC's own words decide."""
    wrong_version = "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: ...:WRONG_VERSION_NUMBER: OK"
    assert "leave out --tls" in (hint("unix:/nowhere", wrong_version, TlsConfig()) or "")
    verify = "Tls handshake failed: ...:CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate"
    assert "--tls-ca FILE" in (hint("unix:/nowhere", verify, TlsConfig()) or "")
    # "Socket closed" without a server to ask: no guess.
    closed = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
    assert hint("unix:/nowhere", closed, None) is None
    assert hint("127.0.0.1:1", "Connection refused", None) is None


def test_event_json_is_null_where_the_event_does_not_concern_a_field() -> None:
    """docs/cli.md: "a field that does not apply is null". proto3 sends 0 and "" for fields an
    event does not set: by type, what is null and what is a real 0 (issue 38)."""
    joined = event_json(
        admin_pb2.GroupEvent(
            type=admin_pb2.GROUP_EVENT_TYPE_MEMBER_JOINED, group_epoch=1, member_id="m", member_epoch=1
        )
    )
    assert joined["member_epoch"] == 1 and joined["group_epoch"] == 1
    for key in ("previous_group_epoch", "partition_count", "duration_ms", "partitions_moved", "topic_name"):
        assert joined[key] is None, key
    bumped = event_json(
        admin_pb2.GroupEvent(type=admin_pb2.GROUP_EVENT_TYPE_GROUP_EPOCH_BUMPED, group_epoch=1)
    )
    assert bumped["previous_group_epoch"] == 0 and bumped["member_epoch"] is None  # 0 -> 1: a real 0
    assert bumped["member_id"] is None and bumped["partitions_moved"] is None
    target = event_json(admin_pb2.GroupEvent(type=admin_pb2.GROUP_EVENT_TYPE_TARGET_COMPUTED, group_epoch=2))
    assert (
        target["partitions_moved"] == 0 and target["duration_ms"] == 0 and target["partition_count"] is None
    )
    deleted = event_json(
        admin_pb2.GroupEvent(type=admin_pb2.GROUP_EVENT_TYPE_TOPIC_DELETED, topic_name="orders")
    )
    assert deleted["partition_count"] == 0 and deleted["topic_name"] == "orders"  # none left: a real 0
    # A drain does not concern the member's epoch (the text view leaves it out too).
    draining = event_json(
        admin_pb2.GroupEvent(type=admin_pb2.GROUP_EVENT_TYPE_MEMBER_DRAINING, member_id="m")
    )
    assert draining["member_epoch"] is None and draining["member_id"] == "m"


def test_member_json_is_null_for_what_the_member_did_not_say() -> None:
    member = admin_pb2.DescribedMember(member_id="m", member_epoch=3, member_state="STABLE")
    described = member_json(member)
    assert described["client_id"] is None and described["host"] is None, described
    assert described["instance_id"] is None and described["rack"] is None
    group = admin_pb2.DescribedGroup(
        group_id="g",
        members=[
            admin_pb2.DescribedMember(
                member_id="m",
                assignment=common_pb2.Assignment(
                    topic_partitions=[common_pb2.TopicPartitions(topic_name="t", partitions=[0])]
                ),
            )
        ],
    )
    (row,) = partition_rows(group, None)
    assert row.json()["client_id"] is None and row.json()["host"] is None and row.json()["member_id"] == "m"
