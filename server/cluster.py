"""`python -m regroup.server cluster` (`make run-cluster`): replicas on one Postgres, to try failover by hand.

The launcher starts the embedded Postgres once (or uses DATABASE_URL), applies the
migrations, then starts `--replicas` (3) replica processes, `python -m regroup.server`
each, on consecutive ports from REGROUP_LISTEN (127.0.0.1:50051, :50052, :50053), with
metrics on consecutive ports from REGROUP_METRICS_LISTEN (:9464, :9465, :9466), named
replica-1, replica-2, ... (REGROUP_REPLICA_ID), all on that one database. Every other
setting, from the environment or the launcher's flags, reaches every replica alike.

- Every line a replica prints comes out prefixed with its name.
- SIGINT (Ctrl-C) and SIGTERM are passed on to every replica as SIGTERM: a graceful
  stop, each hands its shards over at once. A second one kills them (SIGKILL).
- A replica that dies (`kill -9 <pid>`) stays down: the others take its shards over
  once its lease expires. SIGHUP to the launcher starts the missing replicas again.
- The launcher exits once no replica runs: 0 when it was asked to stop and every
  replica still running then stopped cleanly, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from .app import close_embedded, find_migrations, resolve_database_url, run_migrations
from .config import Settings

DEFAULT_REPLICAS = 3
#: The longest line a replica may print in one piece (a JSON log line with a traceback).
_LINE_LIMIT = 1 << 20
#: What a replica logs once it accepts calls (server/app.py).
_STARTED = b'"server_started"'


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    name: str
    listen: str
    #: Its Prometheus endpoint (REGROUP_METRICS_LISTEN); empty: the environment's, unchanged.
    metrics_listen: str = ""


def replica_specs(listen: str, count: int, metrics_listen: str | None = None) -> list[ReplicaSpec]:
    """`count` replicas named replica-1.. on consecutive ports from `listen` (host:port),
    and, given `metrics_listen`, metrics endpoints on consecutive ports from it too
    (unless it is "off" or port 0, which every replica then shares as it is)."""
    host, _, port = listen.rpartition(":")
    return [
        ReplicaSpec(f"replica-{i + 1}", f"{host}:{int(port) + i}", _nth_metrics(metrics_listen, i))
        for i in range(count)
    ]


def _nth_metrics(metrics_listen: str | None, i: int) -> str:
    if metrics_listen is None:
        return ""
    host, _, port = metrics_listen.rpartition(":")
    if metrics_listen == "off" or int(port) == 0:
        return metrics_listen
    return f"{host}:{int(port) + i}"


def replica_environment(base: Mapping[str, str], spec: ReplicaSpec, dsn: str) -> dict[str, str]:
    """`base` with this replica's database, address and name (each advertises its own address)."""
    env = {k: v for k, v in base.items() if k != "REGROUP_ADVERTISED_ADDRESS"}
    env.update(
        DATABASE_URL=dsn,
        REGROUP_LISTEN=spec.listen,
        REGROUP_REPLICA_ID=spec.name,
        PYTHONUNBUFFERED="1",  # its lines come out as it prints them
    )
    if spec.metrics_listen:
        env["REGROUP_METRICS_LISTEN"] = spec.metrics_listen
    return env


