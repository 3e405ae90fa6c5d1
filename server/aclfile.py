"""The ACL and token files (REGROUP_ACL_FILE, REGROUP_TOKENS_FILE): read, checked, and
re-read when they change.

Both are JSON, or YAML (PyYAML is a runtime dependency: operators keep these files in
ConfigMaps and Secrets, which are mostly written in YAML). A name ending in `.json` is
read as JSON; any other as YAML, which also reads JSON. Either holds a list of
entries, or a mapping with the list under `acls` (ACL file) or `tokens` (tokens file):

    acls:
      - {principal: "User:alice", operation: member, resource_type: group,
         pattern_type: prefixed, name: "orders-"}
    tokens:
      - {principal: "User:alice", sha256: "<hex of sha256(token)>"}

The tokens file holds hashes only: a leaked copy does not give the tokens away.

`WatchedFile` stats its path at most once a `check_interval_s` (as server/tls.py
does for certificates) and re-reads it when what the path leads to changed; a
new content that does not load is refused with a warning, and the one in use kept.
It looks when a call reads the content, and when `Access.watch` (a task of the
server) looks every interval, so that a change is taken, and logged, within the
interval even while no call comes: the operator who edits the file sees at once
whether it was taken or refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog
import yaml

from .authz import AclEntry, AclError, Authorizer
from .filewatch import file_signature

log = structlog.get_logger("regroup")

ACL_FILE = "REGROUP_ACL_FILE"
TOKENS_FILE = "REGROUP_TOKENS_FILE"
DEFAULT_CHECK_INTERVAL_S = 1.0

ACL_FIELDS = ("principal", "operation", "resource_type", "pattern_type", "name")
TOKEN_FIELDS = ("principal", "sha256")

T = TypeVar("T")


class AccessFileError(ValueError):
    """An ACL or tokens file that does not load; the message names the setting, the
    file and the entry."""


def _entries(setting: str, path: Path, key: str) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AccessFileError(f"{setting} ({path}) does not exist.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AccessFileError(f"{setting} ({path}) cannot be read: {e}.") from None
    try:
        document = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise AccessFileError(f"{setting} ({path}) does not parse: {e}") from None
    if isinstance(document, dict) and set(document) == {key}:
        document = document[key]
    if document is None:
        return []  # an empty file: no entries
    if not isinstance(document, list):
        raise AccessFileError(f"{setting} ({path}) must hold a list of entries, or one under '{key}'.")
    return document


def _fields(setting: str, path: Path, index: int, entry: Any, names: Sequence[str]) -> dict[str, str]:
    where = f"{setting} ({path}), entry {index + 1} ({json.dumps(entry, default=str)[:200]})"
    if not isinstance(entry, dict):
        raise AccessFileError(f"{where}: must be a mapping with {', '.join(names)}.")
    missing = [n for n in names if n not in entry]
    unknown = sorted(str(k) for k in entry if k not in names)
    if missing or unknown:
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        raise AccessFileError(f"{where}: {'; '.join(problems)}.")
    bad = [n for n in names if not isinstance(entry[n], str)]
    if bad:
        raise AccessFileError(f"{where}: {', '.join(bad)} must be strings.")
    return {n: entry[n] for n in names}


def load_acl(path: Path) -> Authorizer:
    """The authorizer for the entries in `path`; AccessFileError names what is wrong."""
    acl: list[AclEntry] = []
    for i, raw in enumerate(_entries(ACL_FILE, path, "acls")):
        fields = _fields(ACL_FILE, path, i, raw, ACL_FIELDS)
        try:
            acl.append(AclEntry(**fields))  # type: ignore[arg-type]
        except AclError as e:
            raise AccessFileError(
                f"{ACL_FILE} ({path}), entry {i + 1} ({json.dumps(raw)[:200]}): {e}."
            ) from None
    return Authorizer(acl)


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True, slots=True)
class Tokens:
    """(sha256 of a token, its principal) pairs."""

    entries: tuple[tuple[bytes, str], ...]

    def principal(self, token: str) -> str | None:
        """The principal of `token`, or None. Every stored hash is compared, in constant
        time, so the time taken says nothing about which one (nearly) matched."""
        digest = token_hash(token)
        found: str | None = None
        for stored, principal in self.entries:
            if hmac.compare_digest(digest, stored) and found is None:
                found = principal
        return found


def load_tokens(path: Path) -> Tokens:
    entries: list[tuple[bytes, str]] = []
    for i, raw in enumerate(_entries(TOKENS_FILE, path, "tokens")):
        fields = _fields(TOKENS_FILE, path, i, raw, TOKEN_FIELDS)
        where = f"{TOKENS_FILE} ({path}), entry {i + 1} (principal {fields['principal']!r})"
        kind, sep, who = fields["principal"].partition(":")
        if not (kind and sep and who):
            raise AccessFileError(f"{where}: principal must be Type:name (for example User:alice).")
        try:
            digest = bytes.fromhex(fields["sha256"])
        except ValueError:
            digest = b""
        if len(digest) != hashlib.sha256().digest_size:
            # Not quoted: a token pasted here by mistake must not reach the logs.
            raise AccessFileError(f"{where}: sha256 must be 64 hex digits (the SHA-256 of the token).")
        entries.append((digest, fields["principal"]))
    return Tokens(tuple(entries))


class WatchedFile(Generic[T]):
    """`load(path)` at construction (raising AccessFileError), then again whenever the
    path leads to a changed file, looked at no more than once a `check_interval_s`."""

    def __init__(
        self,
        setting: str,
        path: Path,
        load: Callable[[Path], T],
        *,
        clock: Callable[[], float] = time.monotonic,
        check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
    ) -> None:
        self.setting = setting
        self.path = path
        self._load = load
        self._clock = clock
        self._interval_s = check_interval_s
        seen = file_signature(path)
        self._current = load(path)
        self._seen = seen
        self._checked_at = clock()
        #: Changes taken, and changes refused because they did not load.
        self.reloads = 0
        self.refused = 0

    @property
    def current(self) -> T:
        """The content in use, after a look at the file if one is due."""
        now = self._clock()
        if now - self._checked_at >= self._interval_s:
            self._checked_at = now
            self._check()
        return self._current

    def check(self) -> None:
        """Looks at the file now, and takes (or refuses) a change."""
        self._checked_at = self._clock()
        self._check()

    def _check(self) -> None:
        seen = file_signature(self.path)
        if seen == self._seen:
            return
        self._seen = seen  # a refused content is not tried again until the file changes
        try:
            self._current = self._load(self.path)
        except AccessFileError as e:
            self.refused += 1
            log.warning("access_file_refused", setting=self.setting, path=str(self.path), error=str(e))
            return
        self.reloads += 1
        log.info("access_file_reloaded", setting=self.setting, path=str(self.path))
