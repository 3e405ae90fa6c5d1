"""The code blocks of the project's markdown, and how tests/docs runs each one.

Every fenced block is run exactly as written, by its language:

- ``python``: as a script, twice in a row (a reader runs a snippet again), against
  a real regroup server whose address is in ``REGROUP_ADDRESS``;
- ``sh``, ``bash``, ``shell``: in bash with ``-e -o pipefail``; ``console``: its
  ``$ `` lines, the rest being their output;
- ``sql``: each statement on a scratch Postgres database; a statement with ``$1``
  parameters is prepared (parsed and planned) as an application would before
  binding values.

A block that cannot run that way says so in an HTML comment right before its fence
(blank lines between are allowed); it is invisible on the rendered page:

    <!-- doc-test: skip reason="needs a Kubernetes cluster" -->
    <!-- doc-test: output -->                  (what a command printed, not commands)
    <!-- doc-test: dry-run reason="..." -->    (make commands, checked with make -n)
    <!-- doc-test: requires commands="grpc_java_plugin" -->
                                               (runs where these are on PATH, else skipped)
    <!-- doc-test: once reason="..." -->       (a python block run once, not twice; with
                                               commands="...", only where they are on PATH)
    <!-- doc-test: setup -->                   (README.md only: a sh block a reader runs
                                               once per terminal, activating .venv)

Shell blocks run with none of the project's tools on PATH, as in a new terminal:
README.md's setup blocks (activating ``.venv``) run first in the same shell, as
the reader ran them, so a block that needs grpcurl or regroup runs only when the
README says how to get them.

A block in a language without a runner and without a marker is an error, and so
are a marker that stands before no fence, an unknown marker, and a skip, dry-run
or once without a reason: new docs cannot slip through unrun.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

PYTHON = frozenset({"python", "py", "python3"})
SHELL = frozenset({"sh", "bash", "shell"})
CONSOLE = frozenset({"console", "shell-session"})
SQL = frozenset({"sql"})
RUNNABLE = PYTHON | SHELL | CONSOLE | SQL

#: Marker kinds and the options each requires.
KINDS: dict[str, frozenset[str]] = {
    "skip": frozenset({"reason"}),
    "output": frozenset(),
    "dry-run": frozenset({"reason"}),
    "requires": frozenset({"commands"}),
    "once": frozenset({"reason"}),
    "setup": frozenset(),
}
#: Options a kind may take besides those it requires.
OPTIONAL: dict[str, frozenset[str]] = {"once": frozenset({"commands"})}
#: The only file whose setup blocks count: where readers start.
SETUP_FILE = "README.md"

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER_START = re.compile(r"^\s*<!--\s*doc-test\b")
_MARKER = re.compile(r'^\s*<!--\s*doc-test:\s*(?P<kind>[a-z-]+)(?P<options>(?:\s+[a-z]+="[^"]*")*)\s*-->\s*$')
_OPTION = re.compile(r'(?P<key>[a-z]+)="(?P<value>[^"]*)"')


class DocTestError(Exception):
    """The markdown breaks the rules above; the message says where and how to fix it."""


@dataclass(frozen=True)
class Marker:
    kind: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return self.options.get("reason", "")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str  # first word of the info string, lower case; "" when there is none
    code: str
    marker: Marker | None = None

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def markdown_files(root: Path = ROOT) -> list[Path]:
    """Every markdown file of the project: outside hidden folders, build output and node_modules."""
    skipped = {"build", "node_modules"}
    return sorted(
        p
        for p in root.rglob("*.md")
        if not any(part.startswith(".") or part in skipped for part in p.relative_to(root).parts[:-1])
    )


def parse_marker(line: str, where: str) -> Marker:
    match = _MARKER.match(line)
    if match is None:
        raise DocTestError(
            f'{where}: malformed marker {line.strip()!r}; write <!-- doc-test: KIND key="value" -->'
        )
    kind = match["kind"]
    if kind not in KINDS:
        raise DocTestError(f"{where}: unknown marker kind {kind!r}; one of {', '.join(sorted(KINDS))}")
    options = {m["key"]: m["value"] for m in _OPTION.finditer(match["options"])}
    unknown = set(options) - KINDS[kind] - OPTIONAL.get(kind, frozenset())
    if unknown:
        raise DocTestError(f"{where}: {kind} takes no option {', '.join(sorted(unknown))}")
    missing = [key for key in sorted(KINDS[kind]) if not options.get(key, "").strip()]
    if missing:
        needed = ", ".join(f'{key}="..."' for key in missing)
        raise DocTestError(f"{where}: {kind} needs {needed}")
    return Marker(kind, options)


def parse(text: str, path: str) -> list[Block]:
    """The fenced blocks of one markdown text, each with the marker right before it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: tuple[int, Marker] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = _FENCE.match(line)
        if opening is None:
            if _MARKER_START.match(line):
                if pending is not None:
                    raise DocTestError(f"{path}:{pending[0]}: marker before no fence")
                pending = (i + 1, parse_marker(line, f"{path}:{i + 1}"))
            elif line.strip() and pending is not None:
                raise DocTestError(f"{path}:{pending[0]}: marker before no fence (text follows it)")
            i += 1
            continue
        indent, fence = len(opening["indent"].expandtabs()), opening["fence"]
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            body.append(lines[j])
            j += 1
        if j == len(lines):
            raise DocTestError(f"{path}:{i + 1}: a fence that is never closed")
        info = opening["info"].strip().split()
        language = info[0].lower().strip("{}.") if info else ""
        code = "\n".join(_dedent(body, indent)) + "\n"
        blocks.append(Block(path, i + 1, language, code, pending[1] if pending else None))
        pending = None
        i = j + 1
    if pending is not None:
        raise DocTestError(f"{path}:{pending[0]}: marker before no fence (end of file)")
    return blocks


