"""Runs every benchmark: `python -m bench` (quick) or `python -m bench --full`.

Each benchmark prints a table and one JSON line per figure; the JSON lines
are also kept in bench/results/ together with the convergence plots.
"""

from __future__ import annotations

import argparse
import importlib
import time

from bench.report import cpu_times, figure, steal_percent

BENCHMARKS = (
    "steady",
    "convergence",
    "assignors",
    "stall",
    "memory",
    "steps",
    "regex",
    "replicas",
    "streams",
    "failover",
    "restart",
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true", help="the full-size grid (tens of minutes)")
    parser.add_argument("only", nargs="*", help=f"run only these, of {', '.join(BENCHMARKS)}")
    args = parser.parse_args()
    unknown = set(args.only) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmarks {sorted(unknown)}; choose from {', '.join(BENCHMARKS)}")
    for name in args.only or BENCHMARKS:
        started, ticks = time.monotonic(), cpu_times()
        print(f"\n=== {name} ({'full' if args.full else 'quick'}) ===", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main([] if args.full else ["--quick"])
        steal = steal_percent(ticks)
        print(f"=== {name} took {time.monotonic() - started:.0f} s ===", flush=True)
        if steal is not None:
            figure(name, host_steal_percent=steal)  # the machine's neighbours, for reading the figures


if __name__ == "__main__":
    main()
