"""Subscription regexes (reconciler/subscription.py): RE2 keeps matching linear.

Prints, per pathological pattern (catastrophic for a backtracking engine), the time
to compile it and match the longest legal topic names, against a plain pattern of
the same names in the same run (a ratio, because these machines are noisy); the
time to refuse a pattern over the memory budget; and a large admitted program
matching a registry of long names. The unit tests check what each returns, never
how long it takes.
"""

from __future__ import annotations

import argparse
import random
import string
import time
from typing import Any

from bench.report import figure, table
from regroup.reconciler import subscription
from regroup.reconciler.errors import InvalidRegularExpression
from regroup.reconciler.subscription import compile_regex
from regroup.reconciler.topics import MAX_TOPIC_NAME_LENGTH

PATHOLOGICAL = ("(a*)*b", "(a+)+b", "(a|a)*b", "(a|aa)+$b", "(x+x+)+y", "(.*a){12}b")
OVER_BUDGET = ("\\p{L}{100}", "\\p{L}{0,249}", "(?i)\\pL{80}[^a]{1000}")
NAMES = [c * MAX_TOPIC_NAME_LENGTH for c in "ax"] + ["a" * (MAX_TOPIC_NAME_LENGTH - 1) + "c"]


def _best_ms(fn: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _match(pattern: str) -> None:
    subscription._compile.cache_clear()  # the first heartbeat's cost: compile, then match
    compiled = compile_regex(pattern)
    for name in NAMES:
        compiled.fullmatch(name)


def _refuse(pattern: str) -> None:
    subscription._compile.cache_clear()
    try:
        compile_regex(pattern)
    except InvalidRegularExpression:
        return
    raise AssertionError(f"{pattern} was admitted")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 20
    baseline = _best_ms(lambda: _match("a+|x+"), repeats)
    rows = []
    for pattern in PATHOLOGICAL:
        ms = _best_ms(lambda p=pattern: _match(p), repeats)
        rows.append((pattern, ms, ms / baseline))
    refusals = [(p, _best_ms(lambda p=p: _refuse(p), repeats)) for p in OVER_BUDGET]
    rng = random.Random(7)
    registry = [
        "".join(rng.choices(string.ascii_lowercase + ".-", k=MAX_TOPIC_NAME_LENGTH)) for _ in range(300)
    ]
    large = compile_regex("(?:.{0,10}){100}")
    large_ms = _best_ms(lambda: [large.fullmatch(n) for n in registry], repeats)
    table("pathological patterns (compile + 3 longest names)", ["pattern", "ms", "vs plain"], rows)
    table("over the memory budget: refused in", ["pattern", "ms"], refusals)
    print(f"\nlarge admitted program, 300 names of {MAX_TOPIC_NAME_LENGTH}: {large_ms:.1f} ms")
    return figure(
        "regex",
        plain_ms=round(baseline, 3),
        pathological_worst_ratio=round(max(r[2] for r in rows), 1),
        patterns=len(rows),
        refusal_worst_ms=round(max(ms for _, ms in refusals), 2),
        refusals=len(refusals),
        large_program_300_names_ms=round(large_ms, 1),
    )


if __name__ == "__main__":
    main()
