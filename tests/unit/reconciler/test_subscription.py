"""Subscription regexes: RE2 (linear time, whole-name match), and stored regexes that no longer compile."""

from __future__ import annotations

import random
import string
from dataclasses import replace

import pytest

from regroup.reconciler import Topic, TopicsImage, replay_all
from regroup.reconciler.errors import ErrorCode, InvalidRegularExpression
from regroup.reconciler.records import MemberMetadataRecord
from regroup.reconciler.subscription import (
    MAX_REGEX_LENGTH,
    compile_regex,
    group_topics,
    member_topic_ids,
    stored_regex,
    subscribes_to_any,
)
from regroup.reconciler.topics import MAX_TOPIC_NAME_LENGTH
from tests.support.engine import EngineHarness, beat, join

#: Catastrophic for a backtracking engine: with Python's `re`, each pattern takes over a
#: second against 24 to 26 characters (measured: `(a*)*b` 1.0 s at 24), twice that per
#: extra character; a 249-character name would take longer than the universe has existed.
PATHOLOGICAL = ["(a*)*b", "(a+)+b", "(a|a)*b", "(a|aa)+$b", "(x+x+)+y", "(.*a){12}b"]


@pytest.mark.parametrize("pattern", PATHOLOGICAL)
def test_pathological_pattern_compiles_and_matches_in_linear_time(pattern: str) -> None:
    # The longest legal topic names, made of what the pattern repeats, and failing only at the end.
    names = [c * MAX_TOPIC_NAME_LENGTH for c in "ax"] + ["a" * (MAX_TOPIC_NAME_LENGTH - 1) + "c"]

    compiled = compile_regex(pattern)
    matched = [bool(compiled.fullmatch(name)) for name in names]

    # Answered at all: with a backtracking engine this would not return. How long it takes
    # (well under a millisecond, about the time of a plain pattern) is bench/regex.py's figure.
    assert matched == [False, False, False]


def test_admitted_pattern_with_a_large_program_matches_a_registry_of_long_names_quickly() -> None:
    # About 9,000 instructions, hundreds of them live at once: with a DFA cache too small for
    # it, RE2 falls back to its NFA at 5-10 ms per name (seconds for this registry).
    rng = random.Random(7)
    names = ["".join(rng.choices(string.ascii_lowercase + ".-", k=MAX_TOPIC_NAME_LENGTH)) for _ in range(300)]

    compiled = compile_regex("(?:.{0,10}){100}")
    matched = sum(1 for name in names if compiled.fullmatch(name))

    # The time (milliseconds for the registry) is bench/regex.py's figure.
    assert matched == len(names)


def test_regex_matches_whole_names_only() -> None:
    image = TopicsImage([Topic("1", "foo", 1), Topic("2", "foobar", 1), Topic("3", "barfoo", 1)])

    assert member_topic_ids(image, (), "foo.*") == {"1", "2"}
    assert member_topic_ids(image, (), "fo") == frozenset()
    assert member_topic_ids(image, (), "(?i)BAR.*|foo") == {"1", "3"}


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("(foo)\\1", id="backreference"),
        pytest.param("(?P<t>foo)(?P=t)", id="named-backreference"),
        pytest.param("(?=foo)foo", id="lookahead"),
        pytest.param("(?<=x)foo", id="lookbehind"),
        pytest.param("fo++", id="possessive"),
        pytest.param("(?>foo)", id="atomic-group"),
    ],
)
def test_python_only_constructs_are_refused_with_the_syntax_named(pattern: str) -> None:
    with pytest.raises(InvalidRegularExpression) as raised:
        compile_regex(pattern)

    assert raised.value.code is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert raised.value.message.startswith(
        f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: "
    )
    assert raised.value.message.endswith(
        "Regexes use RE2 syntax, which has no backreferences or lookaround assertions "
        "(https://github.com/google/re2/wiki/Syntax)."
    )


