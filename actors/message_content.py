"""What a message's content may hold: content parts by role, and JSON-able values.

:func:`actormem.actors.messages.admit` applies these rules to every message a
memory stores; rendering for OpenAI reads the part types each role takes.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from actormem.actors.errors import MemoryInputError

__all__ = (
    "PART_TYPES",
    "check_parts",
    "check_storable",
    "is_number",
    "json_text",
    "parts_fit",
    "shown",
)


#: The content part types the Chat Completions API takes in each role's messages
#: (``agent_call`` is sent as user, ``agent_response`` as assistant).
_USER_PARTS: Final = frozenset({"text", "image_url", "input_audio", "file"})
_REPLY_PARTS: Final = frozenset({"text", "refusal"})
PART_TYPES: Final[dict[str, frozenset[str]]] = {
    "system": frozenset({"text"}),
    "user": _USER_PARTS,
    "assistant": _REPLY_PARTS,
    "tool": frozenset({"text"}),
    "agent_call": _USER_PARTS,
    "agent_response": _REPLY_PARTS,
}
#: What each part type must hold besides ``type``: the key, and the type of its value.
_PART_FIELDS: Final[dict[str, tuple[str, type]]] = {
    "text": ("text", str),
    "refusal": ("refusal", str),
    "image_url": ("image_url", dict),
    "input_audio": ("input_audio", dict),
    "file": ("file", dict),
}
_json_encoder: Final = msgspec.json.Encoder()
_msgpack_encoder: Final = msgspec.msgpack.Encoder()


def parts_fit(parts: list[Any], allowed: frozenset[str]) -> bool:
    return all(isinstance(p, dict) and p.get("type") in allowed for p in parts)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_text(value: Any, what: str) -> str:
    try:
        return _json_encoder.encode(value).decode()
    except (TypeError, ValueError, msgspec.EncodeError, RecursionError, OverflowError) as exc:
        raise MemoryInputError(f"{what} must be JSON-able: {exc}") from exc


def check_storable(value: Any, what: str) -> None:
    """``value`` encodes as JSON (exports) and as msgpack (Redis): ints within 64 bits."""
    json_text(value, what)
    try:
        _msgpack_encoder.encode(value)
    except (TypeError, ValueError, msgspec.EncodeError, RecursionError, OverflowError) as exc:
        raise MemoryInputError(f"{what} must be JSON-able: {exc}") from exc


def check_parts(role: str, parts: list[Any]) -> None:
    if not parts:
        raise MemoryInputError("content given as a list needs at least one content part")
    allowed = PART_TYPES[role]
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _PART_FIELDS:
            raise MemoryInputError(
                f"content part {i} must be a dict with a 'type' of "
                f"{', '.join(map(repr, sorted(_PART_FIELDS)))}, got {shown(part)}"
            )
        if kind not in allowed:
            raise MemoryInputError(
                f"content part {i}: a {role} message cannot carry {kind!r} parts "
                f"(allowed: {', '.join(map(repr, sorted(allowed)))})"
            )
        key, expected = _PART_FIELDS[kind]
        value = part.get(key)
        if not isinstance(value, expected):
            raise MemoryInputError(
                f"content part {i} ({kind}) needs {key!r} as a {expected.__name__}"
            )
        if kind == "image_url" and not isinstance(part[key].get("url"), str):
            raise MemoryInputError(f"content part {i} (image_url) needs image_url.url as a string")


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
