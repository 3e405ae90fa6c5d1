"""The web view on the metrics port (docs/web-view.md): its JSON and files over plain
HTTP against a real server, and the page in a real browser (Debian's chromium, driven
by playwright) following a group live as a second member joins."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from prometheus_client.parser import text_string_to_metric_families

from regroup.client import ConnectWorker, GroupAdmin, GroupMember, RebalanceListener, TopicPartition
from regroup.v1 import admin_pb2
from tests.support.replicas import FAST, owned_by, spread, topics_known
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, converge

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers["Content-Type"] == "application/json", self.headers
        return json.loads(self.body)


def _get(url: str, method: str = "GET") -> Answer:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as e:
        return Answer(e.code, dict(e.headers), e.read())


async def get(service: Service, path: str, method: str = "GET") -> Answer:
    return await asyncio.to_thread(_get, f"http://127.0.0.1:{service.server.metrics_port}{path}", method)


async def started_with_a_group(start_service: ServiceFactory, **settings: Any) -> Service:
    """A server with a metrics port, topic orders (4 partitions) and group g with member m1."""
    service = await start_service(metrics_listen="127.0.0.1:0", **settings)
    await service.stubs.create_topic("orders", 4)
    await converge(service.stubs, "g", [WireMember(service.stubs.coordinator, "g", "m1", ["orders"])])
    return service


async def test_the_metrics_are_still_served_beside_the_view(start_service: ServiceFactory) -> None:
    service = await started_with_a_group(start_service)
    answer = await get(service, "/metrics")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(answer.body.decode())}
    assert {"regroup_members", "regroup_heartbeats"} <= names


async def test_the_groups_are_listed_and_described_as_the_admin_api_does(
    start_service: ServiceFactory,
) -> None:
    service = await started_with_a_group(start_service)

    listing = (await get(service, "/api/groups")).json()
    assert listing["total"] == 1
    assert listing["replicaId"] == service.coordinator.store.replica_id
    assert listing["groups"] == [
        {
            "groupId": "g",
            "groupState": "Stable",
            "groupType": "consumer",
            "groupEpoch": 1,
            "assignmentEpoch": 1,
            "members": 1,
        }
    ]

    answer = await get(service, "/api/groups/g")
    assert answer.status == 200 and answer.headers["Cache-Control"] == "no-store"
    body = answer.json()
    # The description is DescribeGroups' own message, as JSON, with every field.
    described = await service.stubs.describe("g")
    assert body["group"] == MessageToDict(described, always_print_fields_with_no_presence=True)
    (member,) = body["group"]["members"]
    assert member["memberId"] == "m1" and member["memberEpoch"] == 1
    assert member["drainState"] == ""
    (owned,) = member["assignment"]["topicPartitions"]
    assert (owned["topicName"], owned["partitions"]) == ("orders", [0, 1, 2, 3])
    assert member["pendingRevocation"] == {"topicPartitions": []}
    assert body["topics"] == [{"name": "orders", "topicId": owned["topicId"], "numPartitions": 4}]

    # The history is ListGroupEvents' answer, newest first: m1 joined, the group became Stable.
    events = (await get(service, "/api/groups/g/events?limit=5")).json()
    listed = await service.stubs.admin.ListGroupEvents(
        admin_pb2.ListGroupEventsRequest(group_id="g", limit=5)
    )
    assert events == MessageToDict(listed, always_print_fields_with_no_presence=True)
    types = [e["type"] for e in events["events"]]
    assert len(types) == 5 and types[0] == "GROUP_EVENT_TYPE_GROUP_STABLE"
    everything = (await get(service, "/api/groups/g/events")).json()["events"]
    joined = [e for e in everything if e["type"] == "GROUP_EVENT_TYPE_MEMBER_JOINED"]
    assert [e["memberId"] for e in joined] == ["m1"]


async def test_unknown_groups_and_paths_answer_404(start_service: ServiceFactory) -> None:
    service = await started_with_a_group(start_service)

    unknown = await get(service, "/api/groups/nope")
    assert unknown.status == 404
    assert unknown.json()["error"] == "GROUP_ID_NOT_FOUND"

    for path in ("/nope", "/api/nope", "/api/groups/g/nope", "/static/nope.js", "/favicon.ico"):
        answer = await get(service, path)
        assert answer.status == 404, path
        assert answer.json()["error"] == "NOT_FOUND", path

    for query in ("limit=0", "limit=x", "limit=1001"):
        bad = await get(service, f"/api/groups/g/events?{query}")
        assert bad.status == 400 and bad.json()["error"] == "INVALID_REQUEST", query
    # History is kept for any id, also one never seen: none.
    assert (await get(service, "/api/groups/nope/events")).json()["events"] == []
    # Read-only: nothing but GET (and HEAD) is taken.
    refused = await get(service, "/api/groups/g", method="POST")
    assert refused.status == 405 and refused.headers["Allow"] == "GET, HEAD"


async def test_a_group_id_with_a_slash_is_one_path_segment(start_service: ServiceFactory) -> None:
    service = await started_with_a_group(start_service)
    await converge(
        service.stubs, "team/a", [WireMember(service.stubs.coordinator, "team/a", "m", ["orders"])]
    )
    body = (await get(service, "/api/groups/team%2Fa")).json()
    assert body["group"]["groupId"] == "team/a"
    assert (await get(service, "/api/groups/team/a")).status == 404


async def test_the_page_and_its_files_are_served_with_their_types(start_service: ServiceFactory) -> None:
    service = await started_with_a_group(start_service)
    for path, content_type, name in (
        ("/", "text/html; charset=utf-8", "index.html"),
        ("/static/app.js", "text/javascript; charset=utf-8", "app.js"),
        ("/static/style.css", "text/css; charset=utf-8", "style.css"),
    ):
        answer = await get(service, path)
        assert answer.status == 200, path
        assert answer.headers["Content-Type"] == content_type, path
        assert answer.body == (ROOT / "server" / "web" / name).read_bytes(), path
        # Ids are clients' strings: no inline script may run, whatever they hold.
        assert "default-src 'self'" in answer.headers["Content-Security-Policy"], path
        assert answer.headers["X-Content-Type-Options"] == "nosniff", path
    head = await get(service, "/", method="HEAD")
    assert head.status == 200 and head.body == b""


async def test_the_server_header_names_no_python_version(start_service: ServiceFactory) -> None:
    """The port answers `Server: regroup`, not wsgiref's `WSGIServer/0.2 CPython/3.11.7`, which
    tells whoever reaches it which interpreter to look up flaws of: on a page, on /metrics,
    with the view off, and on a request too malformed to reach the app."""
    service = await started_with_a_group(start_service)
    off = await start_service(metrics_listen="127.0.0.1:0", web_view=False)
    for server, path in ((service, "/"), (service, "/api/groups"), (service, "/metrics"), (off, "/")):
        answer = await get(server, path)
        assert answer.status == 200, path
        assert answer.headers["Server"] == "regroup", (path, answer.headers)
    too_many_headers = b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n"  # answered by http.server
    raw = await asyncio.to_thread(_raw_request, service.server.metrics_port, too_many_headers)
    assert raw.startswith(b"HTTP/1.0 431"), raw
    assert b"\r\nServer: regroup\r\n" in raw, raw
    assert b"Python" not in raw, raw


def _raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def _write_acl(path: Path) -> Path:
    path.write_text(json.dumps([]))
    return path


async def test_with_an_acl_the_view_is_off_unless_asked_for(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    acl = _write_acl(tmp_path / "acl.json")
    closed = await start_service(metrics_listen="127.0.0.1:0", acl_file=acl)
    # The port serves the metrics on every path, as before the view existed: no group leaks.
    for path in ("/", "/api/groups", "/metrics"):
        answer = await get(closed, path)
        assert answer.status == 200, path
        assert answer.headers["Content-Type"].startswith("text/plain"), path
        assert b"regroup_members" in answer.body, path

    opened = await start_service(metrics_listen="127.0.0.1:0", acl_file=acl, web_view=True)
    assert (await get(opened, "/api/groups")).json()["groups"] == []
    off = await start_service(metrics_listen="127.0.0.1:0", web_view=False)
    assert (await get(off, "/")).headers["Content-Type"].startswith("text/plain")


# -- the page, in a real browser --------------------------------------------------------------

#: Debian's chromium (.ci/run installs it when missing); playwright drives it as it is,
#: without a browser build of its own (no `playwright install`).
CHROMIUM = os.environ.get("REGROUP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root, where chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Set to 1 to rewrite docs/img/web-view.png from the test's page (tests leave the tree alone).
UPDATE_SCREENSHOT = os.environ.get("REGROUP_UPDATE_SCREENSHOT") == "1"
SCREENSHOT = ROOT / "docs" / "img" / "web-view.png"


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless chromium. Missing, it skips here and fails under CI (CI set), where
    .ci/run installs it: a browser test that quietly skips in CI tests nothing."""
    reason = None
    try:
        from playwright.async_api import async_playwright
    except ImportError as e:
        reason = f"playwright is not installed ({e}): make setup installs it"
    if reason is None and not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        reason = f"no chromium at {CHROMIUM} (apt-get install -y chromium, or set REGROUP_CHROMIUM)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