@pytest.mark.parametrize("pattern", ["\\p{L}{100}", "\\p{L}{0,249}", "(?i)\\pL{80}[^a]{1000}"])
def test_program_over_the_memory_budget_is_refused_quickly(pattern: str) -> None:
    with pytest.raises(InvalidRegularExpression) as raised:
        compile_regex(pattern)

    assert raised.value.message == (
        f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: its compiled program "
        "exceeds the 1 MiB memory budget; use fewer or smaller counted repetitions ({n}) and narrower "
        "character classes."
    )
    # Refused by the program check (about 10 ms, bench/regex.py); under RE2's default 8 MiB
    # budget these took 50-200 ms to compile.


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        (".{0,1000}", "t" * MAX_TOPIC_NAME_LENGTH),
        ("[a-z0-9._-]{0,249}", "orders.eu-1"),
        ("(?:.{0,249}-){4}.*", "a-b-c-d-e"),
        ("|".join(f"topic-{i:04d}" for i in range(90)), "topic-0089"),
    ],
)
def test_large_patterns_of_ordinary_classes_fit_the_budget(pattern: str, name: str) -> None:
    # Real topic patterns are far smaller than these (thousands of RE2 instructions each).
    assert compile_regex(pattern).fullmatch(name)


def test_regex_longer_than_the_limit_is_refused_without_being_echoed() -> None:
    pattern = "a" * (MAX_REGEX_LENGTH + 1)

    with pytest.raises(InvalidRegularExpression) as raised:
        compile_regex(pattern)

    assert raised.value.message == "SubscribedTopicRegex is longer than 1000 characters (1001)."


def test_lone_surrogate_is_refused_with_an_encodable_message() -> None:
    with pytest.raises(InvalidRegularExpression) as raised:
        compile_regex("foo\ud800")

    assert raised.value.message.startswith(
        "SubscribedTopicRegex `foo\\ud800` is not a valid regular expression: it is not valid Unicode."
    )
    raised.value.message.encode()


# -- regexes stored by an older version (Python `re`) that RE2 refuses -------------------------

#: Matched `foofoo` under Python's `re`; RE2 has no backreferences.
STORED = "(foo)\\1"


def test_stored_regex_that_no_longer_compiles_matches_nothing() -> None:
    image = TopicsImage([Topic("ff", "foofoo", 2), Topic("b", "bar", 1)])

    assert stored_regex(STORED) is None
    assert member_topic_ids(image, ("bar",), STORED) == {"b"}
    assert [t.topic_id for t in group_topics(image, {"bar": 1}, {STORED: 1, "foo.*": 1})] == ["b", "ff"]
    assert group_topics(image, {}, {STORED: 2}) == []


def test_group_with_a_stored_regex_that_no_longer_compiles_keeps_working() -> None:
    h = EngineHarness()
    h.create_topic("foofoo", 2)
    h.create_topic("bar", 2)
    h.heartbeat(join("g", "a", ["bar"], subscribed_topic_regex="foo.*"))
    assert set(h.groups["g"].target_of("a")) == {"bar-id", "foofoo-id"}
    # As the store loads a member that an older version accepted.
    member = h.groups["g"].members["a"]
    record = MemberMetadataRecord(member.member_id, replace(member.metadata, subscribed_topic_regex=STORED))
    group = replay_all(h.groups["g"], "g", (record,))
    assert group is not None and group.subscribed_regexes() == {STORED: 1}
    h.groups["g"] = group
    assert not subscribes_to_any(group, ["foofoo"])
    assert subscribes_to_any(group, ["bar"])

    # A member joins: the target is computed over the group's regexes, the stored one included.
    h.heartbeat(join("g", "b", ["foofoo"]))
    h.advance(h.config.assignment_interval_ms)

    group = h.groups["g"]
    assert group.target_of("a") == {"bar-id": frozenset({0, 1})}
    assert group.target_of("b") == {"foofoo-id": frozenset({0, 1})}
    # A topic is deleted: the group's subscribed topics and metadata hash are computed again.
    epoch = group.group_epoch
    h.delete_topic("bar")
    assert group.group_epoch == epoch + 1
    for _ in range(3):  # a revokes foofoo, then b gets it
        for member in ("a", "b"):
            state = group.members[member]
            h.heartbeat(beat("g", member, state.member_epoch, state.assigned))
    assert {m.member_id: (m.member_epoch, m.assigned) for m in group.members.values()} == {
        "a": (epoch + 1, {}),
        "b": (epoch + 1, {"foofoo-id": frozenset({0, 1})}),
    }

    # Sending the stored regex again is refused: new regexes are validated with RE2.
    with pytest.raises(InvalidRegularExpression):
        h.heartbeat(beat("g", "a", epoch + 1, subscribed_topic_regex=STORED))
