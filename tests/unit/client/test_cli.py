"""The `regroup` command's pieces that need no server: the base client stays free of
click and rich, the hint without the cli extra, and the parsing and rendering helpers.
(tests/integration/test_cli.py runs every command against a real server.)"""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from regroup.cli.describe import ASSIGNED, ASSIGNING, REVOKING, UNASSIGNED, partition_rows
from regroup.cli.events import since_ms, type_value
from regroup.cli.main import HINT
from regroup.cli.output import partitions_text, ranges, timestamp
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2


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
