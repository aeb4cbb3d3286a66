"""The chat message an agent's memory stores: the union of the reference systems' models.

A :class:`Message` is a frozen msgspec Struct. It carries what AgentScope, MARSYS
and Forge messages carry (role, content as text or structure, speaker name, tool
calls and tool results, agent-to-agent calls, attachments, metadata, a timestamp
and a unique time-ordered id) plus an optional ``importance`` and the ``tokens``
count the memory actor caches when the message is added.

Wire compatibility: messages live in Redis streams and snapshots for a long time.
New fields go last, with defaults; a field's type never changes.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Final, Literal, get_args

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.message_content import (
    PART_TYPES,
    check_parts,
    check_storable,
    is_number,
    json_text,
    parts_fit,
    shown,
)
from actormem.runtime.ids import new_id
from actormem.runtime.tokens import TokenCounter

__all__ = (
    "MAX_TIMESTAMP",
    "ROLES",
    "Message",
    "Role",
    "ToolCall",
    "admit",
    "count_tokens",
    "decode_message",
    "decode_messages",
    "encode_message",
    "encode_messages",
    "message_chars",
)

Role = Literal["system", "user", "assistant", "tool", "agent_call", "agent_response"]
ROLES: Final[frozenset[str]] = frozenset(get_args(Role))

#: OpenAI accepts ``name`` only when it matches this; other characters become ``_``.
_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_NAME_MAX = 64

#: The latest timestamp a message may carry (the year 3000), in seconds since the epoch.
MAX_TIMESTAMP: Final = 32503680000.0


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    """One function call an assistant message asks for.

    Args:
        id: the call's id; the ``tool`` message with the result carries it as
            ``tool_call_id``.
        name: the function's name.
        arguments: the arguments as a JSON string, as the model produced them; a
            dict or list is serialized to one.

    Raises:
        MemoryInputError: a field of the wrong type.
    """

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        arguments: Any = self.arguments  # msgspec does not type-check __init__ arguments
        if type(arguments) is not str:
            if not isinstance(arguments, dict | list):
                raise MemoryInputError(
                    f"tool call arguments must be a JSON string (or a dict), "
                    f"got {type(arguments).__name__}"
                )
            msgspec.structs.force_setattr(self, "arguments", json_text(arguments, "arguments"))
        if not isinstance(self.id, str):
            raise MemoryInputError(
                f"a tool call's id must be a string, got {type(self.id).__name__}"
            )
        if not isinstance(self.name, str):
            raise MemoryInputError(
                f"a tool call's name must be a string, got {type(self.name).__name__}"
            )

    def to_openai(self) -> dict[str, Any]:
        """Return the call as an OpenAI ``tool_calls`` entry."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One message in an agent's memory.

    Args:
        role: system, user, assistant, tool, agent_call (another agent asks this
            one) or agent_response (this agent answers another).
        content: text, or structured content (a dict, or a list of OpenAI content
            parts); may be None only on an assistant message with tool calls.
        id: unique and time-ordered; made for you.
        name: the speaker (agent or user name; for a tool result, the tool's name).
        tool_calls: the calls an assistant message asks for.
        tool_call_id: on a ``tool`` message, the id of the call it answers.
        url: links to attachments (images, files, pages).
        metadata: JSON-able tags, such as ``{"important": True, "category": "fact"}``.
            ``pinned: True`` keeps a message out of compression.
        importance: 0..1, optional; ``important()`` and core memory use it.
        timestamp: seconds since the epoch; now by default.
        tokens: the cached token count; set by the memory actor on add (-1: not yet).

    Raises:
        MemoryInputError: (a ``ValueError``) a field is invalid for the role.
    """

    role: Role
    content: str | dict[str, Any] | list[Any] | None = None
    id: str = msgspec.field(default_factory=new_id)
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    url: tuple[str, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    importance: float | None = None
    timestamp: float = msgspec.field(default_factory=time.time)
    tokens: int = -1

    def __post_init__(self) -> None:
        # msgspec does not type-check __init__ arguments, only decoded input, so the
        # checks a user can trip from Python live here (they run on decode too).
        if (
            type(self.content) is str
            and self.role in _PLAIN_ROLES
            and not self.tool_calls
            and self.tool_call_id is None
            and self.importance is None
            and type(self.id) is str
            and self.id
            and type(self.metadata) is dict
            and type(self.timestamp) is float
            and (self.name is None or type(self.name) is str)
            and type(self.url) is tuple
            and not self.url
        ):
            return  # the common message (plain text, no calls): every rule below holds
        if self.role not in ROLES:
            raise MemoryInputError(f"role must be one of {sorted(ROLES)}, got {self.role!r}")
        if not isinstance(self.content, str | dict | list | None):
            raise MemoryInputError(
                f"content must be text, a dict, a list of parts or None, "
                f"got {type(self.content).__name__}"
            )
        if not isinstance(self.id, str) or not self.id:
            raise MemoryInputError("id must be a non-empty string")
        if self.name is not None and not isinstance(self.name, str):
            raise MemoryInputError(f"name must be a string, got {type(self.name).__name__}")
        if self.tool_call_id is not None and not isinstance(self.tool_call_id, str):
            raise MemoryInputError(
                f"tool_call_id must be a string, got {type(self.tool_call_id).__name__}"
            )
        if not is_number(self.timestamp):
            raise MemoryInputError(
                f"timestamp must be seconds since the epoch (a number), "
                f"got {type(self.timestamp).__name__}"
            )
        if type(self.timestamp) is not float:
            # An int far past MAX_TIMESTAMP becomes inf (refused on the way in).
            stamp = float(self.timestamp) if abs(self.timestamp) < 2**1000 else math.inf
            msgspec.structs.force_setattr(self, "timestamp", stamp)
        if self.importance is not None and not is_number(self.importance):
            raise MemoryInputError(
                f"importance must be a number within 0..1, got {type(self.importance).__name__}"
            )
        if not isinstance(self.url, tuple | list) or not all(isinstance(u, str) for u in self.url):
            raise MemoryInputError("url must be a sequence of strings")
        if type(self.url) is not tuple:
            msgspec.structs.force_setattr(self, "url", tuple(self.url))
        if not isinstance(self.tool_calls, tuple | list):
            raise MemoryInputError("tool_calls must be a sequence of ToolCall values")
        if type(self.tool_calls) is not tuple:
            msgspec.structs.force_setattr(self, "tool_calls", tuple(self.tool_calls))
        if self.tool_calls and self.role != "assistant":
            raise MemoryInputError(f"only assistant messages carry tool_calls, not {self.role}")
        if self.role == "tool" and not self.tool_call_id:
            raise MemoryInputError("a tool message needs the tool_call_id of the call it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise MemoryInputError(f"tool_call_id belongs on tool messages, not {self.role}")
        if self.content is None and not self.tool_calls:
            raise MemoryInputError(f"a {self.role} message without tool calls needs content")
        if self.importance is not None and not 0.0 <= self.importance <= 1.0:
            raise MemoryInputError(f"importance must be within 0..1, got {self.importance}")
        if not isinstance(self.metadata, dict):
            raise MemoryInputError("metadata must be a dict")
        seen: set[str] = set()
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise MemoryInputError("tool_calls must hold ToolCall values")
            if call.id in seen:
                raise MemoryInputError(f"tool call id {call.id!r} appears twice")
            seen.add(call.id)

    # -- views ---------------------------------------------------------------

    def text(self) -> str:
        """Return the content as plain text (JSON for a dict, text parts joined)."""
        content = self.content
        if isinstance(content, str):
            return content
        if content is None:
            return ""
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
                elif isinstance(part, str):
                    parts.append(part)
            return "\n".join(parts)
        return msgspec.json.encode(content).decode()

    def searchable_text(self) -> str:
        """Return everything a text search should look at: name, content, tool calls."""
        pieces = [self.text()]
        if self.name:
            pieces.append(self.name)
        for call in self.tool_calls:
            pieces.append(call.name)
            pieces.append(call.arguments)
        return "\n".join(pieces)

    @property
    def pinned(self) -> bool:
        """True when the message is marked ``metadata["pinned"]`` (never compressed)."""
        return bool(self.metadata.get("pinned"))

    def to_openai(self) -> dict[str, Any]:
        """Return the message as an OpenAI Chat Completions message.

        Roles map as MARSYS maps them: ``agent_call`` becomes a ``user`` message
        prefixed with the caller, ``agent_response`` becomes ``assistant``. Structured
        dict content becomes JSON text, a list of parts a copy of it (the caller's to
        change); a ``name`` is kept where OpenAI accepts it.
        """
        role = self.role
        content: Any = self.content
        if type(content) is str and role in _PLAIN_ROLES and not self.name and not self.tool_calls:
            return {"role": role, "content": content}  # most messages: nothing to map
        if isinstance(content, dict):
            content = msgspec.json.encode(content).decode()
        elif isinstance(content, list):
            # Parts this role cannot carry in the API go as text.
            content = _copied(content) if parts_fit(content, PART_TYPES[role]) else self.text()
        if role == "agent_call":
            caller = self.name or str(self.metadata.get("caller", "agent"))
            prefix = f"[Request from {caller}]: "
            if isinstance(content, list):
                content = [{"type": "text", "text": prefix}, *content]
            else:
                content = prefix + self.text()
            out: dict[str, Any] = {"role": "user", "content": content}
            return out
        if role == "tool":
            return {"role": "tool", "content": self.text(), "tool_call_id": self.tool_call_id}
        out = {"role": "assistant" if role == "agent_response" else role, "content": content}
        if self.name:
            out["name"] = _openai_name(self.name)
        if self.tool_calls:
            out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return out

    def detached(self) -> Message:
        """Return a copy holding none of this message's dicts or lists (its metadata,
        and its content when structured), as a copy decoded from the wire does: a
        memory keeps what it was given, whatever the giver later does with its own
        objects. For a message that passed :func:`admit` (JSON-able values)."""
        out: Message = self.__copy__()  # type: ignore[attr-defined]  # msgspec's own
        metadata = self.metadata
        _force_setattr(out, "metadata", _copied(metadata) if metadata else {})
        content = self.content
        if content is not None and type(content) is not str:
            _force_setattr(out, "content", _copied(content))
        return out

    def with_tokens(self, tokens: int) -> Message:
        """Return a copy with the token count cached (``self`` when it already has it)."""
        if self.tokens == tokens:
            return self
        # copy + force_setattr skips __post_init__: the copy is as valid as self.
        out: Message = self.__copy__()  # type: ignore[attr-defined]  # msgspec's, not copy.copy's dispatch
        _force_setattr(out, "tokens", tokens)
        return out


_PLAIN_ROLES: Final = frozenset({"system", "user", "assistant"})
_force_setattr: Final = msgspec.structs.force_setattr


def count_tokens(message: Message, counter: TokenCounter) -> int:
    """Return the tokens ``message`` costs in a request, as it is rendered for OpenAI."""
    content = message.content
    if type(content) is str and message.role in _PLAIN_ROLES and not message.tool_calls:
        # What to_openai() would render, counted without building the dict.
        name = message.name
        return counter.count_plain(message.role, content, _openai_name(name) if name else None)
    return counter.count_message(message.to_openai())


def _openai_name(name: str) -> str:
    return _NAME_BAD_CHARS.sub("_", name)[:_NAME_MAX]


def admit(message: Message) -> None:
    """Check what a memory requires of a message it stores, beyond its field types.

    Run on every message that comes in (add, record, load); messages read back
    from storage are not checked again, so the rules may tighten without making
    stored data unreadable.

    Raises:
        MemoryInputError: a timestamp that is not a finite time between the epoch
            and ``MAX_TIMESTAMP``; a tool call with an empty id or name or
            arguments that are not JSON; a tool message with an empty
            ``tool_call_id``; an empty list of content parts, a malformed part or
            one the role cannot carry; content or metadata that are not JSON-able.
    """
    if not isinstance(message, Message):
        raise MemoryInputError(f"expected a Message, got {type(message).__name__}")
    if not 0.0 <= message.timestamp <= MAX_TIMESTAMP:
        raise MemoryInputError(
            f"timestamp must be a finite time in seconds since the epoch "
            f"(0..{MAX_TIMESTAMP:.0f}), got {message.timestamp!r}"
        )
    if message.importance is not None and not math.isfinite(message.importance):
        raise MemoryInputError(f"importance must be within 0..1, got {message.importance}")
    for call in message.tool_calls:
        if not call.id:
            raise MemoryInputError("a tool call needs a non-empty id")
        if not call.name:
            raise MemoryInputError(f"tool call {call.id!r} needs a non-empty function name")
        try:
            msgspec.json.decode(call.arguments)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise MemoryInputError(
                f"tool call {call.id!r}: arguments must be a JSON string, got "
                f"{shown(call.arguments)}"
            ) from exc
    content = message.content
    if isinstance(content, list):
        check_parts(message.role, content)
        check_storable(content, "content")
    elif isinstance(content, dict):
        check_storable(content, "content")
    if message.metadata:
        if not all(isinstance(k, str) for k in message.metadata):
            raise MemoryInputError("metadata keys must be strings")
        check_storable(message.metadata, "metadata")


def message_chars(message: Message) -> int:
    """The characters a message carries: content (JSON for structured content),
    name, tool call ids, names and arguments, urls and metadata (as JSON).

    What the ``max_message_chars`` limit counts; cheap next to counting tokens.

    Raises:
        MemoryInputError: content or metadata that are not JSON-able.
    """
    content = message.content
    if type(content) is str:
        size = len(content)
    elif content is None:
        size = 0
    else:
        size = len(json_text(content, "content"))
    if message.name:
        size += len(message.name)
    if message.tool_call_id:
        size += len(message.tool_call_id)
    for call in message.tool_calls:
        size += len(call.id) + len(call.name) + len(call.arguments)
    for url in message.url:
        size += len(url)
    if message.metadata:
        size += len(json_text(message.metadata, "metadata"))
    return size


_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(Message)
_list_decoder: Final = msgspec.msgpack.Decoder(list[Message])
_any_decoder: Final = msgspec.msgpack.Decoder()


def _copied(value: Any) -> Any:
    """A JSON-able ``value`` as a copy sharing none of its dicts and lists, as it
    comes back from the wire."""
    return _any_decoder.decode(_encoder.encode(value))


def encode_message(message: Message) -> bytes:
    """Encode a message as msgpack."""
    return _encoder.encode(message)


def decode_message(data: bytes) -> Message:
    """Decode and validate a msgpack message.

    Raises:
        MemoryInputError: the bytes are not a valid message (the reason is named).
    """
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise MemoryInputError(f"invalid message: {exc}") from exc


def encode_messages(messages: list[Message]) -> bytes:
    """Encode a list of messages as msgpack."""
    return _encoder.encode(messages)


def decode_messages(data: bytes) -> list[Message]:
    """Decode and validate a msgpack list of messages.

    Raises:
        MemoryInputError: the bytes are not a valid list of messages.
    """
    try:
        return _list_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise MemoryInputError(f"invalid message list: {exc}") from exc
