"""The memory's input contract: what each command's arguments must be.

The handle checks a command before sending it, and the actor checks it again on
arrival (over Redis a command may come from any client), so a bad argument is
refused with a :class:`MemoryInputError` naming it, before anything changes.
Messages are checked by :func:`~actormem.actors.messages.admit` at the handle, and
again, with the size limit, where the store takes them in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import (
    Add,
    AnswerToolCall,
    Clear,
    Context,
    Delete,
    Export,
    Get,
    HeldInsights,
    Load,
    MemoryExport,
    Prune,
    RecallEpisode,
    Reload,
    Retrieve,
    Search,
    SetSummary,
    StartEpisode,
    ToPool,
    Update,
)
from actormem.actors.messages import ROLES, ToolCall
from actormem.actors.pool.commands import (
    AgentCommand,
    DeliveryAck,
    ForgetSource,
    QueryInsights,
    RegisterFact,
    Share,
    Subscribe,
    Unsubscribe,
)

__all__ = ("SCOPES", "SEARCH_MODES", "check_command", "shown")

SCOPES: Final = ("working", "history", "offloaded")
SEARCH_MODES: Final = ("substring", "ranked")
_SORTED_ROLES: Final = tuple(sorted(ROLES))
#: The largest int a command carries (msgpack's range).
_INT_MAX: Final = 2**63 - 1


def shown(value: object) -> str:
    """``value`` as an error message shows it: its repr, cut short, and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _fail(what: str, arg: str, expected: str, value: object) -> MemoryInputError:
    return MemoryInputError(f"{what}: {arg} must be {expected}, got {shown(value)}")


def _is_int(value: object) -> bool:
    """A real int (``True`` is not one)."""
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def _check_bool(what: str, arg: str, value: object) -> None:
    """``value`` is True or False (not a truthy string)."""
    if type(value) is not bool:
        raise _fail(what, arg, "True or False", value)


def _check_int(what: str, arg: str, value: object, minimum: int, optional: bool = False) -> None:
    """``value`` is an int at or above ``minimum`` (or None, when ``optional``)."""
    if optional and value is None:
        return
    if not _is_int(value) or not minimum <= value <= _INT_MAX:  # type: ignore[operator]
        expected = f"an int >= {minimum}" + (" or None" if optional else "")
        raise _fail(what, arg, expected, value)


def _check_text(
    what: str, arg: str, value: object, *, optional: bool = False, empty: bool = True
) -> None:
    """``value`` is a str (non-blank unless ``empty``; or None when ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, str) or (not empty and not value.strip()):
        expected = "a string" if empty else "a non-empty string"
        raise _fail(what, arg, expected + (" or None" if optional else ""), value)


def _check_time(what: str, arg: str, value: object) -> None:
    """``value`` is None or a finite number of seconds since the epoch."""
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _fail(what, arg, "a finite time in seconds since the epoch, or None", value)


def _check_fraction(what: str, arg: str, value: object) -> None:
    """``value`` is a finite number within 0..1."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0.0 <= value <= 1.0  # NaN fails this too
    ):
        raise _fail(what, arg, "a number within 0..1", value)


