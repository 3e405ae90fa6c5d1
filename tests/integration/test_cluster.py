"""`python -m regroup.server cluster` as `make run-cluster` starts it: three replicas on one
embedded Postgres, a failover by hand as README.md's "Trying failover" describes it (its
watch script, run against the launcher), and a graceful stop of them all."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from regroup.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.support.doc_blocks import ROOT, parse
from tests.support.timing import scaled

GROUP = "demo"


def _consecutive_free_ports(count: int) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1 now."""
    for _ in range(100):
        first = random.randrange(20_000, 60_000)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(first, first + count):
                    s = stack.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return first
    raise AssertionError("no free ports")


def _watch_script() -> str:
    """README.md's watch script, as a reader saves it."""
    readme = (ROOT / "README.md").read_text()
    (block,) = [
        b
        for b in parse(readme, "README.md")
        if b.language == "python" and b.marker and "test_cluster.py" in b.marker.reason
    ]
    return block.code


async def _coordinator(address: str) -> coordinator_pb2.FindCoordinatorResponse | None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        try:
            return await stub.FindCoordinator(
                coordinator_pb2.FindCoordinatorRequest(group_id=GROUP), timeout=1
            )
        except grpc.aio.AioRpcError:
            return None


async def _agreed_owner(addresses: list[str], timeout_s: float) -> str:
    """The address every replica at `addresses` names as the group's coordinator, once they
    agree on one of them (a dead owner is named until its lease expires)."""
    deadline = time.monotonic() + scaled(timeout_s)
    while True:
        answers = await asyncio.gather(*map(_coordinator, addresses))
        named = {a.address for a in answers if a is not None and a.error_code == common_pb2.NONE}
        if len(named) == 1 and all(a is not None and a.address for a in answers):
            (owner,) = named
            if owner in addresses:
                return owner
        assert time.monotonic() < deadline, f"the replicas never agreed: {answers}"
        await asyncio.sleep(0.1)


def _shards_held(port: int) -> int:
    """regroup_shards_held as the replica's Prometheus endpoint reads it now."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    (line,) = [x for x in text.splitlines() if x.startswith("regroup_shards_held")]
    return int(float(line.split()[-1]))


class Output:
    """The launcher's lines as they come (also kept for the assertion messages)."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[str] = []
        self._stream = stream
        self._new = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while line := await self._stream.readline():
            self.lines.append(line.decode().rstrip("\n"))
            self._new.set()

    async def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first line matching `pattern`, within `timeout_s` on an idle machine (scaled)."""
        deadline = time.monotonic() + scaled(timeout_s)
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if match := re.search(pattern, line):
                    return match
            seen = len(self.lines)
            self._new.clear()
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line matched {pattern!r}:\n" + "\n".join(self.lines[-40:])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), remaining)


# Three replica processes, a member script and a failover: minutes on a busy machine.
@pytest.mark.timeout(scaled(300))
async def test_three_replicas_fail_over_by_hand_and_stop_together(tmp_path: Path) -> None:
    first = _consecutive_free_ports(3)
    addresses = [f"127.0.0.1:{first + i}" for i in range(3)]
    metrics_first = _consecutive_free_ports(3)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    # A short lease, so that the failover takes a second or two; a short heartbeat
    # interval, so that the watch script's member notices it as soon.
    env.update(
        REGROUP_DATA_DIR=str(tmp_path / "data"),
        REGROUP_LISTEN=addresses[0],
        REGROUP_LEASE_MS="1500",
        REGROUP_HEARTBEAT_INTERVAL_MS="300",
        REGROUP_METRICS_LISTEN=f"127.0.0.1:{metrics_first}",
    )
    launcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "regroup.server",
        "cluster",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        limit=1 << 20,
    )
    assert launcher.stdout is not None
    out = Output(launcher.stdout)
    watch: asyncio.subprocess.Process | None = None
    try:
        # Postgres created (initdb) and three replica processes started: slow on a busy machine.
        await out.wait_for(r"^cluster +\| 3 replicas serve on one Postgres", 120)
        pids = {}
        for i, address in enumerate(addresses, 1):
            match = await out.wait_for(rf"^cluster +\|   replica-{i}  {re.escape(address)}  pid (\d+)$", 1)
            pids[address] = int(match[1])
        # Every replica's own log lines, prefixed with its name.
        for i in (1, 2, 3):
            await out.wait_for(rf'^replica-{i} \| \{{.*"event": "server_started"', 1)
        owner = await _agreed_owner(addresses, 30)
        # Each replica serves its metrics on its own port, consecutive from REGROUP_METRICS_LISTEN:
        # together they hold every shard, once the spread settles (a shard released by one
        # replica is held by nobody until another's next lease round).
        deadline = time.monotonic() + scaled(15)
        while (held := [await asyncio.to_thread(_shards_held, metrics_first + i) for i in range(3)]) and (
            sum(held) != 64 or min(held) == 0
        ):
            assert time.monotonic() < deadline, held
            await asyncio.sleep(0.2)

        # README's watch script: a member at a replica that does not coordinate the group.
        script = tmp_path / "watch.py"
        script.write_text(_watch_script())
        watch = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            env={**os.environ, "REGROUP_ADDRESSES": ",".join(addresses), "WATCH_SECONDS": "30"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert watch.stdout is not None
        watched = Output(watch.stdout)
        await watched.wait_for(r"^member of demo at ", 20)
        before = await watched.wait_for(r"member epoch (\d+), (\d+) partitions$", 5)
        assert before[2] == "6", before[0]

        os.kill(pids[owner], signal.SIGKILL)
        killed = "replica-" + str(addresses.index(owner) + 1)
        await out.wait_for(rf"^cluster +\| {killed} \(pid {pids[owner]}\) killed by SIGKILL", 5)
        survivors = [a for a in addresses if a != owner]
        new_owner = await _agreed_owner(survivors, 15)
        assert new_owner != owner
        # The watch script shows the move: the dead one down, both others naming the new coordinator,
        # and the member as it was (same epoch, same partitions: no rebalance).
        names = [f"replica-{addresses.index(a) + 1}" for a in addresses]
        expected = " ".join(
            "(down)" if a == owner else f"replica-{addresses.index(new_owner) + 1}" for a in addresses
        )
        after = await watched.wait_for(rf"^\d\d:\d\d:\d\d {re.escape(expected)} \| member epoch (\d+)", 10)
        assert after[1] == before[1], (before[0], after[0], names)
        watch.send_signal(signal.SIGTERM)
        await watch.wait()

        # SIGHUP starts the killed replica again.
        launcher.send_signal(signal.SIGHUP)
        await out.wait_for(rf"^cluster +\| {killed} starting on {re.escape(owner)}", 5)
        await out.wait_for(r"^cluster +\| every replica serves again", 30)

        launcher.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(launcher.wait(), scaled(30)) == 0, "\n".join(out.lines[-40:])
        await out.task
        for name in names:
            assert any(re.match(rf"^cluster +\| {name} exited with code 0$", line) for line in out.lines), (
                name
            )
        assert re.match(r"^cluster +\| stopped$", out.lines[-1]), out.lines[-5:]
    finally:
        for process in (watch, launcher):
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()
