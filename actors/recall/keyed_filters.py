"""What a keyed search matches: conditions on values, namespace patterns, value text."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from actormem.actors.errors import MemoryInputError

__all__ = ("matches_filter", "namespace_matches", "value_text")

_OPERATORS: Final = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def matches_filter(value: Mapping[str, Any], conditions: Mapping[str, Any]) -> bool:
    """Whether ``value`` meets every condition: a key's value equals the given one,
    or, given ``{"$op": x}`` with op one of eq, ne, gt, gte, lt, lte, compares so.
    A nested dict without operators matches the nested value's keys the same way.

    Raises:
        MemoryInputError: an unknown operator.
    """
    for name, wanted in conditions.items():
        have = value.get(name)
        if (
            isinstance(wanted, dict)
            and wanted
            and all(isinstance(k, str) and k.startswith("$") for k in wanted)
        ):
            if not all(_compare(have, op, arg) for op, arg in wanted.items()):
                return False
        elif isinstance(wanted, dict) and isinstance(have, dict):
            if not matches_filter(have, wanted):
                return False
        elif have != wanted:
            return False
    return True


def _compare(have: Any, op: str, arg: Any) -> bool:
    if op not in _OPERATORS:
        raise MemoryInputError(f"unknown filter operator {op!r}: one of {', '.join(_OPERATORS)}")
    if op == "$eq":
        return bool(have == arg)
    if op == "$ne":
        return bool(have != arg)
    try:
        match op:
            case "$gt":
                return bool(have > arg)
            case "$gte":
                return bool(have >= arg)
            case "$lt":
                return bool(have < arg)
            case _:
                return bool(have <= arg)
    except TypeError:  # a missing key, or values of kinds that do not compare
        return False


def namespace_matches(
    namespace: tuple[str, ...], pattern: tuple[str, ...], *, suffix: bool
) -> bool:
    """Whether ``namespace`` starts (or, with ``suffix``, ends) with ``pattern``.

    A ``*`` in the pattern matches any label.
    """
    if len(pattern) > len(namespace):
        return False
    part = namespace[len(namespace) - len(pattern) :] if suffix else namespace[: len(pattern)]
    return all(p in ("*", n) for p, n in zip(pattern, part, strict=True))


def value_text(value: Any) -> str:
    """The strings of a JSON value (keys and numbers left out), joined by spaces."""
    return " ".join(_strings(value))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