def _check_choice(what: str, arg: str, value: object, allowed: tuple[str, ...]) -> None:
    """``value`` is one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise _fail(what, arg, "one of " + ", ".join(map(repr, allowed)), value)


def _check_texts(what: str, arg: str, value: object, *, optional: bool = False) -> None:
    """``value`` is a list or tuple of strings (or None, when ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _fail(what, arg, "a list of strings" + (" or None" if optional else ""), value)


def _check_roles(what: str, value: object) -> None:
    """``value`` is None or a list of roles."""
    if value is None:
        return
    if not isinstance(value, list | tuple) or not all(
        isinstance(r, str) and r in ROLES for r in value
    ):
        raise _fail(what, "roles", "None or a list of " + ", ".join(_SORTED_ROLES), value)


def _check_json_map(what: str, arg: str, value: object, *, optional: bool = False) -> None:
    """``value`` is a dict with string keys whose values are JSON-able."""
    if optional and value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(what, arg, "a dict with string keys", value)
    try:
        _json_check(value)
    except MemoryInputError as exc:
        raise MemoryInputError(f"{what}: {arg} must be JSON-able ({exc})") from None


def _json_check(value: object) -> None:
    try:
        msgspec.json.encode(value)
        msgspec.msgpack.encode(value)  # what Redis carries: ints within 64 bits
    except (TypeError, ValueError, msgspec.EncodeError, RecursionError, OverflowError) as exc:
        raise MemoryInputError(str(exc)) from None


def _add(c: Add) -> None:
    encoding = c.encoding
    if encoding is not None and type(encoding) is not str:  # str or None: no call
        _check_text("add", "encoding", encoding, optional=True)


def _get(c: Get) -> None:
    _check_int("get", "recent_n", c.recent_n, 0, optional=True)
    _check_roles("get", c.roles)
    _check_texts("get", "names", c.names, optional=True)
    _check_json_map("get", "metadata", c.metadata, optional=True)
    _check_time("get", "since", c.since)
    _check_time("get", "until", c.until)
    _check_bool("get", "important", c.important)
    _check_choice("get", "scope", c.scope, SCOPES)


def _search(c: Search) -> None:
    _check_text("search", "query", c.query, empty=False)
    _check_choice("search", "mode", c.mode, SEARCH_MODES)
    _check_int("search", "k", c.k, 1, optional=True)
    _check_roles("search", c.roles)
    _check_choice("search", "scope", c.scope, SCOPES)


def _delete(c: Delete) -> None:
    _check_texts("delete", "ids", c.ids)
    if not isinstance(c.indices, list | tuple) or not all(_is_int(i) for i in c.indices):
        raise _fail("delete", "indices", "a list of ints", c.indices)


def _update(c: Update) -> None:
    _check_text("update", "id", c.id, empty=False)
    if c.content is not None and not isinstance(c.content, str | dict | list):
        raise _fail("update", "content", "a string, a dict, a list of parts or None", c.content)
    _check_json_map("update", "metadata", c.metadata, optional=True)
    if c.importance is not None:
        _check_fraction("update", "importance", c.importance)
    _check_json_map("update", "set_metadata", c.set_metadata)
    _check_texts("update", "remove_metadata", c.remove_metadata)
    if (
        c.content is None
        and c.metadata is None
        and c.importance is None
        and not c.set_metadata
        and not c.remove_metadata
    ):
        raise MemoryInputError(
            "update: nothing to change (give content, metadata, importance or marks)"
        )


def _set_summary(c: SetSummary) -> None:
    _check_text("set_summary", "text", c.text, empty=False)
    _check_texts("set_summary", "replaces", c.replaces)
    if not c.replaces:
        raise _fail("set_summary", "replaces", "a non-empty list of message ids", c.replaces)


def _load(c: Load) -> None:
    if not isinstance(c.data, MemoryExport):
        raise _fail("load", "data", "a MemoryExport", c.data)
    _check_bool("load", "overwrite", c.overwrite)
    data = c.data
    if not isinstance(data.offloaded, dict) or not all(
        isinstance(k, str) and isinstance(v, list | tuple) for k, v in data.offloaded.items()
    ):
        raise _fail("load", "offloaded", "a dict of message lists by offload id", data.offloaded)
    for arg, messages in (("working", data.working), ("history", data.history)):
        if not isinstance(messages, list | tuple):
            raise _fail("load", arg, "a list of messages", messages)


def _context(c: Context) -> None:
    _check_int("context", "max_tokens", c.max_tokens, 1, optional=True)
    _check_text("context", "query", c.query, optional=True)


def _answer(c: AnswerToolCall) -> None:
    call = c.call
    if not isinstance(call, ToolCall):
        raise _fail("answer_tool_call", "call", "a ToolCall", call)
    if not call.id or not call.name:
        raise MemoryInputError("answer_tool_call: a tool call needs a non-empty id and name")


def _share(c: Share) -> None:
    _check_text("share", "insight", c.text, empty=False)
    _check_text("share", "topic", c.topic, empty=False)
    _check_fraction("share", "importance", c.importance)
    _check_texts("share", "source_message_ids", c.source_message_ids)


def _fact(c: RegisterFact) -> None:
    _check_text("register_fact", "fact", c.text, empty=False)
    _check_fraction("register_fact", "importance", c.importance)


def _topics(what: str) -> Callable[[Any], None]:
    def check(c: Subscribe | Unsubscribe) -> None:
        _check_texts(what, "topics", c.topics)
        if not all(t.strip() for t in c.topics):
            raise MemoryInputError(f"{what}: a topic is a non-empty string")
        if isinstance(c, Subscribe):
            _check_int(what, "backfill", c.backfill, 0)

    return check


def _to_pool(c: Any) -> None:
    inner = c.command
    check = _CHECKS.get(type(inner))
    if not isinstance(inner, AgentCommand) or check is None:
        raise MemoryInputError(
            "to_pool takes Share, RegisterFact, Subscribe, Unsubscribe or ForgetSource, "
            f"not {type(inner).__name__}"
        )
    check(inner)


def _forget_source(c: ForgetSource) -> None:
    _check_text("forget_source", "source", c.source, empty=False)


def _delivery_ack(c: DeliveryAck) -> None:
    _check_int("delivery_ack", "through", c.through, 0)
    _check_bool("delivery_ack", "resend", c.resend)


def _prune(c: Prune) -> None:
    _check_int("prune", "max_tokens", c.max_tokens, 1)
    _check_bool("prune", "preserve_system", c.preserve_system)


def _retrieve(c: Retrieve) -> None:
    _check_text("retrieve", "query", c.query)
    _check_int("retrieve", "k", c.k, 1, optional=True)


def _recall_episode(c: RecallEpisode) -> None:
    _check_text("recall_episode", "query", c.query)
    _check_int("recall_episode", "k", c.k, 1)


def _held(c: HeldInsights) -> None:
    _check_text("held_insights", "query", c.query, optional=True)
    _check_int("held_insights", "k", c.k, 1)


def _query_insights(c: QueryInsights) -> None:
    _check_text("insights", "topic", c.topic, empty=False)
    _check_int("insights", "k", c.k, 1)


def _clear(c: Clear) -> None:
    _check_bool("clear", "history", c.history)


def _export(c: Export) -> None:
    _check_bool("export", "include_history", c.include_history)


def _reload(c: Reload) -> None:
    _check_text("reload", "offload_id", c.offload_id)


def _start_episode(c: StartEpisode) -> None:
    _check_json_map("start_episode", "metadata", c.metadata)


_CHECKS: Final[dict[type, Callable[[Any], None]]] = {
    Add: _add,
    Get: _get,
    Search: _search,
    Delete: _delete,
    Update: _update,
    SetSummary: _set_summary,
    Clear: _clear,
    Export: _export,
    Load: _load,
    Prune: _prune,
    Context: _context,
    Reload: _reload,
    Retrieve: _retrieve,
    AnswerToolCall: _answer,
    StartEpisode: _start_episode,
    RecallEpisode: _recall_episode,
    HeldInsights: _held,
    Share: _share,
    RegisterFact: _fact,
    Subscribe: _topics("subscribe"),
    Unsubscribe: _topics("unsubscribe"),
    ForgetSource: _forget_source,
    DeliveryAck: _delivery_ack,
    ToPool: _to_pool,
    QueryInsights: _query_insights,
}


def check_command(command: object) -> None:
    """Check a command's arguments (messages are checked where they are stored).

    Raises:
        MemoryInputError: an argument of the wrong type, out of range or not one
            of its choices; the message names it and what was expected.
    """
    check = _CHECKS.get(type(command))
    if check is not None:
        check(command)
