# The part of google-re2 (module `re2`) that regroup uses. The package ships no type
# hints; tools/typecheck.py puts typings/ on mypy's path so that this stub types it.

class error(Exception): ...

class Options:
    #: Bytes the compiled program (two thirds) and the DFA cache (the rest) may use.
    max_mem: int
    #: Whether RE2 itself logs compile errors to stderr.
    log_errors: bool
    #: Parses groups as non-capturing: a match reports no submatch spans.
    never_capture: bool
    def __init__(self) -> None: ...

class _Match:
    def group(self, group: int = 0) -> str | bytes: ...

class _Regexp:
    @property
    def pattern(self) -> str: ...
    @property
    def programsize(self) -> int: ...
    # A str text is matched as its UTF-8 encoding; spans are then given in characters.
    def fullmatch(
        self, text: str | bytes, pos: int | None = None, endpos: int | None = None
    ) -> _Match | None: ...

def compile(pattern: str, options: Options | None = None) -> _Regexp: ...
