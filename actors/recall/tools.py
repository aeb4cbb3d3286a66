"""Agent control of long-term memory: the ``record_to_memory`` / ``retrieve_from_memory`` tools.

In ``agent_control`` and ``both`` modes the agent gets :data:`MEMORY_TOOLS` in
its Chat Completions ``tools=`` and calls them itself. The handlers validate the
call's arguments against the same limits the schemas state, act on the agent's
:class:`~actormem.actors.recall.longterm.LongTermMemory`, and return the tool result text, in
which recalled memories are quoted data. :func:`memory_tool_message` wraps that
in the ``tool`` message answering the call, turning bad arguments into an
``error: ...`` result the model can read and correct.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Final

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import Message, ToolCall
from actormem.actors.recall.longterm import ControlMode, LongTermMemory
from actormem.actors.recall.longterm_config import DEFAULT_TOP_K
from actormem.actors.text.blocks import format_time, quote
from actormem.runtime.tokens import TokenCounter

__all__ = (
    "MEMORY_TOOLS",
    "RECORD_TOOL",
    "RETRIEVE_TOOL",
    "LongTermControl",
    "ToolArgumentsError",
    "handle_memory_tool_call",
    "handle_record_to_memory",
    "handle_retrieve_from_memory",
    "memory_tool_message",
    "memory_tools",
)

MAX_TOOL_ITEMS: Final = 20
MAX_TOOL_K: Final = 20

RECORD_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": "record_to_memory",
        "description": (
            "Record important information to your long-term memory so you can "
            "recall it in later turns and sessions."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "thinking": {
                    "type": "string",
                    "description": "Why this is worth remembering (optional).",
                },
                "content": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "minItems": 1,
                    "maxItems": MAX_TOOL_ITEMS,
                    "description": "The facts to remember, one short statement each.",
                },
                "importance": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "How important these facts are, 0 (trivial) to 1 (vital).",
                },
            },
            "required": ["content"],
            "additionalProperties": False,
        },
    },
}

RETRIEVE_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": "retrieve_from_memory",
        "description": "Retrieve what your long-term memory holds about some keywords.",
        "parameters": {
            "type": "object",
            "properties": {
                "keywords": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "minItems": 1,
                    "maxItems": MAX_TOOL_ITEMS,
                    "description": "Keywords or short phrases to look up.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TOOL_K,
                    "description": "The most memories to return (default 5).",
                },
            },
            "required": ["keywords"],
            "additionalProperties": False,
        },
    },
}

#: Both tool schemas, as passed in ``tools=`` to Chat Completions.
MEMORY_TOOLS: Final = (RECORD_TOOL, RETRIEVE_TOOL)

_Item = Annotated[str, msgspec.Meta(min_length=1)]


class _RecordArgs(msgspec.Struct, forbid_unknown_fields=True):
    content: Annotated[list[_Item], msgspec.Meta(min_length=1, max_length=MAX_TOOL_ITEMS)]
    thinking: str = ""
    importance: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class _RetrieveArgs(msgspec.Struct, forbid_unknown_fields=True):
    keywords: Annotated[list[_Item], msgspec.Meta(min_length=1, max_length=MAX_TOOL_ITEMS)]
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_TOOL_K)] = DEFAULT_TOP_K


class ToolArgumentsError(MemoryInputError):
    """A memory tool was called with arguments its schema does not allow."""


def memory_tools(mode: ControlMode) -> list[dict[str, Any]]:
    """Return the tool schemas to offer the agent in ``mode`` (none for static_control)."""
    return list(MEMORY_TOOLS) if mode.agent else []


def _parse(tool: str, arguments: str | bytes | dict[str, Any], type_: type[Any]) -> Any:
    try:
        if isinstance(arguments, dict):
            return msgspec.convert(arguments, type=type_)
        return msgspec.json.decode(arguments, type=type_)
    except msgspec.ValidationError as exc:
        raise ToolArgumentsError(f"{tool}: invalid arguments: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ToolArgumentsError(f"{tool}: arguments are not a JSON object: {exc}") from exc


async def handle_record_to_memory(
    memory: LongTermMemory, arguments: str | bytes | dict[str, Any]
) -> str:
    """Serve a ``record_to_memory`` call; return the tool result text.

    Raises:
        ToolArgumentsError: the arguments break the tool's schema (the message says how).
    """
    args = _parse("record_to_memory", arguments, _RecordArgs)
    added = memory.record_texts(args.content, args.importance)
    kept = len(args.content) - len(added)
    note = f" ({kept} already known)" if kept else ""
    return f"Recorded {len(added)} item(s) to long-term memory{note}."


async def handle_retrieve_from_memory(
    memory: LongTermMemory, arguments: str | bytes | dict[str, Any]
) -> str:
    """Serve a ``retrieve_from_memory`` call; return the tool result text.

    Raises:
        ToolArgumentsError: the arguments break the tool's schema (the message says how).
    """
    args = _parse("retrieve_from_memory", arguments, _RetrieveArgs)
    query = " ".join(args.keywords)
    recalled = await memory.retrieve(query, args.limit)
    if not recalled:
        return f"No memories match {quote(query)}."
    lines = [f"Memories matching {quote(query)} (quoted data, best first):"]
    for n, r in enumerate(recalled, 1):
        e = r.entry
        lines.append(f"{n}. {quote(e.speaker)} at {format_time(e.created)}: {quote(e.text)}")
    return "\n".join(lines)


_HANDLERS: Final = {
    "record_to_memory": handle_record_to_memory,
    "retrieve_from_memory": handle_retrieve_from_memory,
}


async def handle_memory_tool_call(memory: LongTermMemory, call: ToolCall) -> str:
    """Serve one memory tool call by its name; return the tool result text.

    Raises:
        ToolArgumentsError: not a memory tool, or bad arguments.
    """
    handler = _HANDLERS.get(call.name)
    if handler is None:
        raise ToolArgumentsError(
            f"{call.name!r} is not a memory tool (expected one of {sorted(_HANDLERS)})"
        )
    return await handler(memory, call.arguments)


async def memory_tool_message(memory: LongTermMemory, call: ToolCall) -> Message:
    """Serve a memory tool call and return the ``tool`` message answering it.

    Bad arguments become an ``error: ...`` result the model can read and correct,
    so the conversation stays valid either way.
    """
    try:
        content = await handle_memory_tool_call(memory, call)
    except ToolArgumentsError as exc:
        content = f"error: {exc}"
    return Message(role="tool", content=content, tool_call_id=call.id, name=call.name)


class LongTermControl:
    """Applies a :class:`ControlMode` to one agent's long-term memory.

    The agent memory actor holds one and calls it at the three points where the
    modes differ, so the modes live in one place:

    - :meth:`tools` when building a request (the memory tools, or none);
    - :meth:`context_block` in ``context()`` (the recalled-memories block, or None);
    - :meth:`after_reply` when a reply (and what led to it) is added;
    - :meth:`answer` for a tool call the model made (None when it is not a
      memory tool, so other tools go elsewhere).

    Args:
        memory: the agent's long-term memory.
        mode: the control mode (the memory's configured one by default).
    """

    def __init__(self, memory: LongTermMemory, mode: ControlMode | None = None) -> None:
        self.memory = memory
        # ControlMode() also accepts the plain string a config built in code may hold.
        self.mode = ControlMode(memory.config.mode if mode is None else mode)

    def tools(self) -> list[dict[str, Any]]:
        """Return the tool schemas to offer (none in static_control)."""
        return memory_tools(self.mode)

    async def context_block(self, query: str, counter: TokenCounter) -> str | None:
        """Static control: the memories recalled for ``query`` as a block; else None."""
        if not self.mode.static or not query.strip():
            return None
        return await self.memory.context_block(query, counter)

    def after_reply(self, messages: Iterable[Message]) -> int:
        """Static control: record ``messages``; return how many new memories that made."""
        if not self.mode.static:
            return 0
        return len(self.memory.record(messages))

    async def answer(self, call: ToolCall) -> Message | None:
        """Answer a memory tool call with its ``tool`` message; None for other tools.

        In static_control the tools are not offered; a call to one anyway gets an
        error result rather than silently working.
        """
        if call.name not in _HANDLERS:
            return None
        if not self.mode.agent:
            return Message(
                role="tool",
                content=f"error: {call.name} is not available (long-term memory is "
                "in static_control mode)",
                tool_call_id=call.id,
                name=call.name,
            )
        return await memory_tool_message(self.memory, call)
