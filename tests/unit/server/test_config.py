"""Configuration from the environment and flags: defaults, overrides and precise errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from regroup.server.config import ConfigError, add_arguments, load_settings


def test_defaults_run_embedded_on_localhost() -> None:
    settings = load_settings({})
    assert settings.listen == "127.0.0.1:50051"
    assert settings.database_url is None
    assert settings.data_dir == Path(".regroup")
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms) == (45_000, 5_000)
    assert settings.max_group_size is None
    config = settings.group_config()
    assert config.assignment_interval_ms == 1_000
    assert list(config.assignors) == ["uniform", "range", "leader"]
    assert config.default_assignor == "uniform"


def test_environment_sets_every_documented_variable() -> None:
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://db/regroup",
            "REGROUP_LISTEN": "0.0.0.0:6000",
            "REGROUP_DATA_DIR": "/var/lib/regroup",
            "REGROUP_SESSION_TIMEOUT_MS": "300",
            "REGROUP_HEARTBEAT_INTERVAL_MS": "50",
            "REGROUP_MAX_GROUP_SIZE": "10",
            "REGROUP_ASSIGNORS": "range, uniform",
            "REGROUP_ASSIGNMENT_INTERVAL_MS": "0",
        }
    )
    assert settings.database_url == "postgresql://db/regroup"
    assert settings.listen == "0.0.0.0:6000"
    assert settings.data_dir == Path("/var/lib/regroup")
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms) == (300, 50)
    assert settings.max_group_size == 10
    assert settings.group_config().default_assignor == "range"
    assert settings.group_config().assignment_interval_ms == 0


def test_lease_settings_default_and_follow_the_lease() -> None:
    defaults = load_settings({})
    assert (defaults.shards, defaults.lease_ms, defaults.lease_renew_ms) == (64, 10_000, 3_000)
    assert (defaults.forward, defaults.advertised_address) == (True, "")
    set_ = load_settings(
        {
            "REGROUP_SHARDS": "16",
            "REGROUP_LEASE_MS": "2000",
            "REGROUP_FORWARD": "off",
            "REGROUP_ADVERTISED_ADDRESS": "10.1.2.3:50051",
        }
    )
    # The renewal period follows the lease (3/10 of it) unless set.
    assert (set_.shards, set_.lease_ms, set_.lease_renew_ms) == (16, 2_000, 600)
    assert (set_.forward, set_.advertised_address) == (False, "10.1.2.3:50051")


def test_flags_win_over_the_environment() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--session-timeout-ms", "9000", "--listen", "127.0.0.1:0"])
    settings = load_settings({"REGROUP_SESSION_TIMEOUT_MS": "1000"}, args)
    assert settings.session_timeout_ms == 9000
    assert settings.listen == "127.0.0.1:0"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REGROUP_SESSION_TIMEOUT_MS": "abc"}, "REGROUP_SESSION_TIMEOUT_MS must be an integer"),
        ({"REGROUP_SESSION_TIMEOUT_MS": "0"}, "REGROUP_SESSION_TIMEOUT_MS must be at least 1"),
        (
            {"REGROUP_SESSION_TIMEOUT_MS": "100", "REGROUP_HEARTBEAT_INTERVAL_MS": "100"},
            "must be smaller than REGROUP_SESSION_TIMEOUT_MS",
        ),
        ({"REGROUP_ASSIGNORS": "sticky"}, "unknown assignors ['sticky']"),
        ({"REGROUP_ASSIGNORS": " , "}, "must name at least one assignor"),
        ({"REGROUP_MAX_GROUP_SIZE": "-1"}, "REGROUP_MAX_GROUP_SIZE must be at least 1"),
        ({"REGROUP_ACCEPT_DEPTH": "0"}, "REGROUP_ACCEPT_DEPTH must be at least 1"),
        ({"REGROUP_STORE_CHECK_MS": "5"}, "REGROUP_STORE_CHECK_MS must be at least 10"),
        ({"REGROUP_STORE_TIMEOUT_MS": "1.5"}, "REGROUP_STORE_TIMEOUT_MS must be an integer"),
        ({"REGROUP_LISTEN": "50051"}, "REGROUP_LISTEN must be host:port"),
        ({"REGROUP_SHARDS": "0"}, "REGROUP_SHARDS must be at least 1"),
        ({"REGROUP_SHARDS": "4097"}, "REGROUP_SHARDS must be at most 4096"),
        ({"REGROUP_LEASE_MS": "100"}, "REGROUP_LEASE_MS must be at least 500"),
        ({"REGROUP_LEASE_MS": "86400001"}, "REGROUP_LEASE_MS must be at most 86400000"),
        (
            {"REGROUP_LEASE_MS": "2000", "REGROUP_LEASE_RENEW_MS": "1000"},
            "REGROUP_LEASE_RENEW_MS (1000) must be",
        ),
        ({"REGROUP_LEASE_RENEW_MS": "10"}, "REGROUP_LEASE_RENEW_MS must be at least 50"),
        ({"REGROUP_FORWARD": "maybe"}, "REGROUP_FORWARD must be true or false"),
        ({"REGROUP_ADVERTISED_ADDRESS": "pod-1"}, "REGROUP_ADVERTISED_ADDRESS must be host:port"),
    ],
)
def test_bad_settings_are_refused_with_the_variable_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(env)
    assert message in str(error.value)


def test_stream_limits_are_read_and_checked_against_each_other() -> None:
    settings = load_settings(
        {
            "REGROUP_STREAM_MAX_BATCH": "50",
            "REGROUP_STREAM_MAX_MEMBERS": "200",
            "REGROUP_STREAM_MAX_PENDING": "300",
        }
    )
    assert (settings.stream_max_batch, settings.stream_max_members, settings.stream_max_pending) == (
        50,
        200,
        300,
    )
    with pytest.raises(
        ConfigError, match=r"REGROUP_STREAM_MAX_PENDING \(100\) must be at least REGROUP_STREAM_MAX_MEMBERS"
    ):
        load_settings({"REGROUP_STREAM_MAX_MEMBERS": "200", "REGROUP_STREAM_MAX_PENDING": "100"})
    with pytest.raises(ConfigError, match="REGROUP_STREAM_MAX_BATCH must be at least 1"):
        load_settings({"REGROUP_STREAM_MAX_BATCH": "0"})


def test_the_web_view_is_served_by_default_only_without_an_acl(tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text("[]")
    assert load_settings({}).web_view is None
    assert load_settings({}).web_view_served()
    # An ACL turns it off unless REGROUP_WEB_VIEW says on: the view checks no principal.
    assert not load_settings({"REGROUP_ACL_FILE": str(acl)}).web_view_served()
    assert load_settings({"REGROUP_ACL_FILE": str(acl), "REGROUP_WEB_VIEW": "on"}).web_view_served()
    assert not load_settings({"REGROUP_WEB_VIEW": "off"}).web_view_served()
    # It lives on the metrics port: none, no view.
    assert not load_settings({"REGROUP_WEB_VIEW": "on", "REGROUP_METRICS_LISTEN": "off"}).web_view_served()
    with pytest.raises(ConfigError, match="REGROUP_WEB_VIEW must be true or false"):
        load_settings({"REGROUP_WEB_VIEW": "maybe"})


def test_regroup_http_listen_names_the_metrics_and_web_view_port() -> None:
    assert load_settings({"REGROUP_HTTP_LISTEN": "0.0.0.0:9999"}).metrics_listen == "0.0.0.0:9999"
    same = {"REGROUP_HTTP_LISTEN": "0.0.0.0:9999", "REGROUP_METRICS_LISTEN": "0.0.0.0:9999"}
    assert load_settings(same).metrics_listen == "0.0.0.0:9999"
    with pytest.raises(ConfigError, match=r"REGROUP_HTTP_LISTEN .* name different ports"):
        load_settings({"REGROUP_HTTP_LISTEN": "0.0.0.0:9999", "REGROUP_METRICS_LISTEN": "off"})


def test_history_settings() -> None:
    settings = load_settings({"REGROUP_HISTORY_MAX_EVENTS": "0", "REGROUP_HISTORY_MAX_AGE_MS": "60000"})
    assert (settings.history_max_events, settings.history_max_age_ms) == (0, 60_000)
    with pytest.raises(ConfigError, match="REGROUP_HISTORY_MAX_EVENTS must be at least 0"):
        load_settings({"REGROUP_HISTORY_MAX_EVENTS": "-1"})


def _help_parser() -> argparse.ArgumentParser:
    """The server's own parser, as `python -m regroup.server --help` prints it."""
    from regroup.server.main import parser

    return parser()


