"""The commands the Helm chart's NOTES.txt prints work as printed, against a server of the
kind the values describe: plain text, TLS, mutual TLS (issue 38). The Service's address
stands for this server's, and the files the commands name are what the chart's TLS Secret
holds (ca.crt, one CA for servers and clients, as cert-manager writes it) and a client
certificate signed by that CA."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import CertificateAuthority
from tests.support.chart import helm_binary, render_notes
from tests.support.service import ServiceFactory

SERVICE_ADDRESS = "rg-regroup.default.svc:50051"
VENV_BIN = Path(sys.executable).parent

MODES = {
    "plaintext": (),
    "tls": ("tls.enabled=true", "tls.secretName=rg-tls"),
    "mtls": ("tls.enabled=true", "tls.secretName=rg-tls", "tls.clientAuth=true"),
}


def commands(notes: str) -> list[list[str]]:
    """The grpcurl and regroup command lines of the notes, as argument lists."""
    lines = [line.strip() for line in notes.splitlines()]
    found = [shlex.split(line) for line in lines if line.startswith(("grpcurl ", "regroup groups "))]
    assert [words[0] for words in found] == ["grpcurl", "regroup"], notes
    return found


@pytest.mark.parametrize("mode", list(MODES))
async def test_the_notes_commands_reach_a_server_of_their_kind(
    start_service: ServiceFactory, tmp_path: Path, mode: str
) -> None:
    notes = await asyncio.to_thread(
        render_notes, helm_binary(), "database.url=postgresql://db/r", *MODES[mode]
    )
    ca = CertificateAuthority("rg-tls")
    ca.write(tmp_path)  # ca.crt, as the NOTES' kubectl command writes it
    ca.client("worker").write(tmp_path, "client")  # client.crt, client.key
    settings: dict[str, Any] = {}
    if mode != "plaintext":
        cert, key = ca.server("replica", client=True).write(tmp_path, "tls")
        settings = {"tls_cert": cert, "tls_key": key}
    if mode == "mtls":
        settings["tls_client_ca"] = tmp_path / "ca.crt"
    service = await start_service(**settings)
    address = f"127.0.0.1:{service.server.port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"

    for words in commands(notes):
        assert SERVICE_ADDRESS in words, words
        args = [address if w == SERVICE_ADDRESS else w for w in words]
        # In a thread: the server answers on this test's event loop.
        result = await asyncio.to_thread(
            subprocess.run, args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, f"{shlex.join(words)}\n{result.stdout}\n{result.stderr}"
        if words[0] == "grpcurl":
            assert '"status": "SERVING"' in result.stdout, result.stdout
