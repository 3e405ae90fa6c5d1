"""Migrations: applied in order to an empty database, recorded, never re-run or edited;
shipped inside the wheel, and never silently absent."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from regroup.server.migrate import MigrationError, discover, migrate
from regroup.server.webview import STATIC_FILES
from tests.support.pg import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[2]
#: The source of truth: the SQL files of the checkout, in order.
CHECKOUT_MIGRATIONS = sorted(p.name for p in (ROOT / "migrations").glob("*.sql"))


async def test_migrations_apply_to_an_empty_database(postgres: EmbeddedPostgres) -> None:
    dsn = await postgres.empty_database()

    applied = await migrate(dsn)

    assert applied == [m.name for m in discover()]
    conn = await asyncpg.connect(dsn)
    try:
        versions = [
            r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        ]
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
    finally:
        await conn.close()
    assert versions == [m.version for m in discover()]
    assert {"topics", "groups", "members", "target_assignments", "current_assignments"} <= tables
    assert await migrate(dsn) == []


async def test_the_first_migration_fixes_the_shard_count(postgres: EmbeddedPostgres) -> None:
    from regroup.server.app import find_migrations, run_migrations
    from regroup.server.config import Settings

    dsn = await postgres.empty_database()
    migrations = find_migrations(Settings())
    assert await run_migrations(dsn, migrations, shards=16) == [m.name for m in migrations]
    assert await run_migrations(dsn, migrations, shards=128) == []  # a later setting is ignored
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT value FROM cluster_settings WHERE key = 'shards'") == "16"
    finally:
        await conn.close()


async def test_replicas_fixing_the_shard_count_together_all_read_the_first_ones(
    postgres: EmbeddedPostgres,
) -> None:
    """Two replicas starting together: the second's statement waits for the first's insert,
    then conflicts, and must return the committed count (it returned nothing before, and the
    replica failed to start; the chaos test's simultaneous starts found it)."""
    from regroup.server import sql

    dsn = await postgres.migrated_database()
    first, second = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        await first.execute("DELETE FROM cluster_settings WHERE key = 'shards'")  # as never started
        transaction = first.transaction()
        await transaction.start()
        assert await first.fetchval(sql.SHARD_COUNT, "16") == "16"
        waiting = asyncio.create_task(second.fetchval(sql.SHARD_COUNT, "64"))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # blocked on the first's uncommitted row
        await transaction.commit()
        assert await asyncio.wait_for(waiting, 10) == "16"
        assert await second.fetchval(sql.SHARD_COUNT, "128") == "16"
    finally:
        await first.close()
        await second.close()


async def test_an_edited_migration_is_refused(postgres: EmbeddedPostgres, tmp_path: Path) -> None:
    dsn = await postgres.empty_database()
    for path in (ROOT / "migrations").glob("*.sql"):
        shutil.copy(path, tmp_path / path.name)
    await migrate(dsn, tmp_path)
    first = min(tmp_path.glob("*.sql"))
    first.write_text(first.read_text() + "\n-- edited\n")

    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(dsn, tmp_path)


def test_misnamed_migration_is_refused(tmp_path: Path) -> None:
    (tmp_path / "initial.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"NNNN_description\.sql"):
        discover(tmp_path)


async def test_connectors_without_a_group_become_an_empty_connect_group(
    postgres: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = await postgres.empty_database()
    before = [m for m in (ROOT / "migrations").glob("*.sql") if m.name < "0004"]
    for path in before:
        shutil.copy(path, tmp_path / path.name)
    await migrate(dsn, tmp_path)
    conn = await asyncpg.connect(dsn)
    try:
        # What PutConnectors stored before 0004: connectors of no group, and of a group
        # that became a consumer group.
        await conn.execute(
            "INSERT INTO groups (group_id, group_type, group_epoch, owner, owner_epoch)"
            " VALUES ('consumers', 'consumer', 3, 'r', 1)"
        )
        await conn.execute(
            "INSERT INTO connectors (group_id, name, tasks)"
            " VALUES ('orphan', 'A', 2), ('orphan', 'B', 0), ('consumers', 'C', 1)"
        )
        assert (await migrate(dsn))[0] == "0004_connectors_belong_to_groups.sql"
        groups = [tuple(r) for r in await conn.fetch("SELECT group_id, group_type, group_epoch FROM groups")]
        connectors = [
            tuple(r) for r in await conn.fetch("SELECT group_id, name FROM connectors ORDER BY 1, 2")
        ]
        await conn.execute("DELETE FROM groups WHERE group_id = 'orphan'")
        left = await conn.fetchval("SELECT count(*) FROM connectors")
    finally:
        await conn.close()
    assert sorted(groups) == [("consumers", "consumer", 3), ("orphan", "connect", 0)]
    assert connectors == [("orphan", "A"), ("orphan", "B")]
    assert left == 0


def test_an_empty_migrations_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="No migrations"):
        discover(tmp_path)


def test_a_missing_migrations_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="does not exist"):
        discover(tmp_path / "absent")


@pytest.mark.parametrize("command", ["migrate", "serve"])
@pytest.mark.parametrize("directory", ["empty", "absent"])
async def test_migrate_without_migrations_fails_loudly(
    postgres: EmbeddedPostgres, tmp_path: Path, directory: str, command: str
) -> None:
    """`migrate` (and `serve`) with nothing to apply exit non-zero and say why, even with a
    reachable database (before, `migrate` reported success and `serve` then failed on a
    missing table)."""
    (tmp_path / "empty").mkdir()
    dsn = await postgres.empty_database()
    env = {**_clean_environment(), "DATABASE_URL": dsn, "REGROUP_MIGRATIONS_DIR": str(tmp_path / directory)}

    result = await asyncio.to_thread(
        subprocess.run,
        # No default port (a `make run` may hold it), should `serve` get as far as listening.
        [
            sys.executable,
            "-m",
            "regroup.server",
            command,
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1, result.stdout + result.stderr
    assert "regroup: migrations:" in result.stderr
    assert str(tmp_path / directory) in result.stderr
    assert "Traceback" not in result.stderr
    conn = await asyncpg.connect(dsn)
    try:
        # Nothing was attempted: the missing migrations are found before the database is touched.
        assert await conn.fetchval("SELECT to_regclass('schema_migrations')") is None
    finally:
        await conn.close()


@dataclass(frozen=True)
class Installed:
    """regroup and regroup-client installed from their wheels into `site`, outside the checkout."""

    site: Path
    wheel_names: frozenset[str]

    def environment(self, **extra: str) -> dict[str, str]:
        # -S keeps site-packages' .pth files (the checkout's editable install) off sys.path;
        # PYTHONPATH then gives the installed wheels first, and the venv's third-party packages.
        venv_site = sysconfig.get_paths()["purelib"]
        return {**_clean_environment(), "PYTHONPATH": f"{self.site}{os.pathsep}{venv_site}", **extra}


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("REGROUP_", "DATABASE_URL", "PYTHON"))}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    wheels, site = base / "wheels", base / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(ROOT),
            str(ROOT / "clients/python"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (server_wheel,) = wheels.glob("regroup-*.whl")
    with zipfile.ZipFile(server_wheel) as archive:
        names = frozenset(archive.namelist())
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(site), *map(str, wheels.glob("*.whl"))],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return Installed(site, names)


def _run_installed(installed: Installed, cwd: Path, script: str) -> Any:
    """What `script` printed as JSON, run by the installed wheel outside the checkout; its
    "file" is checked to be the wheel's copy, not the checkout's."""
    result = subprocess.run(
        [sys.executable, "-S", "-c", script],
        env=installed.environment(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert Path(found["file"]).is_relative_to(installed.site)
    return found


def test_the_wheel_carries_the_migrations(installed: Installed) -> None:
    for name in CHECKOUT_MIGRATIONS:
        assert f"regroup/server/migrations/{name}" in installed.wheel_names, name


def test_an_installed_server_finds_its_migrations_outside_a_checkout(
    installed: Installed, tmp_path: Path
) -> None:
    script = (
        "import json, regroup.server\n"
        "from regroup.server.migrate import discover\n"
        "print(json.dumps({'file': regroup.server.__file__, 'migrations': [m.name for m in discover()]}))\n"
    )
    found = _run_installed(installed, tmp_path, script)
    assert found["migrations"] == CHECKOUT_MIGRATIONS


async def test_an_installed_migrate_command_creates_the_schema(
    installed: Installed, postgres: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = await postgres.empty_database()

    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-S", "-m", "regroup.server", "migrate"],
        env=installed.environment(DATABASE_URL=dsn),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    conn = await asyncpg.connect(dsn)
    try:
        names = [r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations ORDER BY version")]
        groups = await conn.fetchval("SELECT to_regclass('groups')")
    finally:
        await conn.close()
    assert names == CHECKOUT_MIGRATIONS
    assert groups is not None


def test_the_wheel_carries_the_web_view(installed: Installed) -> None:
    for name, _ in STATIC_FILES.values():
        assert f"regroup/server/web/{name}" in installed.wheel_names, name


def test_an_installed_server_finds_its_web_view_outside_a_checkout(
    installed: Installed, tmp_path: Path
) -> None:
    script = (
        "import hashlib, json, regroup.server.webview as w\n"
        "sums = {p: hashlib.sha256(b).hexdigest() for p, b in w.load_files().items()}\n"
        "print(json.dumps({'file': w.__file__, 'sha256': sums}))\n"
    )
    found = _run_installed(installed, tmp_path, script)
    checkout = {
        path: hashlib.sha256((ROOT / "server" / "web" / name).read_bytes()).hexdigest()
        for path, (name, _) in STATIC_FILES.items()
    }
    assert found["sha256"] == checkout
