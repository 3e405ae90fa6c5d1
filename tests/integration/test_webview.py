"""The web view on the metrics port (docs/web-view.md): its JSON and files over plain
HTTP against a real server, and the page in a real browser (Debian's chromium, driven
by playwright) following a group live as a second member joins."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Service, ServiceFactory
from tests.support.wire import WireMember, converge

pytestmark = pytest.mark.integration

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

    events = (await get(service, "/api/groups/g/events?limit=5")).json()
    assert isinstance(events["events"], list)


async def test_unknown_groups_and_paths_answer_404(start_service: ServiceFactory) -> None:
    service = await started_with_a_group(start_service)

    unknown = await get(service, "/api/groups/nope")
    assert unknown.status == 404
    assert unknown.json()["error"] == "GROUP_ID_NOT_FOUND"

    for path in ("/nope", "/api/nope", "/api/groups/g/nope", "/static/nope.js", "/favicon.ico"):
        answer = await get(service, path)
        assert answer.status == 404, path
        assert answer.json()["error"] == "NOT_FOUND", path

    bad = await get(service, "/api/groups/g/events?limit=0")
    assert bad.status == 400 and bad.json()["error"] == "INVALID_REQUEST"
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
