"""The `regroup` command run as a user runs it, against a test's server
(tests/integration/test_cli.py and others)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from tests.support.service import Service

CLI = (sys.executable, "-m", "regroup.cli")


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def address(service: Service) -> str:
    return f"127.0.0.1:{service.server.port}"


async def regroup(target: Service | str, *args: str, timeout: float = 60, **env_vars: str) -> Run:
    """`regroup ARGS...` with REGROUP_ADDRESS pointing at the server (or the address given)."""
    env = {
        **os.environ,
        "REGROUP_ADDRESS": target if isinstance(target, str) else address(target),
        **env_vars,
    }
    process = await asyncio.create_subprocess_exec(
        *CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())
