"""The read-only web view and the HTTP server it shares with /metrics (docs/web-view.md).

The metrics port (REGROUP_METRICS_LISTEN) serves, from a thread of its own:

- `/metrics`: prometheus_client's own WSGI app, unchanged (its content negotiation,
  gzip and `name[]` filters included);
- when the web view is served (REGROUP_WEB_VIEW, `Settings.web_view_served`): `/` (one
  page), `/static/app.js` and `/static/style.css` (package data under server/web/, read
  once at start so a broken install fails the start, not a page load), and JSON under
  `/api/`: `/api/groups`, `/api/groups/<id>`, `/api/groups/<id>/events`; any other path
  answers 404;
- when it is not: every path answers with the metrics, as prometheus_client's server did
  before the web view existed, so that a scraper configured on another path keeps working.

The groups change on the event loop, and the HTTP server runs in other threads: every
read runs on the loop (`on_loop_call`, with a timeout), copies what it needs there (the
DescribeGroups message, plain lists) and the thread turns that into JSON off the loop.
Nothing here writes: the view has no principal to check, so it is a setting of its own
rather than a subject of the ACL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import importlib.resources
import inspect
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from google.protobuf.json_format import MessageToDict

from regroup.reconciler.errors import ApiError, CoordinatorNotAvailable, InvalidRequest
from regroup.reconciler.model import CONNECT_GROUP_TYPE
from regroup.reconciler.subscription import group_topics
from regroup.v1 import admin_pb2

from . import mapping, watch
from .leases import shard_of

if TYPE_CHECKING:
    from .runtime import Coordinator

log = structlog.get_logger("regroup")

#: The package holding the page's files (server/web/ in a checkout).
WEB_PACKAGE = "regroup.server.web"

#: Path -> (file under server/web/, content type).
STATIC_FILES: Mapping[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}

#: Group and member ids are chosen by clients: the page only ever sets them as text, and
#: this policy forbids inline scripts and every other origin, so that one crafted to look
#: like markup cannot run. Nothing embeds the page (frame-ancestors) or posts from it.
SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]

#: The Server header of every answer: no version of regroup or Python, which would tell
#: whoever reaches the port what flaws to try.
SERVER_NAME = "regroup"

#: /api/groups lists at most this many groups (in id order, with the total): the page
#: polls it every second, and a replica may serve a hundred thousand groups.
MAX_LISTED_GROUPS = 1000
#: /api/groups/<id>/events answers this many events unless `limit` says otherwise (at most MAX).
DEFAULT_EVENTS = 50
MAX_EVENTS = 1000
#: How long a read may wait for the event loop before the request answers 503.
LOOP_TIMEOUT_S = 2.0

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class NotFound(Exception):
    """404: `body` says why, as JSON."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        super().__init__(body.get("message", ""))
        self.body = body


def load_files() -> dict[str, bytes]:
    """The page's files, by path (FileNotFoundError names a file a broken install lacks)."""
    root = importlib.resources.files(WEB_PACKAGE)
    return {path: root.joinpath(name).read_bytes() for path, (name, _) in STATIC_FILES.items()}


