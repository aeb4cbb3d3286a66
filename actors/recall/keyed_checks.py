"""The checks a keyed entry's inputs pass: namespace, key, value, ttl and paging.

Their limits are named constants here; :mod:`.keyed` applies them on every command.
"""

from __future__ import annotations

import math
from typing import Final

import msgspec

from actormem.actors.errors import MemoryInputError

__all__ = (
    "MAX_KEY_CHARS",
    "MAX_LABEL_CHARS",
    "MAX_LIMIT",
    "MAX_NAMESPACE_DEPTH",
    "MAX_VALUE_BYTES",
    "check_key",
    "check_limit",
    "check_namespace",
    "check_ttl",
    "check_value",
    "shown",
)

#: The most labels a namespace has.
MAX_NAMESPACE_DEPTH: Final = 16
#: The longest label of a namespace.
MAX_LABEL_CHARS: Final = 256
#: The longest key.
MAX_KEY_CHARS: Final = 1024
#: The largest value, as JSON.
MAX_VALUE_BYTES: Final = 65_536
#: The most entries a search or a namespace listing returns at once.
MAX_LIMIT: Final = 1000


def check_namespace(namespace: object, what: str = "namespace", *, empty: bool = False) -> None:
    """Check a namespace (or, with ``empty``, a prefix that may have no label).

    Raises:
        MemoryInputError: it is not a list of 1..16 non-empty labels of at most 256
            printable characters.
    """
    if not isinstance(namespace, tuple | list) or not all(isinstance(x, str) for x in namespace):
        raise MemoryInputError(f"{what} must be a tuple of strings, got {shown(namespace)}")
    if not namespace and not empty:
        raise MemoryInputError(f"{what} must have at least one label")
    if len(namespace) > MAX_NAMESPACE_DEPTH:
        raise MemoryInputError(f"{what} has {len(namespace)} labels, at most {MAX_NAMESPACE_DEPTH}")
    for label in namespace:
        if not label or len(label) > MAX_LABEL_CHARS or not label.isprintable():
            raise MemoryInputError(
                f"{what} label {label[:40]!r} must be 1..{MAX_LABEL_CHARS} printable characters"
            )


def check_key(key: object) -> None:
    """Check a key.

    Raises:
        MemoryInputError: it is not a non-empty string of at most 1024 characters.
    """
    if not isinstance(key, str) or not key:
        raise MemoryInputError(f"key must be a non-empty string, got {shown(key)}")
    if len(key) > MAX_KEY_CHARS:
        raise MemoryInputError(f"key is {len(key)} characters long, at most {MAX_KEY_CHARS}")


def _check_json(value: object, path: str) -> None:
    """Raise MemoryInputError unless ``value`` is JSON (and finite)."""
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MemoryInputError(f"value{path} is {value}, which JSON cannot hold")
        return
    if isinstance(value, list | tuple):
        for n, item in enumerate(value):
            _check_json(item, f"{path}[{n}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise MemoryInputError(f"value{path} has a key {shown(k)}: JSON keys are strings")
            _check_json(item, f"{path}.{k}")
        return
    raise MemoryInputError(f"value{path} is {shown(value)}, not JSON")


def check_value(value: object) -> None:
    """Check a value.

    Raises:
        MemoryInputError: it is not a JSON object, or is larger than 64 KiB as JSON.
    """
    if not isinstance(value, dict):
        raise MemoryInputError(f"value must be a JSON object (a dict), got {shown(value)}")
    _check_json(value, "")
    size = len(msgspec.json.encode(value))
    if size > MAX_VALUE_BYTES:
        raise MemoryInputError(f"value is {size} bytes as JSON, at most {MAX_VALUE_BYTES}")


def check_limit(limit: object, offset: object) -> None:
    """Check a search's or listing's paging.

    Raises:
        MemoryInputError: ``limit`` is not an int within 1..1000, or ``offset`` not an int >= 0.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise MemoryInputError(f"limit must be an int within 1..{MAX_LIMIT}, got {shown(limit)}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise MemoryInputError(f"offset must be an int >= 0, got {shown(offset)}")


def shown(value: object) -> str:
    """``value`` as an error message shows it: its repr, cut at 60 characters."""
    text = repr(value)
    return f"{text[:60]}... ({type(value).__name__})" if len(text) > 60 else text


def check_ttl(ttl: object) -> None:
    """Check a time to live.

    Raises:
        MemoryInputError: it is neither None nor a positive finite number of seconds.
    """
    if ttl is None:
        return
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 < ttl < math.inf:
        raise MemoryInputError(
            f"ttl must be a positive number of seconds or None, got {shown(ttl)}"
        )
