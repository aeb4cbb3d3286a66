"""Offload hints and previews, and the ``context_reload`` tool an agent calls to get content back.

When the compressor takes content out of the working view it stores the original
messages under a new *reload id* and leaves a hint naming that id. An agent gets
them back by calling the ``context_reload`` tool (:data:`CONTEXT_RELOAD_TOOL`);
the memory actor serves ``reload(id)``, and :func:`parse_reload_arguments` and
:func:`format_reloaded` turn the tool call into the lookup and the result into
the tool message's text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import Message

__all__ = (
    "CONTEXT_RELOAD_TOOL",
    "RELOAD_TOOL_NAME",
    "ReloadArgumentsError",
    "format_reloaded",
    "offload_hint",
    "parse_reload_arguments",
    "preview",
    "reload_ids",
    "reload_tool_result",
    "render_message",
    "render_transcript",
    "strip_hints",
)

RELOAD_TOOL_NAME: Final = "context_reload"

#: The OpenAI tool schema of ``context_reload`` (Chat Completions ``tools`` entry).
CONTEXT_RELOAD_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": RELOAD_TOOL_NAME,
        "description": (
            "Fetch the full original content that memory compression replaced by a "
            "preview or a summary. Call it with the id named in a hint like "
            '[... context_reload(id="...")] when you need the exact details.'
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {
                    "type": "string",
                    "description": "The reload id from the hint in the conversation.",
                }
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    },
}

_HINT_ID: Final = re.compile(r'context_reload\(id="([^"]+)"\)')
_HINT: Final = re.compile(r'\n?\[[^\[\]]*context_reload\(id="[^"]+"\)\]')
_ELLIPSIS: Final = "…"


class ReloadArgumentsError(MemoryInputError):
    """The arguments of a ``context_reload`` call are not ``{"id": "<reload id>"}``."""


def offload_hint(reload_id: str, what: str) -> str:
    """Return the hint that tells the agent how to get ``what`` back by ``reload_id``."""
    return f'[{what}: context_reload(id="{reload_id}")]'


def reload_ids(text: str) -> list[str]:
    """Return the reload ids named by hints in ``text``, in order."""
    return _HINT_ID.findall(text)


def strip_hints(text: str) -> str:
    """Return ``text`` without its reload hints (they are pointers, not content)."""
    return _HINT.sub("", text)


def preview(text: str, limit: int) -> str:
    """Return at most ``limit`` characters of ``text``, cut at a word boundary when one is near.

    An ellipsis marks a cut; text that fits is returned unchanged.
    """
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    cut = text[: max(0, limit - 1)]
    space = cut.rfind(" ")
    if space >= limit * 3 // 4:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


def render_message(message: Message, limit: int | None = None) -> str:
    """Render one message as a transcript line: speaker, text, and its tool calls.

    Args:
        message: the message.
        limit: cut the text (and each call's arguments) to this many characters.
    """
    role = message.role
    speaker = f"{role} {message.name}" if message.name else role
    if role == "tool":
        speaker = f"tool result {message.name or ''} [{message.tool_call_id}]".replace("  ", " ")
    text = message.text()
    if limit is not None:
        text = preview(text, limit)
    lines = [f"{speaker}: {text}" if text else f"{speaker}:"]
    for call in message.tool_calls:
        args = call.arguments if limit is None else preview(call.arguments, limit)
        lines.append(f"  calls {call.name}({args}) [{call.id}]")
    return "\n".join(lines)


def render_transcript(messages: Sequence[Message], limit: int | None = None) -> str:
    """Render messages as a plain-text transcript, one block per message."""
    return "\n".join(render_message(m, limit) for m in messages)


def parse_reload_arguments(arguments: str | Mapping[str, Any]) -> str:
    """Return the reload id from a ``context_reload`` call's arguments.

    Args:
        arguments: the call's JSON argument string (as the model produced it), or
            the already parsed mapping.

    Raises:
        ReloadArgumentsError: the arguments are not JSON, not an object, lack a
            non-empty string ``id``, or hold other keys.
    """
    if isinstance(arguments, str):
        try:
            parsed: Any = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ReloadArgumentsError(
                f"{RELOAD_TOOL_NAME} arguments are not valid JSON: {exc.msg}"
            ) from exc
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        raise ReloadArgumentsError(
            f"{RELOAD_TOOL_NAME} arguments must be a JSON object, got {type(parsed).__name__}"
        )
    extra = sorted(set(parsed) - {"id"})
    if extra:
        raise ReloadArgumentsError(f"{RELOAD_TOOL_NAME} takes only 'id'; unexpected {extra}")
    reload_id = parsed.get("id")
    if not isinstance(reload_id, str) or not reload_id.strip():
        raise ReloadArgumentsError(f"{RELOAD_TOOL_NAME} needs a non-empty string 'id'")
    return reload_id.strip()


def format_reloaded(reload_id: str, messages: Sequence[Message] | None) -> str:
    """Return the text of the tool result for a ``context_reload`` call.

    Args:
        reload_id: the id that was asked for.
        messages: the offloaded messages, or None when the id is unknown.
    """
    if messages is None:
        return (
            f"No offloaded content has the id {reload_id!r}. Use an id exactly as a "
            f"{RELOAD_TOOL_NAME} hint in the conversation names it."
        )
    count = len(messages)
    head = f"Reloaded {count} message{'s' if count != 1 else ''} (id {reload_id}):"
    return head + "\n" + render_transcript(messages)


def reload_tool_result(
    arguments: str | Mapping[str, Any],
    lookup: Callable[[str], Sequence[Message] | None] | Mapping[str, Sequence[Message]],
) -> str:
    """Answer a ``context_reload`` tool call: the text of the ``tool`` message to send back.

    Bad arguments and unknown ids are answered in words the model can act on,
    not raised: a tool result is where the model learns it called a tool wrongly.

    Args:
        arguments: the call's JSON argument string (or the parsed mapping).
        lookup: the memory's offload store, or a function from id to messages
            (None when the id is unknown).
    """
    try:
        reload_id = parse_reload_arguments(arguments)
    except ReloadArgumentsError as exc:
        return f"Cannot reload: {exc}."
    found = lookup.get(reload_id) if isinstance(lookup, Mapping) else lookup(reload_id)
    return format_reloaded(reload_id, found)