def _dedent(body: list[str], indent: int) -> Iterator[str]:
    """A fence indented in a list item: its lines lose that indentation (CommonMark)."""
    for line in body:
        expanded = line.expandtabs()
        strip = min(indent, len(expanded) - len(expanded.lstrip(" ")))
        yield expanded[strip:]


def check_runnable(block: Block) -> None:
    """Raises DocTestError for a block the harness would otherwise have to ignore silently."""
    marker = block.marker
    if marker is None:
        if block.language not in RUNNABLE:
            lang = block.language or "(no language)"
            raise DocTestError(
                f"{block.id}: no runner for a {lang} block; run it another way, or mark it right before "
                'its fence: <!-- doc-test: skip reason="why it cannot run here" --> '
                "(or <!-- doc-test: output --> for printed output)"
            )
        return
    if marker.kind == "dry-run" and block.language not in SHELL:
        raise DocTestError(f"{block.id}: dry-run checks make commands in sh blocks, not {block.language}")
    if marker.kind == "once" and block.language not in PYTHON:
        raise DocTestError(f"{block.id}: once applies to python blocks (the others run once anyway)")
    if marker.kind == "requires" and block.language not in RUNNABLE:
        raise DocTestError(f"{block.id}: requires on a {block.language} block, which has no runner")
    if marker.kind == "setup" and (block.language not in SHELL or block.path != SETUP_FILE):
        raise DocTestError(f"{block.id}: setup marks sh blocks of {SETUP_FILE}, where readers start")


def setup_code(blocks: list[Block | DocTestError]) -> str:
    """What every shell block runs after: the setup blocks of README.md, in their order."""
    return "".join(
        b.code
        for b in blocks
        if isinstance(b, Block) and b.path == SETUP_FILE and b.marker is not None and b.marker.kind == "setup"
    )


def required_commands(block: Block) -> list[str]:
    """The commands a block runs only where they are installed (requires, once commands=)."""
    if block.marker is None or block.marker.kind not in {"requires", "once"}:
        return []
    return block.marker.options.get("commands", "").split()


def make_commands(block: Block) -> list[list[str]]:
    """The argument lists of a dry-run block's make commands (comments dropped)."""
    commands = []
    for line in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] != "make":
            raise DocTestError(f"{block.id}: dry-run checks make commands only, not {line.strip()!r}")
        commands.append(words[1:])
    return commands


def console_commands(block: Block) -> str:
    """The commands of a console block: its `$ ` lines and their `\\` continuations."""
    out: list[str] = []
    continued = False
    for line in block.code.splitlines():
        if continued or line.startswith("$ "):
            out.append(line if continued else line[2:])
            continued = line.endswith("\\")
    if not out:
        raise DocTestError(f"{block.id}: a console block without `$ ` commands; mark it output")
    return "\n".join(out) + "\n"


def sql_statements(code: str) -> list[str]:
    """Statements split at semicolons that end a line; comment-only pieces dropped."""
    statements = []
    for piece in re.split(r";[ \t]*(?:--[^\n]*)?(?:\n|$)", code):
        meaningful = [
            line for line in piece.splitlines() if line.strip() and not line.strip().startswith("--")
        ]
        if meaningful:
            statements.append(piece.strip())
    return statements


def collect(root: Path = ROOT) -> list[Block | DocTestError]:
    """Every block of every markdown file; a file that breaks the rules gives its error instead."""
    out: list[Block | DocTestError] = []
    for path in markdown_files(root):
        rel = str(path.relative_to(root))
        try:
            out += parse(path.read_text(), rel)
        except DocTestError as error:
            out.append(error)
    return out
