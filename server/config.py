"""Service configuration, from the environment and command-line flags (flags win)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from regroup.reconciler import GroupConfig
from regroup.reconciler.assignors import BUILTIN_ASSIGNORS

from .aclfile import ACL_FILE, TOKENS_FILE, AccessFileError, load_acl, load_tokens
from .leases import min_margin_ms
from .tls import CertificateError, TlsPaths, load

DEFAULT_LISTEN = "127.0.0.1:50051"
#: Where Prometheus scrapes the metrics (0.0.0.0:9464 in the container image).
DEFAULT_METRICS_LISTEN = "127.0.0.1:9464"
DEFAULT_DATA_DIR = ".regroup"
DEFAULT_LEASE_MS = 10_000


class ConfigError(ValueError):
    """A setting is missing or out of range; the message names it."""


#: The part of the stop bound beyond the drain and the store: the telemetry flush
#: (app.TELEMETRY_FLUSH_S) and the embedded Postgres' stop (embedded.STOP_WAIT_S).
STOP_SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = DEFAULT_LISTEN
    #: Postgres DSN; None runs an embedded Postgres under `data_dir`.
    database_url: str | None = None
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_group_size: int | None = None
    assignors: tuple[str, ...] = ("uniform", "range", "leader")
    #: At most one target computation per group per interval (Kafka 4.3's default).
    assignment_interval_ms: int = 1_000
    #: Larger groups get their target computed by the assignment timer, in a worker process.
    inline_assignment_max_partitions: int = 10_000
    max_message_bytes: int = 4 * 1024 * 1024
    #: Offsets of an empty group expire this long after their commit; 0 keeps them.
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_ms: int = 600_000
    shutdown_grace_s: float = 5.0
    #: Calls requested from gRPC core at once per method (1 is grpc.aio's own single pipeline).
    accept_depth: int = 8
    #: How often the store is pinged; readiness turns NOT_SERVING while it does not answer.
    store_check_ms: int = 1_000
    #: Connecting to Postgres and each statement give up after this long.
    store_timeout_ms: int = 10_000
    log_level: str = "info"
    #: This replica's name in the shard leases (default: a new one per process).
    replica_id: str = ""
    migrations_dir: Path | None = None
    #: Groups are spread over this many shards (fixed when the database is first used).
    shards: int = 64
    #: How long a shard's lease lasts without renewal, and how often it is renewed.
    lease_ms: int = DEFAULT_LEASE_MS
    lease_renew_ms: int = DEFAULT_LEASE_MS * 3 // 10
    #: host:port other replicas and clients reach this one at (default: the listen
    #: address, with this host's name when it listens on every interface).
    advertised_address: str = ""
    #: Calls for a group another replica owns are forwarded there (else NOT_COORDINATOR).
    forward: bool = True
    #: host:port of the Prometheus metrics endpoint, or "off". The web view is served there too.
    metrics_listen: str = DEFAULT_METRICS_LISTEN
    #: The read-only web view on the metrics port (server/webview.py): True or False as
    #: REGROUP_WEB_VIEW says; None (unset) serves it only without an ACL, because the view
    #: shows every group to anyone who reaches the port, whatever the ACL grants them.
    web_view: bool | None = None
    #: host:port of a plain-text port serving only the gRPC health service, or "off": for
    #: probes that cannot speak TLS (Kubernetes' gRPC probes) when the server does.
    health_listen: str = "off"
    #: TLS: the server's certificate (chain) and key, PEM files re-read when they change;
    #: neither means plain text.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: mTLS: clients must present a certificate signed by this CA (PEM).
    tls_client_ca: Path | None = None
    #: The CA that signed the other replicas' certificates, for forwarding (default:
    #: the client CA if set, else the system's roots).
    tls_ca: Path | None = None
    #: Access control (server/access.py): the ACL (None: everything is allowed) and the
    #: bearer tokens' hashes, JSON or YAML files re-read when they change.
    acl_file: Path | None = None
    tokens_file: Path | None = None
    #: Member streams (GroupCoordinator.MemberStream): the most heartbeats one message may
    #: carry, the most members one stream may carry, and the most answers that may wait for
    #: a client to read them before its stream is closed (RESOURCE_EXHAUSTED).
    stream_max_batch: int = 1_000
    stream_max_members: int = 10_000
    stream_max_pending: int = 20_000
    #: Group history (GroupAdmin.ListGroupEvents): each group keeps its newest this many
    #: events (0: no history is kept), none older than history_max_age_ms (0: no age limit).
    history_max_events: int = 10_000
    history_max_age_ms: int = 7 * 24 * 3600 * 1000

    def check_access_files(self) -> None:
        """ConfigError naming the file and the entry when the ACL or tokens file does not load."""
        try:
            if self.acl_file is not None:
                load_acl(self.acl_file)
            if self.tokens_file is not None:
                load_tokens(self.tokens_file)
        except AccessFileError as e:
            raise ConfigError(str(e)) from None

    def stop_bound_s(self) -> float:
        """How long a stop (SIGTERM, SIGINT) may take, at most: the drain of in-flight calls,
        two store operations (the lease round that hands the shards over, the pool's
        close), and STOP_SLACK_S for the last metrics and spans and the embedded Postgres.
        The chart's terminationGracePeriodSeconds is this bound (docs/operations.md)."""
        return self.shutdown_grace_s + 2 * self.store_timeout_ms / 1000 + STOP_SLACK_S

    def web_view_served(self) -> bool:
        """Whether the metrics port serves the web view: as REGROUP_WEB_VIEW says, else only
        without an ACL (the view has no principal to check, so with an ACL it would show
        groups their ACL hides from some callers)."""
        if self.metrics_listen == "off":
            return False
        return self.web_view if self.web_view is not None else self.acl_file is None

    def tls_paths(self) -> TlsPaths | None:
        """The TLS files, or None when the server speaks plain text (ConfigError when
        they do not go together)."""
        return tls_paths(self.tls_cert, self.tls_key, self.tls_client_ca, self.tls_ca)

    def group_config(self) -> GroupConfig:
        return GroupConfig(
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            max_group_size=self.max_group_size,
            assignment_interval_ms=self.assignment_interval_ms,
            inline_assignment_max_partitions=self.inline_assignment_max_partitions,
            offsets_retention_ms=self.offsets_retention_ms,
            offsets_retention_check_ms=self.offsets_retention_check_ms,
            assignors={name: BUILTIN_ASSIGNORS[name] for name in self.assignors},
        )