class SlowToRevoke(RebalanceListener):
    """Holds each revocation until the test releases it, so that the page can be seen
    showing partitions pending revocation and partitions waiting for them."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await self.release.wait()


Cells = dict[str, dict[str, str]]

#: What the page shows: member -> "topic:partition" -> state, read from the matrix's cells.
READ_MATRIX = """() => {
  const out = {};
  for (const row of document.querySelectorAll('#matrix tbody tr')) {
    const cells = {};
    for (const td of row.querySelectorAll('td'))
      cells[td.dataset.topic + ':' + td.dataset.partition] = td.dataset.state;
    out[row.dataset.member] = cells;
  }
  return out;
}"""


def expected_cells(group: Any, partitions: Mapping[str, int]) -> Cells:
    """The matrix DescribeGroups implies: each member's row over every partition."""

    def keys(assignment: Any) -> set[str]:
        return {f"{tp.topic_name}:{p}" for tp in assignment.topic_partitions for p in tp.partitions}

    out: Cells = {}
    for m in group.members:
        owned, revoking, target = keys(m.assignment), keys(m.pending_revocation), keys(m.target_assignment)
        row = {}
        for topic, count in partitions.items():
            for p in range(count):
                key = f"{topic}:{p}"
                row[key] = (
                    "owned"
                    if key in owned
                    else "revoking"
                    if key in revoking
                    else "waiting"
                    if key in target
                    else "empty"
                )
        out[m.member_id] = row
    return out