@dataclass
class GroupReader:
    """Reads the coordinator's groups on its event loop, for the HTTP threads."""

    coordinator: Coordinator
    loop: asyncio.AbstractEventLoop
    timeout_s: float = LOOP_TIMEOUT_S
    #: The events' answer is cut to this many bytes, as ListGroupEvents' (REGROUP_MAX_MESSAGE_BYTES).
    max_message_bytes: int = 4 * 1024 * 1024

    def _on_loop(self, read: Callable[[], Any]) -> Any:
        """`read()` run on the loop, awaited there if it returns an awaitable; its result
        here. TimeoutError past `timeout_s` (the read is then cancelled if it has not
        run), RuntimeError when the loop is closed (the server is stopping).

        As telemetry.on_loop_call does for the gauges, but made from the request's
        thread: on_loop_call learns the loop's thread from where it is built."""
        done = concurrent.futures.Future[Any]()

        def call() -> None:
            if not done.set_running_or_notify_cancel():
                return  # timed out before the loop got to it
            try:
                result = read()
            except Exception as e:  # noqa: BLE001 - handed to the request's thread, which answers for it
                done.set_exception(e)
                return
            if not inspect.isawaitable(result):
                done.set_result(result)
                return
            task = asyncio.ensure_future(result)
            tasks.append(task)
            task.add_done_callback(lambda t: _settle(done, t))

        tasks: list[asyncio.Future[Any]] = []
        self.loop.call_soon_threadsafe(call)
        try:
            return done.result(self.timeout_s)
        except TimeoutError:
            done.cancel()
            for task in tasks:  # nobody waits for it any more (a slow store read)
                self.loop.call_soon_threadsafe(task.cancel)
            raise

    def groups(self) -> dict[str, Any]:
        """The groups this replica serves, as ListGroups lists them (first MAX_LISTED_GROUPS by id)."""

        def read() -> tuple[list[admin_pb2.ListGroupsResponse.Group], int, str]:
            groups = self.coordinator.groups
            served = self.coordinator.served_group_ids()  # as ListGroups: not from a stale view
            # On the loop, so no full sort: the first ids in O(n log k).
            out = []
            for group_id in heapq.nsmallest(MAX_LISTED_GROUPS, served):
                g = groups[group_id]
                out.append(
                    admin_pb2.ListGroupsResponse.Group(
                        group_id=group_id,
                        group_state=g.state().value,
                        group_type=g.group_type,
                        group_epoch=g.group_epoch,
                        assignment_epoch=g.assignment_epoch,
                        members=len(g.members),
                    )
                )
            return out, len(served), self.coordinator.store.replica_id

        listed, total, replica = self._on_loop(read)
        return {
            "replicaId": replica,
            "total": total,
            "groups": [_json(g) for g in listed],
        }

    def group(self, group_id: str) -> dict[str, Any]:
        """The group as DescribeGroups describes it, and its topics' partition counts
        (connectors' units for a Connect group: the connector, then its tasks)."""

        def read() -> tuple[admin_pb2.DescribedGroup, list[tuple[str, str, int]]] | dict[str, Any]:
            coordinator = self.coordinator
            if not coordinator.shards.serves(group_id, coordinator.clock.monotonic_ms()):
                return self._absent(group_id)
            group = coordinator.group(group_id)
            if group is None:
                return self._absent(group_id)
            image = coordinator.image_for(group_id, group.group_type)
            if group.group_type == CONNECT_GROUP_TYPE:
                topics = sorted(image.by_id.values(), key=lambda t: t.name)
            else:
                named = group_topics(image, group.subscribed_topic_names(), group.subscribed_regexes())
                topics = sorted(named, key=lambda t: t.name)
            described = mapping.group_pb(group, image, coordinator.config)
            return described, [(t.name, t.topic_id, t.num_partitions) for t in topics]

        answer = self._on_loop(read)
        if isinstance(answer, dict):
            raise NotFound(answer)
        described, topics = answer
        return {
            "group": _json(described),
            "topics": [{"name": n, "topicId": i, "numPartitions": c} for n, i, c in topics],
        }

    def events(self, group_id: str, limit: int) -> dict[str, Any]:
        """The group's last events, newest first, exactly as ListGroupEvents answers them
        (from the store: any replica answers, also for a deleted group)."""
        request = admin_pb2.ListGroupEventsRequest(group_id=group_id, limit=limit)
        answer = self._on_loop(
            lambda: watch.list_group_events(self.coordinator, request, self.max_message_bytes)
        )
        return _json(answer)

    def _absent(self, group_id: str) -> dict[str, Any]:
        """Why the group is not here: another replica coordinates it, or nobody knows it.
        Read from the last lease round's view, without waking the lease keeper as a
        refused call would (the page polls)."""
        shards = self.coordinator.shards
        shard = shard_of(group_id, shards.count)
        now_ms = self.coordinator.clock.monotonic_ms()
        if shard in shards.held and not shards.serves(group_id, now_ms):
            # Held but not served now: loading, or its lease not trusted (as ShardTable.fence).
            raise CoordinatorNotAvailable(
                f"This replica cannot answer for group {group_id} right now (its shard {shard} "
                "is loading or its lease could not be renewed in time); retry."
            )
        shards.check_view(now_ms)
        owner = shards.owners.get(shard)
        if shard not in shards.held and owner is not None and owner[0] != shards.replica_id:
            replica, address = owner
            return {
                "error": "NOT_COORDINATOR",
                "message": f"Group {group_id} is coordinated by replica {replica} ({address}): "
                "open the web view of that replica.",
                "coordinatorReplica": replica,
                "coordinatorAddress": address,
            }
        return {"error": "GROUP_ID_NOT_FOUND", "message": f"This replica serves no group {group_id}."}