@dataclass(frozen=True, slots=True)
class Option:
    """A setting as `--help` shows it: its environment variable, what it does, and its
    default in words when the Settings default alone would not say (None: that default)."""

    env: str
    help: str
    default: str | None = None


#: Every setting, by Settings field: its flag is --<field with dashes>.
OPTIONS: dict[str, Option] = {
    "listen": Option("REGROUP_LISTEN", "host:port the gRPC API listens on; 0.0.0.0:50051 in the image"),
    "database_url": Option("DATABASE_URL", "Postgres DSN", "unset: an embedded Postgres under --data-dir"),
    "data_dir": Option("REGROUP_DATA_DIR", "where the embedded Postgres keeps its data"),
    "session_timeout_ms": Option("REGROUP_SESSION_TIMEOUT_MS", "a member silent for this long is removed"),
    "heartbeat_interval_ms": Option(
        "REGROUP_HEARTBEAT_INTERVAL_MS", "heartbeat interval given to members; below the session timeout"
    ),
    "max_group_size": Option(
        "REGROUP_MAX_GROUP_SIZE",
        "most members a group may have; more get GROUP_MAX_SIZE_REACHED",
        "unbounded",
    ),
    "assignors": Option(
        "REGROUP_ASSIGNORS", "server assignors offered, comma-separated; the first is the default"
    ),
    "assignment_interval_ms": Option(
        "REGROUP_ASSIGNMENT_INTERVAL_MS",
        "at most one target computation per group per interval; 0 on every change",
    ),
    "inline_assignment_max_partitions": Option(
        "REGROUP_INLINE_ASSIGNMENT_MAX_PARTITIONS",
        "groups over more partitions get their target computed in a worker process",
    ),
    "max_message_bytes": Option("REGROUP_MAX_MESSAGE_BYTES", "largest request or response accepted"),
    "offsets_retention_ms": Option(
        "REGROUP_OFFSETS_RETENTION_MS",
        "an empty group's offsets expire this long after their commit; 0 keeps them",
    ),
    "offsets_retention_check_ms": Option(
        "REGROUP_OFFSETS_RETENTION_CHECK_MS", "how often expired offsets are looked for"
    ),
    "shutdown_grace_s": Option(
        "REGROUP_SHUTDOWN_GRACE_S", "seconds in-flight calls may take to finish on SIGTERM"
    ),
    "accept_depth": Option(
        "REGROUP_ACCEPT_DEPTH", "calls requested from gRPC core at once per method; 1 is grpc.aio's own"
    ),
    "store_check_ms": Option(
        "REGROUP_STORE_CHECK_MS", "how often Postgres is pinged; readiness is NOT_SERVING while it fails"
    ),
    "store_timeout_ms": Option(
        "REGROUP_STORE_TIMEOUT_MS", "connecting to Postgres and each statement give up after this long"
    ),
    "log_level": Option("REGROUP_LOG_LEVEL", "debug, info, warning or error; JSON lines on stdout"),
    "replica_id": Option(
        "REGROUP_REPLICA_ID", "this replica's name in the shard leases", "a new one per process"
    ),
    "migrations_dir": Option(
        "REGROUP_MIGRATIONS_DIR",
        "a folder of NNNN_description.sql migrations to apply instead of regroup's own",
        "the migrations inside the installed package",
    ),
    "shards": Option(
        "REGROUP_SHARDS", "groups are spread over this many shards; fixed when the database is first used"
    ),
    "lease_ms": Option(
        "REGROUP_LEASE_MS",
        "a shard's lease lasts this long without renewal: a killed replica's groups wait as long",
    ),
    "lease_renew_ms": Option(
        "REGROUP_LEASE_RENEW_MS", "how often a replica renews its leases", "3/10 of --lease-ms"
    ),
    "advertised_address": Option(
        "REGROUP_ADVERTISED_ADDRESS",
        "host:port where other replicas and clients reach this replica",
        "the listen address, with this host's name when it listens on every interface",
    ),
    "forward": Option(
        "REGROUP_FORWARD", "forward calls for another replica's groups to it; false answers NOT_COORDINATOR"
    ),
    "metrics_listen": Option(
        "REGROUP_METRICS_LISTEN",
        "host:port of the Prometheus /metrics endpoint and the web view, or off; "
        "REGROUP_HTTP_LISTEN is another name for it",
    ),
    "web_view": Option(
        "REGROUP_WEB_VIEW",
        "serve the read-only web view on the metrics port: on or off",
        "on without --acl-file, off with it; off in the image",
    ),
    "health_listen": Option(
        "REGROUP_HEALTH_LISTEN", "host:port of a plain-text port serving only the gRPC health service, or off"
    ),
    "tls_cert": Option(
        "REGROUP_TLS_CERT",
        "PEM certificate and chain the server presents; with --tls-key, TLS only",
        "unset: plain text",
    ),
    "tls_key": Option("REGROUP_TLS_KEY", "PEM private key of --tls-cert", "unset"),
    "tls_client_ca": Option(
        "REGROUP_TLS_CLIENT_CA",
        "mTLS: clients must present a certificate signed by one of these PEM CA certificates",
        "unset",
    ),
    "tls_ca": Option(
        "REGROUP_TLS_CA",
        "PEM CA certificates that verify the other replicas' certificates when forwarding",
        "the client CA, else the system's roots",
    ),
    "acl_file": Option(
        ACL_FILE, "JSON or YAML ACL: who may do what on which groups and topics", "unset: all allowed"
    ),
    "tokens_file": Option(
        TOKENS_FILE, "JSON or YAML list of bearer tokens' SHA-256 hashes and principals", "unset"
    ),
    "stream_max_batch": Option(
        "REGROUP_STREAM_MAX_BATCH", "most heartbeats one MemberStream message may carry"
    ),
    "stream_max_members": Option("REGROUP_STREAM_MAX_MEMBERS", "most members one MemberStream may carry"),
    "stream_max_pending": Option(
        "REGROUP_STREAM_MAX_PENDING", "most answers that may wait for a stream's client before it is closed"
    ),
    "history_max_events": Option(
        "REGROUP_HISTORY_MAX_EVENTS", "each group keeps its newest this many history events; 0 keeps none"
    ),
    "history_max_age_ms": Option(
        "REGROUP_HISTORY_MAX_AGE_MS", "history events older than this are deleted; 0 keeps them"
    ),
}

