"""server/webview.py without a server: reads handed to an event loop running in another
thread (as the coordinator's is to the HTTP threads), and how the app answers when a
read fails, times out or meets a stopped loop."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from regroup.reconciler.errors import CoordinatorNotAvailable
from regroup.server.webview import STATIC_FILES, GroupReader, HttpApp


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, stopped and closed at the end."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def reader(loop: asyncio.AbstractEventLoop, timeout_s: float = 2.0) -> GroupReader:
    return GroupReader(coordinator=None, loop=loop, timeout_s=timeout_s)  # type: ignore[arg-type]


def test_a_read_runs_on_the_loop_and_an_awaitable_is_awaited_there(loop: asyncio.AbstractEventLoop) -> None:
    on = reader(loop)
    assert on._on_loop(lambda: threading.current_thread().ident) != threading.get_ident()

    async def later() -> str:
        await asyncio.sleep(0.01)
        return "read"

    assert on._on_loop(later) == "read"
    with pytest.raises(KeyError):
        on._on_loop(lambda: {}["missing"])


def test_a_read_past_the_timeout_is_abandoned_and_cancelled(loop: asyncio.AbstractEventLoop) -> None:
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError):
        reader(loop, timeout_s=0.1)._on_loop(slow)
    assert cancelled.wait(5)
    # A read the loop had not started yet never runs once abandoned.
    ran = threading.Event()
    loop.call_soon_threadsafe(time.sleep, 0.3)  # the loop is busy meanwhile
    with pytest.raises(TimeoutError):
        reader(loop, timeout_s=0.05)._on_loop(ran.set)
    time.sleep(0.4)
    assert not ran.is_set()


def test_a_stopped_loop_is_a_runtime_error() -> None:
    closed = asyncio.new_event_loop()
    closed.close()
    with pytest.raises(RuntimeError):
        reader(closed)._on_loop(lambda: None)


class Failing:
    """A reader whose every read raises `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def groups(self, *args: Any) -> Any:
        raise self.error

    group = events = groups


def call(app: HttpApp, path: str, method: str = "GET") -> tuple[str, dict[str, str], bytes]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answer["status"], answer["headers"] = status, dict(headers)

    body = b"".join(app({"REQUEST_METHOD": method, "RAW_URI": path, "PATH_INFO": path}, start_response))
    return answer["status"], answer["headers"], body


def metrics(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"metrics"]


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (TimeoutError(), "503 Service Unavailable", "UNAVAILABLE"),
        (RuntimeError("Event loop is closed"), "503 Service Unavailable", "UNAVAILABLE"),
        (
            CoordinatorNotAvailable("The store is away"),
            "503 Service Unavailable",
            "COORDINATOR_NOT_AVAILABLE",
        ),
        (ZeroDivisionError(), "500 Internal Server Error", "INTERNAL"),
    ],
)
def test_failed_reads_answer_json_errors(error: BaseException, status: str, code: str) -> None:
    app = HttpApp(metrics)
    app.serve_view(Failing(error), {path: b"" for path in STATIC_FILES})  # type: ignore[arg-type]
    for path in ("/api/groups", "/api/groups/g", "/api/groups/g/events"):
        got, headers, body = call(app, path)
        assert (got, headers["Content-Type"], json.loads(body)["error"]) == (status, "application/json", code)


def test_without_the_view_every_path_is_the_metrics() -> None:
    app = HttpApp(metrics)
    for path in ("/", "/metrics", "/api/groups", "/anything"):
        assert call(app, path) == ("200 OK", {"Content-Type": "text/plain", "Server": "regroup"}, b"metrics")


def test_the_page_names_its_files_and_json_relative_to_itself() -> None:
    """With the view on, the Helm chart binds the port to the pod's IP, which `kubectl
    port-forward` (it connects to the pod's loopback) does not reach; the API server's pod
    proxy (`kubectl proxy`) does, under a path prefix. So the page asks for its files and
    its JSON relative to where it was loaded from, never from the server's root."""
    import re

    from regroup.server.webview import load_files

    files = load_files()
    page, script = files["/"].decode(), files["/static/app.js"].decode()
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert "static/app.js" in links and "static/style.css" in links
    assert not [link for link in links if link.startswith("/")], links
    assert re.findall(r"""["'`](/[a-z]+)""", script) == [], "an absolute path in app.js"
    assert '"api/groups"' in script
