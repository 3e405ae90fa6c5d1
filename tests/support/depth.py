"""How deep the randomized tests explore: the hypothesis profile of this run.

- `ci`, chosen by `CI=true` (which CI sets): every test at the depth it names, as before;
- `dev`, otherwise: a fifth of it (at least 10 examples, and state machines at half their
  steps), so that `make test-unit` gives a developer an answer in about a minute.

`REGROUP_HYPOTHESIS_PROFILE=ci` (or `dev`) chooses one explicitly. Tests name their depth
through `examples(n)` and `steps(n)`, so that the profile scales what they ask for
(hypothesis' own profiles only set defaults that a test's `@settings` overrides).
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILES = {"ci": (1.0, 1.0), "dev": (0.2, 0.5)}


def _profile() -> str:
    chosen = os.environ.get("REGROUP_HYPOTHESIS_PROFILE", "").strip().lower()
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(f"REGROUP_HYPOTHESIS_PROFILE must be one of {sorted(PROFILES)}, got {chosen!r}")
        return chosen
    return "ci" if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes") else "dev"


PROFILE = _profile()
EXAMPLES_SCALE, STEPS_SCALE = PROFILES[PROFILE]
#: Hypothesis' default of 100 examples, scaled, for the tests that name no depth.
settings.register_profile(PROFILE, max_examples=max(10, round(100 * EXAMPLES_SCALE)))
settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """`n` examples at the `ci` depth, as many as this run's profile gives."""
    return max(min(n, 10), round(n * EXAMPLES_SCALE))


def steps(n: int) -> int:
    """`n` steps per state machine example at the `ci` depth, scaled likewise."""
    return max(min(n, 10), round(n * STEPS_SCALE))


def describe() -> str:
    return (
        f"hypothesis profile: {PROFILE} (examples x{EXAMPLES_SCALE:g}, state machine steps x{STEPS_SCALE:g})"
    )
