"""Every code block of README.md, docs/ and clients/python/README.md runs as written.

How each block runs, and the markers for those that cannot, are in
tests/support/doc_blocks.py. Python blocks share one regroup server (conftest.py),
so each snippet must also cope with what the others left behind, as a reader's
would on their own server.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.support.doc_blocks import (
    CONSOLE,
    PYTHON,
    ROOT,
    SHELL,
    SQL,
    Block,
    DocTestError,
    check_runnable,
    collect,
    console_commands,
    make_commands,
    required_commands,
    setup_code,
    sql_statements,
)
from tests.support.pg import EmbeddedPostgres

BLOCKS = collect()
VENV_BIN = Path(sys.executable).parent
#: README.md's setup (activating .venv), run before every shell block as a reader ran it.
SETUP = setup_code(BLOCKS)
#: What one block may take, all its runs together: below pytest's own timeout (120 s), so that
#: ours fires first and stops every process the block started.
BUDGET_S = 100.0
MAKE_VARIABLES = frozenset({"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"})


def _id(item: Block | DocTestError) -> str:
    return item.id if isinstance(item, Block) else f"error:{str(item).split(':', 1)[0]}"


def _failure(what: str, run: subprocess.CompletedProcess[str]) -> str:
    out, err = run.stdout[-4000:], run.stderr[-4000:]
    return f"{what} exited with {run.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"


def _stop_group(process: subprocess.Popen[str]) -> None:
    """Stops every process a block started, a server it left in the background included:
    SIGTERM first, so that a regroup server also stops its embedded Postgres, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + 10
        try:
            os.killpg(process.pid, sig)
            while time.monotonic() < deadline:
                process.poll()  # reap the leader, or the group never empties
                os.killpg(process.pid, 0)  # raises once no process of the group is left
                time.sleep(0.05)
        except ProcessLookupError:
            return


def _run(args: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """subprocess.run in a session of its own, so that whatever ends the run (its timeout,
    pytest's, a failure) also stops every process it started, not only the first one."""
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_group(process)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"{' '.join(args)[:200]} did not finish within {timeout:.0f} s\n"
            f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
        ) from None
    except BaseException:
        _stop_group(process)
        process.communicate()
        raise
    _stop_group(process)  # what it left running in the background
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def _scratch_checkout(tmp_path: Path) -> Path:
    """A folder that looks like the checkout (its top-level entries linked in), so that
    commands find proto/, clients/ and .venv/ while what they write stays out of the tree."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {".git", ".regroup", "build"}:
            (checkout / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return checkout


def _path_without_venv() -> str:
    """PATH as a new terminal has it: without the project's tools (the pinned protoc, buf,
    grpcurl, regroup, spark-submit), which only README.md's setup block puts on it."""
    return os.pathsep.join(
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if entry and Path(entry).resolve() != VENV_BIN.resolve()
    )


