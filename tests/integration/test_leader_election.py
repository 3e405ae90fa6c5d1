"""Leader groups end to end (docs/leader-election.md): a real server on the embedded
Postgres, real LeaderElection clients, and the fencing pattern on a real Postgres table."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator

import asyncpg
import pytest

from regroup.client import CommitFailed, LeaderElection, MemberOptions, SyncLeaderElection, TopicPartition
from regroup.client.leader import LEADERSHIP_TOPIC_ID
from regroup.v1 import admin_pb2, common_pb2
from tests.support.cli import regroup
from tests.support.service import Service, ServiceFactory

INTERVAL_MS = 100
SESSION_MS = 1500


@pytest.fixture
async def fast(start_service: ServiceFactory) -> Service:
    return await start_service(heartbeat_interval_ms=INTERVAL_MS, session_timeout_ms=SESSION_MS)


@pytest.fixture
async def fence(database: str) -> AsyncIterator[asyncpg.Connection]:
    """The guarded table of docs/leader-election.md on the test's Postgres."""
    conn = await asyncpg.connect(database)
    await conn.execute(
        "CREATE TABLE leader_state (id int PRIMARY KEY, value text NOT NULL, token bigint NOT NULL);"
        "INSERT INTO leader_state VALUES (1, '', 0)"
    )
    yield conn
    await conn.close()


async def guarded_write(conn: asyncpg.Connection, value: str, token: int) -> bool:
    """The docs' guarded write: refused when a newer leader wrote already."""
    status = await conn.execute(
        "UPDATE leader_state SET value = $1, token = $2 WHERE id = 1 AND token <= $2", value, token
    )
    return bool(status == "UPDATE 1")


def election(
    service: Service, member_id: str, events: list[tuple[str, str, int | None]], streams: bool = False
) -> LeaderElection:
    async def elected(token: int) -> None:
        events.append(("elected", member_id, token))

    async def revoked() -> None:
        events.append(("revoked", member_id, None))

    # Unary heartbeats unless asked: the crash and handover timings are then the protocol's own.
    return LeaderElection(
        f"127.0.0.1:{service.server.port}",
        "jobs",
        member_id=member_id,
        on_elected=elected,
        on_revoked=revoked,
        options=MemberOptions(member_stream=streams, session_safety_margin_ms=300),
    )


@pytest.mark.parametrize("streams", [False, True], ids=["unary", "member-streams"])
async def test_a_crashed_leader_is_replaced_within_the_session_timeout_and_its_token_is_refused(
    fast: Service, fence: asyncpg.Connection, streams: bool
) -> None:
    events: list[tuple[str, str, int | None]] = []
    # With streams both share the process's one stream: the crash must not take b's with it.
    a = election(fast, "a", events, streams)
    b = election(fast, "b", events, streams)
    await a.start()
    async with asyncio.timeout(5):
        old = await a.wait_elected()
    await b.start()
    assert await guarded_write(fence, "from a", old)
    await asyncio.sleep(3 * INTERVAL_MS / 1000)
    assert not b.is_leader

    crashed_at = time.monotonic()
    await a.abort()  # no leave, no on_revoked: the coordinator only sees heartbeats stop
    await asyncio.sleep(SESSION_MS / 2000)
    assert not b.is_leader, "a second leader before the old one's session expired"
    async with asyncio.timeout(SESSION_MS / 1000 + 2):
        new = await b.wait_elected()
    took = time.monotonic() - crashed_at
    assert SESSION_MS / 2000 <= took <= SESSION_MS / 1000 + 1.0, took
    assert new > old
    assert await guarded_write(fence, "from b", new)
    assert not await guarded_write(fence, "from the zombie a", old)  # the old leader is fenced
    assert await fence.fetchrow("SELECT value, token FROM leader_state") == ("from b", new)
    assert [e for e in events if e[1] == "a"] == [("elected", "a", old)]
    await b.close()
    assert events[-1] == ("revoked", "b", None)


async def test_a_graceful_leave_hands_over_within_a_few_heartbeat_intervals(
    fast: Service, fence: asyncpg.Connection
) -> None:
    events: list[tuple[str, str, int | None]] = []
    a = election(fast, "a", events)
    b = election(fast, "b", events)
    await a.start()
    async with asyncio.timeout(5):
        old = await a.wait_elected()
    await b.start()
    await asyncio.sleep(2 * INTERVAL_MS / 1000)
    left_at = time.monotonic()
    await a.close()
    assert not a.is_leader and a.token is None
    async with asyncio.timeout(5):
        new = await b.wait_elected()
    took = time.monotonic() - left_at
    assert took <= 3 * INTERVAL_MS / 1000 + 0.2, took
    assert new > old
    # a stepped down (on_revoked) before it left, so before b was elected.
    assert events == [("elected", "a", old), ("revoked", "a", None), ("elected", "b", new)]
    assert await guarded_write(fence, "from b", new)
    assert not await guarded_write(fence, "late write from a", old)
    await b.close()


async def test_describe_groups_history_and_the_web_view_show_the_leader(
    start_service: ServiceFactory,
) -> None:
    fast = await start_service(
        heartbeat_interval_ms=INTERVAL_MS, session_timeout_ms=SESSION_MS, metrics_listen="127.0.0.1:0"
    )
    events: list[tuple[str, str, int | None]] = []
    async with election(fast, "a", events) as a, election(fast, "b", events):
        async with asyncio.timeout(5):
            await a.wait_elected()
        await asyncio.sleep(3 * INTERVAL_MS / 1000)
        described = await fast.stubs.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["jobs"]))
        group = described.groups[0]
        assert group.assignor_name == "leader"
        leaders = {
            m.member_id: [
                (tp.topic_id, tp.topic_name, list(tp.partitions)) for tp in m.assignment.topic_partitions
            ]
            for m in group.members
        }
        assert leaders == {"a": [(LEADERSHIP_TOPIC_ID, "<leadership>", [0])], "b": []}
        history = await fast.stubs.admin.ListGroupEvents(admin_pb2.ListGroupEventsRequest(group_id="jobs"))
        assert history.events
        url = f"http://127.0.0.1:{fast.server.metrics_port}/api/groups/jobs"
        body = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read()))
        assert {m["memberId"] for m in body["group"]["members"]} == {"a", "b"}
        # The command shows the leader as the holder of <leadership> partition 0.
        run = await regroup(fast, "groups", "describe", "jobs", "--json")
        assert run.code == 0, run.err
        (described_group,) = run.json()["groups"]
        assert {m["member_id"]: m["assignment"] for m in described_group["members"]} == {
            "a": [{"topic": "<leadership>", "topic_id": LEADERSHIP_TOPIC_ID, "partitions": [0]}],
            "b": [],
        }
        # Leadership is no topic: committing an offset for it is refused precisely.
        with pytest.raises(CommitFailed) as refused:
            await a.member.commit({TopicPartition("<leadership>", 0, LEADERSHIP_TOPIC_ID): 1})
        (error,) = refused.value.partitions.values()
        assert error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION


async def test_the_sync_twin_elects_and_steps_down(fast: Service) -> None:
    seen: list[object] = []

    def run() -> None:
        with SyncLeaderElection(
            f"127.0.0.1:{fast.server.port}",
            "sync-jobs",
            on_elected=seen.append,
            on_revoked=lambda: seen.append("revoked"),
        ) as e:
            token = e.wait_elected(timeout=5)
            assert e.is_leader and e.token == token
        seen.append(e.token)

    await asyncio.to_thread(run)
    assert len(seen) == 3 and isinstance(seen[0], int) and seen[1:] == ["revoked", None]