def test_every_flag_has_a_description_its_variable_and_its_default() -> None:
    from regroup.server.config import _ENV, OPTIONS, Settings

    defaults = Settings()
    flags = {a.dest: a for a in _help_parser()._actions if a.option_strings and a.dest != "help"}
    assert set(_ENV) <= set(flags)
    for dest, action in flags.items():
        text = action.help or ""
        # "<description> (env REGROUP_X, default: Y)": one parenthesis, at the end.
        assert text.count("(") == 1 and text.endswith(")"), (dest, text)
        description, _, where = text.rpartition(" (")
        assert len(description) > 10, (dest, text)  # a description, not only the variable
        env = _ENV.get(dest)
        assert where.startswith(f"env {env}, default: " if env else "no environment variable, default: "), (
            dest,
            text,
        )
        default = getattr(defaults, dest, action.default)
        if dest in OPTIONS and OPTIONS[dest].default is not None:  # in words: "3/10 of --lease-ms"
            assert where.endswith(f"default: {OPTIONS[dest].default})"), (dest, text)
        elif isinstance(default, bool):
            assert where.endswith("default: true)" if default else "default: false)"), (dest, text)
        elif isinstance(default, int | float | str) and default != "":
            assert where.endswith(f"default: {default})"), (dest, text)
        else:  # unset by default: the help says what that means
            assert not where.endswith("default: )"), (dest, text)