def _shell_env(address: str, http: str, scratch_venv: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "REGROUP_ADDRESS": address,
        "REGROUP_HTTP_ADDRESS": http,
        "PATH": _path_without_venv(),
        # A `pip install` in the docs goes to a scratch environment (pip's --python), so that it
        # cannot change the one these tests run in, and without paying for a pip of its own.
        "PIP_PYTHON": str(scratch_venv / "bin" / "python"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("DATABASE_URL", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def _run_python(block: Block, tmp_path: Path, address: str, http: str) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(block.code)
    env = {**os.environ, "REGROUP_ADDRESS": address, "REGROUP_HTTP_ADDRESS": http}
    runs = 1 if block.marker is not None and block.marker.kind == "once" else 2
    deadline = time.monotonic() + BUDGET_S
    for attempt in range(1, runs + 1):
        run = _run([sys.executable, str(script)], cwd=tmp_path, env=env, timeout=deadline - time.monotonic())
        assert run.returncode == 0, _failure(f"{block.id} (run {attempt} of {runs})", run)


def _run_shell(block: Block, tmp_path: Path, address: str, http: str, scratch_venv: Path) -> None:
    script = console_commands(block) if block.language in CONSOLE else block.code
    run = _run(
        ["bash", "-e", "-o", "pipefail", "-c", SETUP + script],
        cwd=_scratch_checkout(tmp_path),
        env=_shell_env(address, http, scratch_venv),
        timeout=BUDGET_S,
    )
    assert run.returncode == 0, _failure(block.id, run)


def _dry_run(block: Block) -> None:
    # As a reader would type it, not as a sub-make of the `make test` that runs these tests.
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
    for args in make_commands(block):
        run = _run(["make", "-n", *args], cwd=ROOT, env=env, timeout=60)
        assert run.returncode == 0, _failure(f"{block.id}: make -n {' '.join(args)}", run)


async def _run_sql(block: Block, dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for statement in sql_statements(block.code):
            if re.search(r"\$\d", statement):
                await conn.prepare(statement)
            else:
                await conn.execute(statement)
    finally:
        await conn.close()


@pytest.mark.parametrize("item", BLOCKS, ids=[_id(b) for b in BLOCKS])
def test_code_block(item: Block | DocTestError, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if isinstance(item, DocTestError):
        pytest.fail(str(item))
    block = item
    check_runnable(block)
    marker = block.marker
    if marker is not None and marker.kind == "skip":
        pytest.skip(marker.reason)
    if marker is not None and marker.kind == "output":
        pytest.skip("output, not commands")
    if marker is not None and marker.kind == "dry-run":
        _dry_run(block)
        return
    missing = [c for c in required_commands(block) if shutil.which(c) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, not installed here")
    if block.language in PYTHON | SHELL | CONSOLE:
        address = request.getfixturevalue("regroup_address")
        http = request.getfixturevalue("regroup_http_address")
    if block.language in PYTHON:
        _run_python(block, tmp_path, address, http)
    elif block.language in SHELL | CONSOLE:
        _run_shell(block, tmp_path, address, http, request.getfixturevalue("scratch_venv"))
    elif block.language in SQL:
        postgres: EmbeddedPostgres = request.getfixturevalue("docs_postgres")
        asyncio.run(_run_sql(block, asyncio.run(postgres.empty_database())))
    else:  # check_runnable lets no other block through
        raise AssertionError(f"{block.id}: no runner for {block.language}")


def test_every_markdown_file_was_collected() -> None:
    """The docs the issue names are among those checked (a moved file must not drop out)."""
    paths = {b.path for b in BLOCKS if isinstance(b, Block)}
    assert {"README.md", "clients/python/README.md", "docs/clients.md", "docs/spark.md"} <= paths


def test_clients_doc_names_every_rpc() -> None:
    """docs/clients.md describes the wire contract: it must name each service's every RPC."""
    text = (ROOT / "docs" / "clients.md").read_text()
    missing = []
    for proto in sorted((ROOT / "proto" / "regroup" / "v1").glob("*.proto")):
        for service, body in re.findall(r"service (\w+) \{(.*?)\n\}", proto.read_text(), re.S):
            missing += [f"{service}.{rpc}" for rpc in re.findall(r"rpc (\w+)\(", body) if rpc not in text]
    assert not missing, f"docs/clients.md does not mention {missing}"


def _readme_block(language: frozenset[str], contains: str, kind: str | None) -> Block:
    """The README's one block of `language` with `contains` in it, marked `kind` (None: run)."""
    (block,) = [
        b
        for b in BLOCKS
        if isinstance(b, Block)
        and b.path == "README.md"
        and b.language in language
        and contains in b.code
        and (b.marker.kind if b.marker is not None else None) == kind
    ]
    return block


def test_the_readme_puts_the_venv_tools_on_path_before_it_uses_them() -> None:
    """A new terminal has no grpcurl or regroup: README.md says how to get them (its setup
    block, which the blocks here run after) before its first block that needs one."""
    assert SETUP.strip(), "README.md has no <!-- doc-test: setup --> block putting .venv/bin on PATH"
    path = _path_without_venv()
    venv_only = {tool.name for tool in VENV_BIN.iterdir() if shutil.which(tool.name, path=path) is None}
    assert {"grpcurl", "regroup"} <= venv_only
    setup_line = min(
        b.line for b in BLOCKS if isinstance(b, Block) and b.marker is not None and b.marker.kind == "setup"
    )
    for block in BLOCKS:
        if not isinstance(block, Block) or block.path != "README.md" or block.language not in SHELL | CONSOLE:
            continue
        if block.marker is not None and block.marker.kind in {"dry-run", "setup"}:
            continue  # make commands; the setup itself
        used = venv_only & set(re.findall(r"[\w.-]+", block.code))
        assert not used or block.line > setup_line, f"{block.id} uses {sorted(used)} before the setup"


def test_the_readme_example_prints_partitions_in_partition_order(
    regroup_address: str, tmp_path: Path
) -> None:
    """orders-2 before orders-10, as a reader counts them (not sorted as text)."""
    block = _readme_block(PYTHON, "wait_for_assignment", None)
    script = tmp_path / "example.py"
    script.write_text(block.code)
    env = {**os.environ, "REGROUP_ADDRESS": regroup_address}
    run = _run([sys.executable, str(script)], cwd=tmp_path, env=env, timeout=BUDGET_S)
    assert run.returncode == 0, _failure(block.id, run)
    printed = [int(p) for p in re.findall(r"\borders-(\d+)\b", run.stdout)]
    # The member is alone in its group: it owns all 12 partitions, 2 and 10 among them.
    assert printed == list(range(12)), run.stdout


def test_no_doc_prints_partitions_sorted_as_text() -> None:
    """sorted(map(str, partitions)) puts orders-10 before orders-2: the docs sort the
    TopicPartitions themselves, by (topic, partition), then print them."""
    as_text = re.compile(r"sorted\(map\(str, [\w.]*partitions\)\)")
    found = [b.id for b in BLOCKS if isinstance(b, Block) and b.language in PYTHON and as_text.search(b.code)]
    assert not found, f"partitions sorted as text in {found}"


def test_what_the_readme_tls_steps_write_is_ignored_by_git(tmp_path: Path) -> None:
    """The TLS steps write certs/ (with the CA's key) into the checkout: git ignores it, so
    that no one commits a key by `git add .`."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    written = ["certs/ca.key"]
    if shutil.which("openssl") is not None:
        block = _readme_block(SHELL, "openssl req", "requires")
        checkout = _scratch_checkout(tmp_path)
        run = _run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=checkout, timeout=BUDGET_S)
        assert run.returncode == 0, _failure(block.id, run)
        written += [
            str(p.relative_to(checkout)) for p in checkout.rglob("*") if p.is_file() and not p.is_symlink()
        ]
        assert "certs/ca.key" in written[1:] and "certs/server.key" in written[1:], written
    check = _run(["git", "check-ignore", "--no-index", "--verbose", *written], cwd=ROOT, timeout=30)
    ignored = {line.split("\t", 1)[1] for line in check.stdout.splitlines() if "\t" in line}
    assert ignored == set(written), f"not ignored by git: {sorted(set(written) - ignored)}"