def _settle(done: concurrent.futures.Future[Any], task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        done.cancel()
    elif task.exception() is not None:
        done.set_exception(task.exception())
    else:
        done.set_result(task.result())


def _json(message: Any) -> dict[str, Any]:
    # Every field, also those at their defaults (an epoch 0, an empty drain state), so
    # that the page reads one shape; names as DescribeGroups' JSON (grpcurl) has them.
    out: dict[str, Any] = MessageToDict(message, always_print_fields_with_no_presence=True)
    return out


class HttpApp:
    """The WSGI app of the metrics port: /metrics, and the web view once it is served."""

    def __init__(self, metrics: WsgiApp) -> None:
        self.metrics = metrics
        #: The page's files, set by `serve_view` (None: the view is not served).
        self.files: Mapping[str, bytes] | None = None
        self.reader: GroupReader | None = None

    def serve_view(self, reader: GroupReader, files: Mapping[str, bytes] | None = None) -> None:
        self.files = load_files() if files is None else files
        self.reader = reader

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response = _named(start_response)
        raw = environ.get("RAW_URI") or environ.get("PATH_INFO", "/")
        path = urllib.parse.urlsplit(raw).path or "/"
        if path == "/metrics" or self.files is None:
            return self.metrics(environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            status, headers, body = _answer_json("405 Method Not Allowed", {"error": "read-only"})
            headers.append(("Allow", "GET, HEAD"))
        else:
            status, headers, body = self._get(path, environ.get("QUERY_STRING", ""))
        start_response(status, headers + SECURITY_HEADERS)
        return [b"" if method == "HEAD" else body]

    def _get(self, path: str, query: str) -> tuple[str, list[tuple[str, str]], bytes]:
        files = self.files
        assert files is not None
        if path in STATIC_FILES:
            content_type = STATIC_FILES[path][1]
            return "200 OK", [("Content-Type", content_type), ("Cache-Control", "no-cache")], files[path]
        if path != "/api/groups" and not path.startswith("/api/groups/"):
            return _answer_json("404 Not Found", {"error": "NOT_FOUND", "message": f"No page at {path}."})
        reader = self.reader
        if reader is None:
            return _answer_json("503 Service Unavailable", {"error": "STARTING"})
        # Segments are split before they are decoded: a group id may hold "/" (%2F).
        parts = [urllib.parse.unquote(p) for p in path.split("/")[3:]]
        try:
            if not parts:
                return _answer_json("200 OK", reader.groups())
            if len(parts) == 1 and parts[0]:
                return _answer_json("200 OK", reader.group(parts[0]))
            if len(parts) == 2 and parts[0] and parts[1] == "events":
                return _answer_json("200 OK", reader.events(parts[0], _limit(query)))
        except NotFound as e:
            return _answer_json("404 Not Found", e.body)
        except (ValueError, InvalidRequest) as e:
            return _answer_json("400 Bad Request", {"error": "INVALID_REQUEST", "message": str(e)})
        except ApiError as e:
            # The store is away (history is read from it): as ListGroupEvents, retry later.
            return _answer_json("503 Service Unavailable", {"error": e.code.name, "message": e.message})
        except (TimeoutError, RuntimeError):
            # The loop is busy past the timeout, or stopped (the server is stopping).
            return _answer_json("503 Service Unavailable", {"error": "UNAVAILABLE"})
        except Exception:
            # A bug: logged as the server's other errors are (wsgiref would print it to stderr).
            log.exception("web_view_failed", path=path)
            return _answer_json("500 Internal Server Error", {"error": "INTERNAL"})
        return _answer_json("404 Not Found", {"error": "NOT_FOUND", "message": f"No page at {path}."})


def _named(start_response: Callable[..., Any]) -> Callable[..., Any]:
    """`start_response` with SERVER_NAME as the Server header, which wsgiref then does not
    add (its own names the Python version)."""

    def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
        named = [(k, v) for k, v in headers if k.lower() != "server"]
        return start_response(status, [*named, ("Server", SERVER_NAME)], *exc_info)

    return start


def _limit(query: str) -> int:
    values = urllib.parse.parse_qs(query).get("limit")
    if not values:
        return DEFAULT_EVENTS
    try:
        limit = int(values[0])
    except ValueError:
        raise ValueError(f"limit must be an integer, got {values[0]!r}.") from None
    if not 1 <= limit <= MAX_EVENTS:
        raise ValueError(f"limit must be between 1 and {MAX_EVENTS}, got {limit}.")
    return limit


def _answer_json(status: str, body: Mapping[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    data = json.dumps(body, separators=(",", ":")).encode()
    return status, [("Content-Type", "application/json"), ("Cache-Control", "no-store")], data


class _Handler(WSGIRequestHandler):
    """Logs nothing (a request per second per open page), and hands the app the path as
    sent (RAW_URI, as gunicorn names it): wsgiref's PATH_INFO has %2F decoded already.
    Its own answers (a malformed request) name the server as the app's do."""

    server_version = SERVER_NAME

    def version_string(self) -> str:
        return SERVER_NAME

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        environ["RAW_URI"] = self.path
        return environ

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    # A thread per request, as prometheus_client's server; daemon threads, so that one
    # stuck client never holds the process at exit.
    daemon_threads = True


def serve(listen: str, app: WsgiApp) -> tuple[WSGIServer, threading.Thread]:
    """Serves `app` on `listen` (host:port; an empty host is every interface) from a daemon thread."""
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    port = int(port_text)
    # The address family of the host (an IPv6 address needs AF_INET6), as prometheus_client picks it.
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(_ThreadingServer):
        address_family = family

    httpd = make_server(str(sockaddr[0]), port, app, Server, handler_class=_Handler)
    thread = threading.Thread(target=httpd.serve_forever, name="regroup-http", daemon=True)
    thread.start()
    return httpd, thread
