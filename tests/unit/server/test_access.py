"""Access control without the network: the ACL and tokens files (formats, errors that
name the file and entry, reload), the principal of a call, and a rule for every RPC."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from regroup.reconciler.errors import ClusterAuthorizationFailed
from regroup.server import access
from regroup.server.access import RULES, Access, Unauthenticated
from regroup.server.aclfile import AccessFileError, WatchedFile, load_acl, load_tokens
from regroup.server.config import ConfigError, load_settings
from regroup.v1 import admin_pb2, coordinator_pb2

ALICE = {
    "principal": "User:alice",
    "operation": "member",
    "resource_type": "group",
    "pattern_type": "prefixed",
    "name": "orders-",
}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_every_rpc_of_both_services_has_an_authorization_rule() -> None:
    rpcs = {
        (service.full_name, method.name)
        for module, name in ((coordinator_pb2, "GroupCoordinator"), (admin_pb2, "GroupAdmin"))
        for service in [module.DESCRIPTOR.services_by_name[name]]
        for method in service.methods
    }
    assert rpcs == set(RULES)


def test_acl_files_in_json_and_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "acl.json"
    as_json.write_text(json.dumps({"acls": [ALICE]}))
    as_yaml = tmp_path / "acl.yaml"
    as_yaml.write_text(
        "acls:\n  - {principal: 'User:alice', operation: member, resource_type: group,"
        " pattern_type: prefixed, name: orders-}\n"
    )
    bare_list = tmp_path / "list.yml"
    bare_list.write_text(json.dumps([ALICE]))  # YAML reads JSON too
    for path in (as_json, as_yaml, bare_list):
        authorizer = load_acl(path)
        assert authorizer.allows("User:alice", "member", "group", "orders-1"), path
        assert not authorizer.allows("User:alice", "member", "group", "other"), path
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert len(load_acl(empty)) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"REGROUP_ACL_FILE \(.*acl.json\) does not parse"),
        (json.dumps({"entries": []}), "must hold a list of entries, or one under 'acls'"),
        (json.dumps([ALICE, "x"]), r"entry 2 .*must be a mapping"),
        (json.dumps([{**ALICE, "operation": "write"}]), r"entry 1 .*operation must be one of"),
        (json.dumps([{k: v for k, v in ALICE.items() if k != "name"}]), r"entry 1 .*missing name"),
        (json.dumps([{**ALICE, "host": "*"}]), r"entry 1 .*unknown host"),
        (json.dumps([{**ALICE, "resource_type": "topic"}]), r"'member' does not apply to a topic"),
    ],
)
def test_bad_acl_files_name_the_file_and_the_entry(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "acl.json"
    path.write_text(content)
    with pytest.raises(AccessFileError, match=message):
        load_acl(path)
    # At start: a configuration error.
    with pytest.raises(ConfigError, match=message):
        load_settings({"REGROUP_ACL_FILE": str(path)})


def test_a_missing_acl_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"REGROUP_ACL_FILE \(.*missing.json\) does not exist"):
        load_settings({"REGROUP_ACL_FILE": str(tmp_path / "missing.json")})


def test_tokens_are_stored_hashed_and_compared_to_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(
        f"tokens:\n  - {{principal: 'User:alice', sha256: '{sha('s3cret')}'}}\n"
        f"  - {{principal: 'User:bob', sha256: '{sha('other').upper()}'}}\n"
    )
    tokens = load_tokens(path)
    assert tokens.principal("s3cret") == "User:alice"
    assert tokens.principal("other") == "User:bob"
    assert tokens.principal("S3cret") is None
    path.write_text(json.dumps([{"principal": "User:alice", "sha256": "s3cret"}]))
    with pytest.raises(AccessFileError, match="sha256 must be 64 hex digits") as refused:
        load_tokens(path)
    assert "s3cret" not in str(refused.value)  # a token pasted by mistake is not echoed


def test_a_changed_file_is_taken_and_a_broken_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps([ALICE]))
    now = [0.0]
    watched = WatchedFile("REGROUP_ACL_FILE", path, load_acl, clock=lambda: now[0])
    first = watched.current
    path.write_text(json.dumps([ALICE, {**ALICE, "principal": "User:bob"}]))
    assert watched.current is first  # not looked at again within the second
    now[0] += 1.0
    assert len(watched.current) == 2 and watched.reloads == 1
    staged = tmp_path / "acl.new"
    staged.write_text("[{broken")
    os.replace(staged, path)
    now[0] += 1.0
    assert len(watched.current) == 2 and watched.refused == 1  # the old one kept
    now[0] += 1.0
    assert watched.refused == 1  # not tried again until the file changes
    path.write_text(json.dumps([]))
    now[0] += 1.0
    assert len(watched.current) == 0 and watched.reloads == 2


class Context:
    """The parts of a grpc.aio ServicerContext the access checks read."""

    def __init__(self, metadata: dict[str, str], certificate: dict[str, list[bytes]] | None = None) -> None:
        self._metadata = tuple(metadata.items())
        self._auth = certificate or {}

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, Any]:
        return self._auth


def gate(tmp_path: Path, acl: list[dict[str, str]]) -> Access:
    acl_path, tokens_path = tmp_path / "acl.json", tmp_path / "tokens.json"
    acl_path.write_text(json.dumps(acl))
    tokens_path.write_text(json.dumps([{"principal": "User:alice", "sha256": sha("s3cret")}]))
    return Access.from_files(acl_path, tokens_path)


def test_the_principal_of_a_call(tmp_path: Path) -> None:
    replica = {**ALICE, "principal": "User:replica", "operation": "forward", "resource_type": "cluster"}
    checks = gate(tmp_path, [{**replica, "pattern_type": "literal", "name": "regroup-cluster"}])
    assert checks.caller(Context({})).principal == "User:ANONYMOUS"
    assert checks.caller(Context({"authorization": "Bearer s3cret"})).principal == "User:alice"
    with pytest.raises(Unauthenticated, match="Unknown bearer token"):
        checks.caller(Context({"authorization": "Bearer nope"}))
    with pytest.raises(Unauthenticated, match="must be 'Bearer <token>'"):
        checks.caller(Context({"authorization": "Basic abc"}))
    # The certificate: its first subject alternative name, else its common name.
    assert checks.caller(Context({}, {"x509_common_name": [b"bob"]})).principal == "User:bob"
    both = {"x509_subject_alternative_name": [b"carol", b"x"], "x509_common_name": [b"bob"]}
    assert checks.caller(Context({}, both)).principal == "User:carol"
    # A forwarded principal is believed from a replica granted `forward`, from no one else.
    forwarded = {access.PRINCIPAL: "User:dave"}
    from_replica = Context(forwarded, {"x509_common_name": [b"replica"]})
    assert checks.caller(from_replica).principal == "User:dave"
    for caller in (Context(forwarded, {"x509_common_name": [b"bob"]}), Context(forwarded)):
        with pytest.raises(ClusterAuthorizationFailed, match="not granted forward on the cluster"):
            checks.caller(caller)


def test_without_files_calls_are_not_even_authenticated() -> None:
    assert not Access().enabled
    assert access.allowed("admin", "group", "anything")  # no caller set: all allowed


def test_an_open_server_beyond_loopback_says_so_once_at_start(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    from regroup.server.app import warn_if_open
    from regroup.server.config import Settings

    with capture_logs() as logs:
        warn_if_open(Settings(listen="127.0.0.1:50051"), Access())
        warn_if_open(Settings(listen="0.0.0.0:50051"), gate(tmp_path, []))
        warn_if_open(Settings(listen="0.0.0.0:50051"), Access())
    assert [e["event"] for e in logs] == ["access_control_off"]


@pytest.mark.parametrize(
    ("operation", "resource_type", "sentence"),
    [
        ("member", "group", "User:x may not be a member of group 'g1'."),
        ("describe", "group", "User:x may not describe group 'g1'."),
        ("admin", "group", "User:x may not administer group 'g1'."),
        ("describe", "topic", "User:x may not describe topic 'g1'."),
        ("admin", "topic", "User:x may not administer topic 'g1'."),
        ("forward", "cluster", "User:x may not forward calls to cluster 'g1'."),
    ],
)
def test_a_refusal_is_a_sentence_and_an_audit_line(operation: Any, resource_type: Any, sentence: str) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        error = access.refusal(resource_type, "g1", operation, "User:x")
        quiet = access.refusal(resource_type, "g1", operation, "User:x", audit=False)
    assert error.message == quiet.message == sentence
    assert logs == [
        {
            "event": "access_refused",
            "log_level": "info",
            "principal": "User:x",
            "operation": operation,
            "resource_type": resource_type,
            "resource_name": "g1",
        }
    ]


def test_credentials_refused_are_logged_without_the_credential(tmp_path: Path) -> None:
    """An unknown token, and a claim to forward for someone from a caller not granted
    `forward`, leave a line each; the token is in neither."""
    from structlog.testing import capture_logs

    checks = gate(tmp_path, [])
    with capture_logs() as logs:
        with pytest.raises(Unauthenticated):
            checks.caller(Context({"authorization": "Bearer guessed-7c1d"}))
        with pytest.raises(ClusterAuthorizationFailed):
            checks.caller(Context({access.PRINCIPAL: "User:dave"}, {"x509_common_name": [b"bob"]}))
    assert [e["event"] for e in logs] == ["access_unauthenticated", "access_refused"]
    assert (logs[1]["principal"], logs[1]["operation"], logs[1]["resource_type"]) == (
        "User:bob",
        "forward",
        "cluster",
    )
    assert logs[1]["forwarded_for"] == "User:dave"
    assert "guessed-7c1d" not in repr(logs)


async def test_the_watch_takes_a_change_that_no_call_reads(tmp_path: Path) -> None:
    import asyncio
    import contextlib
    import time

    checks = gate(tmp_path, [])
    assert checks.acl is not None and checks.tokens is not None
    watch = asyncio.create_task(checks.watch(interval_s=0.01))
    try:
        (tmp_path / "acl.json").write_text(json.dumps([ALICE]))
        (tmp_path / "tokens.json").write_text("[]")
        deadline = time.monotonic() + 10
        while (checks.acl.reloads, checks.tokens.reloads) != (1, 1):
            assert time.monotonic() < deadline, "the watch never took the changes"
            await asyncio.sleep(0.01)
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    assert len(checks.acl.current) == 1