def _die_with_parent() -> None:
    """In the replica before exec: a launcher killed outright stops its replicas too (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with code {code}"


class Cluster:
    def __init__(self, specs: Sequence[ReplicaSpec], env: Mapping[str, str], out: BinaryIO) -> None:
        self.specs = list(specs)
        self.env = dict(env)
        self.out = out
        self.lease_ms = env.get("REGROUP_LEASE_MS", "")
        self._width = max(len("cluster"), *(len(s.name) for s in self.specs))
        self._processes: dict[str, asyncio.subprocess.Process] = {}
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self._started: set[str] = set()
        self._changed = asyncio.Event()
        self._announced = False
        self._restart = False
        self._stopping = False
        self._killed = False
        #: Replicas running when the stop was asked for that did not stop cleanly.
        self._failed: list[str] = []

    def say(self, text: str, name: str = "cluster") -> None:
        for line in text.splitlines():
            self.out.write(f"{name.ljust(self._width)} | {line}\n".encode())
        self.out.flush()

    def running(self) -> list[str]:
        return [name for name, p in self._processes.items() if p.returncode is None]

    async def start(self, spec: ReplicaSpec) -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "regroup.server",
            "serve",
            env=replica_environment(self.env, spec, self.env["DATABASE_URL"]),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            limit=_LINE_LIMIT,
            # Out of the terminal's process group: Ctrl-C reaches the launcher, which passes it on.
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._processes[spec.name] = process
        self._started.discard(spec.name)
        self._pumps[spec.name] = asyncio.create_task(self._pump(spec, process))
        self.say(f"{spec.name} starting on {spec.listen}, pid {process.pid}")

    async def _pump(self, spec: ReplicaSpec, process: asyncio.subprocess.Process) -> None:
        """Copies the replica's lines, prefixed with its name, until it exits."""
        assert process.stdout is not None
        prefix = f"{spec.name.ljust(self._width)} | ".encode()
        while True:
            try:
                line = await process.stdout.readline()
            except ValueError:  # a line beyond the limit: what was read of it
                line = await process.stdout.read(_LINE_LIMIT)
            if not line:
                break
            self.out.write(prefix + line + (b"" if line.endswith(b"\n") else b"\n"))
            self.out.flush()
            if _STARTED in line and spec.name not in self._started:
                self._started.add(spec.name)
                if len(self._started) == len(self.specs):
                    self._serving()
        await process.wait()
        self._changed.set()

    def _serving(self) -> None:
        pids = {name: p.pid for name, p in self._processes.items()}
        if self._announced:
            self.say("every replica serves again: " + ", ".join(f"{n} pid {pid}" for n, pid in pids.items()))
            return
        self._announced = True
        lines = [f"{len(self.specs)} replicas serve on one Postgres ({self.env['DATABASE_URL']}):"]
        lines += [f"  {s.name}  {s.listen}  pid {pids[s.name]}" for s in self.specs]
        lease = f"{self.lease_ms} ms" if self.lease_ms else "REGROUP_LEASE_MS, 10 s by default"
        lines += [
            "Any of these addresses serves any group: a replica forwards a group's calls to the",
            "replica that coordinates it (FindCoordinator names that one).",
            f"Kill one to try a failover, e.g. kill -9 {pids[self.specs[-1].name]}: its groups move to",
            f"the others once its lease expires ({lease}); kill -HUP {os.getpid()} starts it again.",
            "Ctrl-C stops every replica gracefully (each hands its groups over at once).",
        ]
        self.say("\n".join(lines))

    def _signalled(self, sig: signal.Signals) -> None:
        if sig == signal.SIGHUP:
            if not self._stopping:
                self._restart = True
                self._changed.set()
            return
        if not self._stopping:
            self._stopping = True
            self.say(f"{sig.name}: stopping {', '.join(self.running()) or 'nothing'} (SIGTERM)")
            self._send(signal.SIGTERM)
        elif not self._killed:
            self._killed = True
            self.say(f"{sig.name} again: killing {', '.join(self.running())} (SIGKILL)")
            self._send(signal.SIGKILL)

    def _send(self, sig: signal.Signals) -> None:
        for name in self.running():
            with contextlib.suppress(ProcessLookupError):
                self._processes[name].send_signal(sig)

    async def run(self, finish: Callable[[], Awaitable[None]] | None = None) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self._signalled, sig)
        try:
            for spec in self.specs:
                await self.start(spec)
            reported: set[int] = set()
            while True:
                for name, process in list(self._processes.items()):
                    code = process.returncode
                    if code is None or process.pid in reported:
                        continue
                    reported.add(process.pid)
                    await self._pumps[name]
                    if self._stopping:
                        self.say(f"{name} {_exit_text(code)}")
                        if code != 0:
                            self._failed.append(name)
                    else:
                        self.say(
                            f"{name} (pid {process.pid}) {_exit_text(code)}; the others take its groups "
                            f"over once its lease expires. kill -HUP {os.getpid()} starts it again."
                        )
                if not self.running():
                    break
                if self._restart:
                    self._restart = False
                    for spec in self.specs:
                        if spec.name not in self.running():
                            await self.start(spec)
                await self._changed.wait()
                self._changed.clear()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            self._send(signal.SIGKILL)  # only if this loop failed: nothing runs otherwise
        if not self._stopping:
            self.say("every replica has exited")
            return 1
        if self._failed:
            self.say(f"{', '.join(self._failed)} did not stop cleanly")
            return 1
        if finish is not None:
            await finish()  # the database the replicas shared: "stopped" means all of it
        self.say("stopped")
        return 0


#: How long the launcher waits for the embedded Postgres to stop once every replica has.
LAUNCHER_POSTGRES_WAIT_S = 30.0


async def run_cluster(settings: Settings, flags: Mapping[str, str], replicas: int = DEFAULT_REPLICAS) -> int:
    """Starts Postgres (embedded unless DATABASE_URL), migrates it, runs `replicas` replicas."""
    migrations = find_migrations(settings)
    dsn, embedded = await resolve_database_url(settings)

    async def stop_postgres() -> None:
        nonlocal embedded
        keeper, embedded = embedded, None
        # Its replicas are gone: the launcher may wait for Postgres' shutdown checkpoint.
        await close_embedded(keeper, LAUNCHER_POSTGRES_WAIT_S)

    try:
        await run_migrations(dsn, migrations)
        env = {**os.environ, **flags, "DATABASE_URL": dsn}
        specs = replica_specs(settings.listen, replicas, settings.metrics_listen)
        cluster = Cluster(specs, env, sys.stdout.buffer)
        return await cluster.run(stop_postgres)
    finally:
        await stop_postgres()