def test_help_prints_every_flag_described(capsys: pytest.CaptureFixture[str]) -> None:
    from regroup.server.main import main

    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "Postgres DSN (env DATABASE_URL, default: unset: an embedded Postgres" in out
    assert "(env REGROUP_LEASE_MS, default: 10000)" in out
    assert "(env REGROUP_METRICS_LISTEN, default: 127.0.0.1:9464)" in out


@pytest.mark.parametrize(
    ("flags", "env", "named", "not_named"),
    [
        (["--lease-ms", "abc"], {}, "--lease-ms must be an integer, got 'abc'.", "REGROUP_LEASE_MS"),
        ([], {"REGROUP_LEASE_MS": "abc"}, "REGROUP_LEASE_MS must be an integer, got 'abc'.", "--lease-ms"),
        # A flag wins over the variable, and is what the error names.
        (
            ["--lease-ms", "100"],
            {"REGROUP_LEASE_MS": "2000"},
            "--lease-ms must be at least 500",
            "REGROUP_LEASE_MS",
        ),
        (["--forward", "maybe"], {}, "--forward must be true or false", "REGROUP_FORWARD"),
        (
            ["--heartbeat-interval-ms", "900"],
            {"REGROUP_SESSION_TIMEOUT_MS": "900"},
            "--heartbeat-interval-ms (900) must be smaller than REGROUP_SESSION_TIMEOUT_MS (900)",
            "REGROUP_HEARTBEAT_INTERVAL_MS",
        ),
        (["--listen", "50051"], {}, "--listen must be host:port", "REGROUP_LISTEN"),
        (
            ["--acl-file", "/nonexistent/acl.yaml"],
            {},
            "--acl-file (/nonexistent/acl.yaml) does not exist",
            "REGROUP_ACL_FILE",
        ),
        (
            ["--tls-cert", "/nonexistent/c.pem"],
            {},
            "--tls-cert is set but REGROUP_TLS_KEY is not",
            "REGROUP_TLS_CERT",
        ),
        (
            [],
            {"REGROUP_HTTP_LISTEN": "9999"},
            "REGROUP_HTTP_LISTEN must be host:port or off",
            "REGROUP_METRICS_LISTEN",
        ),
    ],
)
def test_a_bad_value_is_named_as_the_user_gave_it(
    flags: list[str], env: dict[str, str], named: str, not_named: str
) -> None:
    args = _help_parser().parse_args(flags)
    with pytest.raises(ConfigError) as error:
        load_settings(env, args)
    assert named in str(error.value)
    assert not_named not in str(error.value)


def test_the_command_line_reports_a_bad_flag_under_its_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from regroup.server.main import main

    monkeypatch.setenv("REGROUP_LEASE_MS", "2000")
    assert main(["--lease-ms", "abc"]) == 2
    assert (
        capsys.readouterr().err == "regroup: configuration error: --lease-ms must be an integer, got 'abc'.\n"
    )
    monkeypatch.setenv("REGROUP_LEASE_MS", "abc")
    assert main([]) == 2
    assert (
        capsys.readouterr().err
        == "regroup: configuration error: REGROUP_LEASE_MS must be an integer, got 'abc'.\n"
    )
