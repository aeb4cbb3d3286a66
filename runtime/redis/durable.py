"""Durable state on the Redis transport: the :mod:`actormem.runtime.state` protocol.

An actor that implements :class:`Durable` is a *virtual actor* on the Redis
transport: its state is loaded when it is activated (first message on this
worker), every handled command's changes are stored together with the command's
id and the stream XACK in one fenced Lua call, and it is passivated (dropped from
memory) after ``passivate_after`` idle seconds.

The log is a Redis list, extended by RPUSH with only the entries added since the
last commit (or replaced, with ``replace_log``); the snapshot is one string key,
rewritten when it changed (see :class:`~actormem.runtime.redis.keys.Keys`).
"""

from __future__ import annotations

from actormem.runtime.state import Durable, DurableChanges, is_durable

__all__ = ("Durable", "DurableChanges", "is_durable")
