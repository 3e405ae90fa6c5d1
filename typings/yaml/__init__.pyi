# The part of PyYAML the server uses (server/aclfile.py); PyYAML ships no type hints.
from typing import Any

__version__: str

class YAMLError(Exception): ...

def safe_load(stream: str | bytes) -> Any: ...