_ENV = {field: option.env for field, option in OPTIONS.items()}


#: The most shards a database may be split into.
MAX_SHARDS = 4096
#: The longest lease (a day): a killed replica's groups wait up to this long.
MAX_LEASE_MS = 86_400_000


def flag(field: str) -> str:
    return f"--{field.replace('_', '-')}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Settings()
    for field, option in OPTIONS.items():
        default = option.default if option.default is not None else _shown(getattr(defaults, field))
        text = f"{option.help} (env {option.env}, default: {default})"
        # %-escaped: argparse formats help strings with the action's attributes.
        parser.add_argument(flag(field), dest=field, default=None, help=text.replace("%", "%%"))


def _shown(value: object) -> str:
    """A default as it would be written in the variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def flag_environment(args: argparse.Namespace) -> dict[str, str]:
    """The flags given on the command line, as the environment variables they stand for
    (so that processes started with that environment read the same settings)."""
    given = {env: getattr(args, field, None) for field, env in _ENV.items()}
    return {env: str(value) for env, value in given.items() if value is not None}


def load_settings(env: Mapping[str, str], args: argparse.Namespace | None = None) -> Settings:
    """The settings from the flags in `args`, else `env`. A ConfigError names each setting
    as the user gave it: --lease-ms when it came from the flag, REGROUP_LEASE_MS otherwise."""
    raw: dict[str, str] = {}
    for field, name in _ENV.items():
        value = getattr(args, field, None) if args is not None else None
        if value is None:
            value = env.get(name)
        if value not in (None, ""):
            raw[field] = str(value)
    try:
        _alias(raw, env, "metrics_listen", HTTP_LISTEN_ALIAS)
        return _parse(raw)
    except ConfigError as e:
        raise ConfigError(named_as_given(str(e), env, args)) from None


def named_as_given(message: str, env: Mapping[str, str], args: argparse.Namespace | None) -> str:
    """`message`, which names settings by their variables, with each named as the user set
    it: the flag when it came from one, REGROUP_HTTP_LISTEN when that alias set the metrics
    port (for errors found after the settings were read too: a port in use at start)."""
    given: dict[str, str] = {}  # variable -> the flag or other variable that set it
    for field, name in _ENV.items():
        if args is not None and getattr(args, field, None) is not None:
            given[name] = flag(field)
    metrics = _ENV["metrics_listen"]
    if metrics not in given and env.get(metrics) in (None, "") and env.get(HTTP_LISTEN_ALIAS):
        given[metrics] = HTTP_LISTEN_ALIAS
    return _as_given(message, given)


def _as_given(message: str, given: Mapping[str, str]) -> str:
    """`message` with each variable renamed to what the user set it by. Messages, here and
    in aclfile.py and tls.py, name settings by their variables; only whole names are
    replaced (REGROUP_TLS_CA is not a part of REGROUP_TLS_CLIENT_CA)."""
    renamed = {env: name for env, name in given.items() if env != name}
    if not renamed:
        return message
    names = sorted(renamed, key=len, reverse=True)
    pattern = re.compile(r"(?<![A-Z0-9_])(" + "|".join(map(re.escape, names)) + r")(?![A-Z0-9_])")
    return pattern.sub(lambda m: renamed[m[1]], message)


#: The metrics port also serves the web view: REGROUP_HTTP_LISTEN names it too.
HTTP_LISTEN_ALIAS = "REGROUP_HTTP_LISTEN"


def _alias(raw: dict[str, str], env: Mapping[str, str], field: str, alias: str) -> bool:
    """Takes `field` from `alias` when only the alias is set (True then); both set
    differently is an error."""
    value = env.get(alias)
    if not value:
        return False
    if field in raw:
        if raw[field] != value:
            raise ConfigError(f"{alias} ({value!r}) and {_ENV[field]} ({raw[field]!r}) name different ports.")
        return False
    raw[field] = value
    return True


def _int(raw: Mapping[str, str], field: str, default: int, minimum: int) -> int:
    if field not in raw:
        return default
    try:
        value = int(raw[field])
    except ValueError:
        raise ConfigError(f"{_ENV[field]} must be an integer, got {raw[field]!r}.") from None
    if value < minimum:
        raise ConfigError(f"{_ENV[field]} must be at least {minimum}, got {value}.")
    return value


def _parse(raw: Mapping[str, str]) -> Settings:
    defaults = Settings()
    session = _int(raw, "session_timeout_ms", defaults.session_timeout_ms, 1)
    interval = _int(raw, "heartbeat_interval_ms", defaults.heartbeat_interval_ms, 1)
    if interval >= session:
        raise ConfigError(
            f"REGROUP_HEARTBEAT_INTERVAL_MS ({interval}) must be smaller than "
            f"REGROUP_SESSION_TIMEOUT_MS ({session})."
        )
    assignors = _assignors(raw.get("assignors"), defaults.assignors)
    max_size = _int(raw, "max_group_size", 0, 1) if "max_group_size" in raw else None
    try:
        grace = float(raw.get("shutdown_grace_s", defaults.shutdown_grace_s))
    except ValueError:
        raise ConfigError("REGROUP_SHUTDOWN_GRACE_S must be a number of seconds.") from None
    listen = raw.get("listen", defaults.listen)
    if ":" not in listen:
        raise ConfigError(f"REGROUP_LISTEN must be host:port, got {listen!r}.")
    advertised = raw.get("advertised_address", "")
    if advertised and not _host_port(advertised):
        raise ConfigError(f"REGROUP_ADVERTISED_ADDRESS must be host:port, got {advertised!r}.")
    shards = _int(raw, "shards", defaults.shards, 1)
    if shards > MAX_SHARDS:
        raise ConfigError(f"REGROUP_SHARDS must be at most {MAX_SHARDS}, got {shards}.")
    lease_ms, renew_ms = _lease(raw)
    tls = _tls(raw)
    settings = Settings(
        listen=listen,
        database_url=raw.get("database_url"),
        data_dir=Path(raw.get("data_dir", DEFAULT_DATA_DIR)),
        session_timeout_ms=session,
        heartbeat_interval_ms=interval,
        max_group_size=max_size,
        assignors=assignors,
        assignment_interval_ms=_int(raw, "assignment_interval_ms", defaults.assignment_interval_ms, 0),
        inline_assignment_max_partitions=_int(
            raw, "inline_assignment_max_partitions", defaults.inline_assignment_max_partitions, 0
        ),
        max_message_bytes=_int(raw, "max_message_bytes", defaults.max_message_bytes, 1024),
        offsets_retention_ms=_int(raw, "offsets_retention_ms", defaults.offsets_retention_ms, 0),
        offsets_retention_check_ms=_int(
            raw, "offsets_retention_check_ms", defaults.offsets_retention_check_ms, 1
        ),
        shutdown_grace_s=grace,
        accept_depth=_int(raw, "accept_depth", defaults.accept_depth, 1),
        store_check_ms=_int(raw, "store_check_ms", defaults.store_check_ms, 10),
        store_timeout_ms=_int(raw, "store_timeout_ms", defaults.store_timeout_ms, 100),
        log_level=raw.get("log_level", defaults.log_level).lower(),
        replica_id=raw.get("replica_id", ""),
        migrations_dir=Path(raw["migrations_dir"]) if "migrations_dir" in raw else None,
        shards=shards,
        lease_ms=lease_ms,
        lease_renew_ms=renew_ms,
        advertised_address=advertised,
        forward=_bool(raw, "forward", defaults.forward),
        metrics_listen=_host_port_or_off(
            "metrics_listen", raw.get("metrics_listen", defaults.metrics_listen)
        ),
        web_view=_bool(raw, "web_view", False) if "web_view" in raw else None,
        health_listen=_host_port_or_off("health_listen", raw.get("health_listen", defaults.health_listen)),
        tls_cert=tls.cert if tls is not None else None,
        tls_key=tls.key if tls is not None else None,
        tls_client_ca=tls.client_ca if tls is not None else None,
        tls_ca=tls.ca if tls is not None else None,
        acl_file=Path(raw["acl_file"]) if "acl_file" in raw else None,
        tokens_file=Path(raw["tokens_file"]) if "tokens_file" in raw else None,
        stream_max_batch=_int(raw, "stream_max_batch", defaults.stream_max_batch, 1),
        stream_max_members=_int(raw, "stream_max_members", defaults.stream_max_members, 1),
        stream_max_pending=_int(raw, "stream_max_pending", defaults.stream_max_pending, 1),
        history_max_events=_int(raw, "history_max_events", defaults.history_max_events, 0),
        history_max_age_ms=_int(raw, "history_max_age_ms", defaults.history_max_age_ms, 0),
    )
    settings.check_access_files()  # a wrong file stops the start with its name and entry
    _check_stream_limits(settings)
    return settings


def _check_stream_limits(settings: Settings) -> None:
    """A client that keeps to the limits, one heartbeat per member in flight, must never
    see its stream closed for the answers it owes: as many may wait as it has members,
    or as one message carries."""
    pending = settings.stream_max_pending
    for field, value in (
        ("stream_max_members", settings.stream_max_members),
        ("stream_max_batch", settings.stream_max_batch),
    ):
        if pending < value:
            raise ConfigError(
                f"REGROUP_STREAM_MAX_PENDING ({pending}) must be at least {_ENV[field]} ({value}): "
                "a client within the limits could have its stream closed."
            )


def _host_port_or_off(field: str, value: str) -> str:
    if value.lower() == "off":
        return "off"
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{_ENV[field]} must be host:port or off, got {value!r}.")
    return value


def tls_paths(
    cert: Path | None, key: Path | None, client_ca: Path | None = None, ca: Path | None = None
) -> TlsPaths | None:
    """The TLS files if they go together (None: plain text); ConfigError when they do not."""
    if (cert is None) != (key is None):
        given, missing = (
            ("REGROUP_TLS_CERT", "REGROUP_TLS_KEY")
            if key is None
            else ("REGROUP_TLS_KEY", "REGROUP_TLS_CERT")
        )
        raise ConfigError(f"{given} is set but {missing} is not: set both (TLS) or neither (plain text).")
    if cert is None or key is None:
        for name, value in (("REGROUP_TLS_CLIENT_CA", client_ca), ("REGROUP_TLS_CA", ca)):
            if value is not None:
                raise ConfigError(
                    f"{name} is set without REGROUP_TLS_CERT and REGROUP_TLS_KEY: "
                    "it applies only when the server speaks TLS."
                )
        return None
    return TlsPaths(cert, key, client_ca, ca)


def _tls(raw: Mapping[str, str]) -> TlsPaths | None:
    """The TLS files, checked now so that a wrong one stops the start with its name."""
    paths = tls_paths(
        *(Path(raw[f]) if f in raw else None for f in ("tls_cert", "tls_key", "tls_client_ca", "tls_ca"))
    )
    if paths is not None:
        try:
            load(paths)
        except CertificateError as e:
            raise ConfigError(str(e)) from None
    return paths


def _lease(raw: Mapping[str, str]) -> tuple[int, int]:
    """REGROUP_LEASE_MS and REGROUP_LEASE_RENEW_MS (by default 3/10 of the lease).

    A renewal that fails must be retried, and answered, before the lease stops
    being trusted (its length minus the safety margin): two renewal periods fit.
    """
    lease_ms = _int(raw, "lease_ms", DEFAULT_LEASE_MS, 500)
    if lease_ms > MAX_LEASE_MS:
        raise ConfigError(f"REGROUP_LEASE_MS must be at most {MAX_LEASE_MS} (a day), got {lease_ms}.")
    renew_ms = _int(raw, "lease_renew_ms", lease_ms * 3 // 10, 50)
    trusted_ms = lease_ms - min_margin_ms(lease_ms)
    if 2 * renew_ms > trusted_ms:
        raise ConfigError(
            f"REGROUP_LEASE_RENEW_MS ({renew_ms}) must be at most {trusted_ms // 2}: half of "
            f"REGROUP_LEASE_MS ({lease_ms}) less its safety margin ({lease_ms - trusted_ms} ms), "
            "so that a failed renewal is retried before the lease may be taken over."
        )
    return lease_ms, renew_ms


def _bool(raw: Mapping[str, str], field: str, default: bool) -> bool:
    if field not in raw:
        return default
    value = raw[field].strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{_ENV[field]} must be true or false, got {raw[field]!r}.")


def _host_port(value: str) -> bool:
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def _assignors(value: str | None, default: Sequence[str]) -> tuple[str, ...]:
    if value is None:
        return tuple(default)
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise ConfigError("REGROUP_ASSIGNORS must name at least one assignor.")
    unknown = [n for n in names if n not in BUILTIN_ASSIGNORS]
    if unknown:
        raise ConfigError(
            f"REGROUP_ASSIGNORS names unknown assignors {unknown}; available: {', '.join(BUILTIN_ASSIGNORS)}."
        )
    return names


def settings_from_environment(args: argparse.Namespace | None = None) -> Settings:
    return load_settings(os.environ, args)