async def page_shows(page: Any, service: Service, partitions: Mapping[str, int], until: Any) -> Cells:
    """Waits (without reloading) until the page's matrix is what DescribeGroups says, once
    `until(group)` holds; returns it."""
    shown: Cells = {}
    expected: Cells | None = None
    for _ in range(100):
        group = await service.stubs.describe("g1")
        if until(group):
            expected = expected_cells(group, partitions)
            shown = await page.evaluate(READ_MATRIX)
            if shown == expected:
                return shown
        await asyncio.sleep(0.1)
    raise AssertionError(f"the page shows {shown}, DescribeGroups says {expected}")


def states(cells: Cells, member: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in cells[member].values():
        counts[state] = counts.get(state, 0) + 1
    return counts


async def test_the_page_follows_a_group_live_as_a_member_joins(
    start_service: ServiceFactory, browser: Any
) -> None:
    from playwright.async_api import expect

    service = await start_service(metrics_listen="127.0.0.1:0")
    address = f"127.0.0.1:{service.server.port}"
    partitions = {"orders": 6, "payments": 3}
    async with GroupAdmin(address) as admin:
        await admin.create_topics(partitions)
    first = SlowToRevoke()
    async with GroupMember(address, listener=first, member_id="worker-1") as worker1:
        await worker1.join("g1", topics=sorted(partitions))
        await worker1.wait_for_assignment(lambda a: len(a.partitions) == 9)

        page = await browser.new_page(viewport={"width": 1280, "height": 860})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(f"http://127.0.0.1:{service.server.metrics_port}/")
        row = page.locator('#groups tbody tr[data-group="g1"]')
        await expect(row).to_be_visible()
        await expect(row.locator('[data-field="members"]')).to_have_text("1")
        await row.click()
        assert page.url.endswith("#/groups/g1")
        await expect(page.locator("#matrix tbody tr")).to_have_count(1)
        shown = await page_shows(page, service, partitions, lambda g: g.group_state == "Stable")
        assert states(shown, "worker-1") == {"owned": 9}
        # The page marks itself: a reload would lose the mark.
        await page.evaluate("() => { window.notReloaded = true; }")
        if UPDATE_SCREENSHOT:
            await asyncio.sleep(4)  # a timeline with some time at epoch 1 before the join

        second = SlowToRevoke()
        second.release.set()
        async with GroupMember(address, listener=second, member_id="worker-2") as worker2:
            await worker2.join("g1", topics=sorted(partitions))
            # worker-1 holds its revocation: the matrix gains a row, with partitions pending
            # revocation in worker-1's and the same partitions waiting in worker-2's.
            await expect(page.locator("#matrix tbody tr")).to_have_count(2)
            shown = await page_shows(
                page,
                service,
                partitions,
                lambda g: any(m.pending_revocation.topic_partitions for m in g.members),
            )
            moved = states(shown, "worker-1")["revoking"]
            assert moved > 0 and states(shown, "worker-2").get("waiting") == moved
            await expect(page.locator('#group-summary [data-field="state"]')).to_have_text("Reconciling")
            # The history below, live too: both joins, newest first.
            joins = page.locator('#events tr[data-event="GROUP_EVENT_TYPE_MEMBER_JOINED"]')
            await expect(joins).to_have_count(2)
            await expect(joins.first.locator("td").nth(4)).to_have_text("worker-2")
            # The timeline: a lane per member, beside the group's and the assignment's epochs.
            await expect(page.locator("#timeline g.lane.member")).to_have_count(2)
            await expect(page.locator('#timeline g[data-lane="group"] rect[data-epoch="2"]')).to_have_count(1)
            if UPDATE_SCREENSHOT:
                await asyncio.sleep(3)  # a timeline that shows the pause before the release
                await page.screenshot(path=str(SCREENSHOT), full_page=True)

            first.release.set()  # worker-1 releases: worker-2 gets what it waited for
            await worker2.wait_for_assignment(lambda a: len(a.partitions) == moved)
            shown = await page_shows(page, service, partitions, lambda g: g.group_state == "Stable")
            assert states(shown, "worker-1") == {"owned": 9 - moved, "empty": moved}
            assert states(shown, "worker-2") == {"owned": moved, "empty": 9 - moved}
            await expect(page.locator('#group-summary [data-field="state"]')).to_have_text("Stable")
            assert await page.evaluate("() => window.notReloaded === true")

            # A group with more cells than the page draws shows each member's counts instead.
            await page.evaluate("() => { limits.matrixCells = 5; }")
            await expect(page.locator("#matrix-note")).to_be_visible()
            for member, owned in (("worker-1", 9 - moved), ("worker-2", moved)):
                counts = page.locator(f'#matrix tr[data-member="{member}"] td[data-count]')
                await expect(counts).to_have_text([str(owned), "0", "0"])
        assert errors == []


async def test_a_group_another_replica_serves_is_named_with_its_address(
    start_service: ServiceFactory,
) -> None:
    a, b = [await start_service(metrics_listen="127.0.0.1:0", **FAST) for _ in range(2)]
    await spread([a, b])
    group_id = owned_by(b)
    await a.stubs.create_topic("orders", 2)
    await topics_known([a, b], "orders")
    # Joined through a (which forwards to b): only b has the group in memory.
    await converge(a.stubs, group_id, [WireMember(a.stubs.coordinator, group_id, "m1", ["orders"])])
    assert (await get(b, f"/api/groups/{group_id}")).status == 200
    elsewhere = await get(a, f"/api/groups/{group_id}")
    assert elsewhere.status == 404
    body = elsewhere.json()
    assert body["error"] == "NOT_COORDINATOR"
    assert (body["coordinatorReplica"], body["coordinatorAddress"]) == (
        b.coordinator.store.replica_id,
        b.server.address,
    )
    assert group_id not in {g["groupId"] for g in (await get(a, "/api/groups")).json()["groups"]}


async def test_a_connect_group_is_drawn_by_connector_and_task(
    start_service: ServiceFactory, browser: Any
) -> None:
    from playwright.async_api import expect

    service = await start_service(metrics_listen="127.0.0.1:0")
    address = f"127.0.0.1:{service.server.port}"
    async with GroupAdmin(address) as admin:
        await admin.put_connectors("connect-cluster", {"A": 2, "B": 1})
    async with ConnectWorker(address, listener=RebalanceListener()) as worker:
        await worker.join("connect-cluster", url="http://w1:8083", assignor="uniform")
        await worker.wait_for_assignment(lambda a: len(a.partitions) == 5)
        # A connector's units: the connector itself (0), then its tasks (1, 2, ...).
        body = (await get(service, "/api/groups/connect-cluster")).json()
        assert [(t["name"], t["numPartitions"]) for t in body["topics"]] == [("A", 3), ("B", 2)]

        page = await browser.new_page()
        await page.goto(f"http://127.0.0.1:{service.server.metrics_port}/#/groups/connect-cluster")
        cells = page.locator(f'#matrix tr[data-member="{worker.member_id}"] td')
        await expect(cells).to_have_count(5)
        for i in range(5):
            await expect(cells.nth(i)).to_have_attribute("data-state", "owned")
        await expect(page.locator("#matrix thead tr").nth(1).locator("th")).to_have_text(
            ["member (epoch, state)", "c", "t0", "t1", "c", "t0"]
        )


async def _group_with_a_long_history(service: Service, events: int) -> list[WireMember]:
    """Group g1 on topic orders with at least `events` events: a static member (instance
    web-1) stays while others join and leave; returns the members still in the group."""
    await service.stubs.create_topic("orders", 4)
    stays = WireMember(service.stubs.coordinator, "g1", "worker-1", ["orders"], instance_id="web-1")
    await converge(service.stubs, "g1", [stays])
    for i in range(2, 100):
        listed = await service.stubs.admin.ListGroupEvents(
            admin_pb2.ListGroupEventsRequest(group_id="g1", limit=1000)
        )
        if len(listed.events) >= events:
            return [stays]
        comes = WireMember(service.stubs.coordinator, "g1", f"worker-{i}", ["orders"])
        await converge(service.stubs, "g1", [stays, comes])
        await comes.leave()
        await converge(service.stubs, "g1", [stays])
    raise AssertionError(f"no {events} events after 100 members")


async def test_a_member_row_names_its_instance_and_host(start_service: ServiceFactory, browser: Any) -> None:
    """Beside the member id (often generated, so telling little): the instance id a
    static member gave and the host it calls from, as DescribeGroups has them."""
    from playwright.async_api import expect

    service = await start_service(metrics_listen="127.0.0.1:0")
    await service.stubs.create_topic("orders", 4)
    static = WireMember(service.stubs.coordinator, "g1", "worker-1", ["orders"], instance_id="web-1")
    dynamic = WireMember(service.stubs.coordinator, "g1", "worker-2", ["orders"])
    await converge(service.stubs, "g1", [static, dynamic])
    hosts = {m.member_id: m.client_host for m in (await service.stubs.describe("g1")).members}
    assert hosts["worker-1"] and hosts["worker-2"]

    page = await browser.new_page()
    await page.goto(f"http://127.0.0.1:{service.server.metrics_port}/#/groups/g1")
    head = page.locator('#matrix tr[data-member="worker-1"] th')
    await expect(head.locator('[data-field="member-id"]')).to_have_text("worker-1")
    await expect(head.locator('[data-field="instance-id"]')).to_have_text("web-1")
    await expect(head.locator('[data-field="client-host"]')).to_have_text(hosts["worker-1"])
    # A dynamic member has no instance id: only its host is shown.
    other = page.locator('#matrix tr[data-member="worker-2"] th')
    await expect(other.locator('[data-field="client-host"]')).to_have_text(hosts["worker-2"])
    await expect(other.locator('[data-field="instance-id"]')).to_have_count(0)
    # The counts that stand in for a large group's matrix name them too.
    await page.evaluate("() => { limits.matrixCells = 1; }")
    await expect(page.locator("#matrix-note")).to_be_visible()
    await expect(head.locator('[data-field="instance-id"]')).to_have_text("web-1")
    await expect(head.locator('[data-field="client-host"]')).to_have_text(hosts["worker-1"])


async def test_a_long_history_scrolls_in_a_box_of_its_own(
    start_service: ServiceFactory, browser: Any
) -> None:
    """60 events and more do not stretch the page (4,500 px before): the newest 50 scroll in
    a box under the matrix, and a button brings older ones, 50 at a time."""
    from playwright.async_api import expect

    service = await start_service(metrics_listen="127.0.0.1:0")
    await _group_with_a_long_history(service, 70)
    total = len(
        (
            await service.stubs.admin.ListGroupEvents(
                admin_pb2.ListGroupEventsRequest(group_id="g1", limit=1000)
            )
        ).events
    )
    viewport = {"width": 1280, "height": 860}
    page = await browser.new_page(viewport=viewport)
    await page.goto(f"http://127.0.0.1:{service.server.metrics_port}/#/groups/g1")
    rows = page.locator("#events tbody tr")
    await expect(rows).to_have_count(50)
    height = await page.evaluate("() => document.documentElement.scrollHeight")
    # The whole page within two screens; the history's box within one, scrolling inside.
    assert height < 2 * viewport["height"], height
    box = await page.evaluate(
        "() => { const b = document.getElementById('events-box');"
        " return b ? [b.clientHeight, b.scrollHeight] : null; }"
    )
    assert box is not None, "no #events-box around the history"
    assert box[0] < viewport["height"] * 0.6 and box[1] > box[0], box
    await expect(page.locator("#events-shown")).to_have_text("(the newest 50)")

    more = page.locator("#events-more")
    await more.click()
    await expect(rows).to_have_count(min(total, 100))
    if total <= 100:
        await expect(more).to_be_hidden()
        await expect(page.locator("#events-shown")).to_have_text(f"(all {total})")
    assert await page.evaluate("() => document.documentElement.scrollHeight") < 2 * viewport["height"]
