"""The types that cross processes, declared without loading a transport.

A domain package declares its tagged message types, and the errors an asker
gets back as themselves, when it is imported. Declaring loads no Redis module.
The Redis transport's default codec takes every type declared before it was
made, and each one declared after.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

__all__ = ("TypeTaker", "declare_error_types", "declare_message_types", "take_declared")


class TypeTaker(Protocol):
    """What takes declared types: a codec."""

    def register_message_types(self, *types: type[msgspec.Struct]) -> None: ...

    def register_error_types(self, *types: type[BaseException]) -> None: ...


_message_types: list[type[msgspec.Struct]] = []
_error_types: list[type[BaseException]] = []
_takers: list[TypeTaker] = []


def declare_message_types(*types: type[msgspec.Struct]) -> None:
    """Declare tagged Struct message types that cross processes.

    Raises:
        TypeError: a taker refuses one (see ``Codec.register_message_types``).
    """
    _message_types.extend(types)
    for taker in _takers:
        taker.register_message_types(*types)


def declare_error_types(*types: type[BaseException]) -> None:
    """Declare error classes an asker gets back as themselves, rebuilt by name."""
    _error_types.extend(types)
    for taker in _takers:
        taker.register_error_types(*types)


def take_declared(taker: TypeTaker) -> None:
    """Give ``taker`` every type declared so far, and each one declared later."""
    if _message_types:
        taker.register_message_types(*_message_types)
    if _error_types:
        taker.register_error_types(*_error_types)
    _takers.append(taker)
