"""Messages and exports in and out of a handle: OpenAI-style dicts made into
:class:`Message` values, and exports written to and read from JSON files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from actormem.actors.config import AppConfig, MemoryConfig
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import (
    Add,
    Delete,
    MemoryExport,
)
from actormem.actors.memory.inputs import shown
from actormem.actors.messages import Message, ToolCall, admit, count_tokens, message_chars
from actormem.runtime.tokens import get_counter

__all__ = (
    "counted_add",
    "delete_command",
    "load_source",
    "read_export",
    "sender_config",
    "to_message",
    "write_export",
)


_export_decoder = msgspec.json.Decoder(MemoryExport)
_json_encoder = msgspec.json.Encoder()


def to_message(item: Message | Mapping[str, Any]) -> Message:
    """Return ``item`` as a :class:`Message`.

    Accepts a Message, or a dict with Message fields; OpenAI-style ``tool_calls``
    (``{"id", "type": "function", "function": {"name", "arguments"}}``) are
    understood too.

    Raises:
        MemoryInputError: the dict is not a valid message (the field is named).
    """
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise MemoryInputError(f"a message is a Message or a dict, not {type(item).__name__}")
    data = dict(item)
    calls = data.get("tool_calls")
    if calls is None:
        data.pop("tool_calls", None)  # as the OpenAI SDK's message dicts carry it
    elif calls:
        if not isinstance(calls, list | tuple):
            raise MemoryInputError(
                f"invalid message: tool_calls must be a list, got {shown(calls)}"
            )
        data["tool_calls"] = [_tool_call(c) for c in calls]
    try:
        return msgspec.convert(data, Message)
    except msgspec.ValidationError as exc:
        raise MemoryInputError(f"invalid message: {exc}") from exc


def _tool_call(call: Any) -> Any:
    """A tool call as ToolCall fields; dict or list arguments become JSON text, as
    ``ToolCall(arguments={...})`` makes them."""
    if isinstance(call, ToolCall):
        return {"id": call.id, "name": call.name, "arguments": call.arguments}
    if isinstance(call, Mapping) and "function" in call:
        fn = call["function"]
        if not isinstance(fn, Mapping):
            raise MemoryInputError("a tool call's 'function' must be an object")
        call = {
            "id": call.get("id"),
            "name": fn.get("name"),
            "arguments": fn.get("arguments", "{}"),
        }
    if isinstance(call, Mapping) and isinstance(call.get("arguments"), dict | list):
        call = {**call, "arguments": ToolCall("-", "-", call["arguments"]).arguments}
    return call


def _batch(what: str, messages: object) -> list[Message]:
    """``messages`` as checked Message values (the size limit is the actor's to check)."""
    if isinstance(messages, Message | Mapping):
        batch = [to_message(messages)]
    elif isinstance(messages, str | bytes) or not isinstance(messages, Iterable):
        raise MemoryInputError(
            f"{what}: messages must be a Message, a dict or a list of them, got {shown(messages)}"
        )
    else:
        batch = [to_message(m) for m in messages]
    for i, m in enumerate(batch):
        try:
            admit(m)
        except MemoryInputError as exc:
            raise MemoryInputError(f"{what}: message {i}: {exc}") from None
    return batch


def counted_add(what: str, messages: object, config: MemoryConfig | None) -> Add:
    """The ``Add`` of ``messages`` (checked as :func:`_batch` does), each message's
    tokens counted here, where it is made, in ``config``'s encoding; None sends no
    counts (the memory counts them). A batch the memory will refuse (too many
    messages, or one over ``max_message_chars``) is sent uncounted: no tokenizing of
    refused input.

    Raises:
        MemoryInputError: a message is invalid (named).
    """
    batch = _batch(what, messages)
    if config is None or len(batch) > config.max_batch:
        return Add(messages=batch)
    limit = config.max_message_chars
    if any(message_chars(m) > limit for m in batch):
        return Add(messages=batch)
    counter = get_counter(config.encoding)
    return Add(
        messages=[m.with_tokens(count_tokens(m, counter)) for m in batch],
        encoding=counter.encoding,
    )


def sender_config(runtime: object) -> MemoryConfig | None:
    """The memory config ``runtime`` carries (a
    :class:`~actormem.actors.app.wiring.MemoryRuntime`'s ``app_config``), which the
    handle counts tokens by; None for a runtime without one."""
    config = getattr(runtime, "app_config", None)
    return config.memory if isinstance(config, AppConfig) else None


def _listed(value: object) -> object:
    """A list or tuple as a list (what the command holds); anything else unchanged,
    for the check to name."""
    return list(value) if isinstance(value, list | tuple) else value


def write_export(data: MemoryExport, path: str | Path) -> None:
    """Write an export as JSON, atomically (a temp file renamed over the target),
    creating the folders it goes in."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(_json_encoder.encode(data))
        tmp.replace(target)
    except OSError as exc:
        raise MemoryInputError(f"cannot write export to {target}: {exc.strerror}") from exc


def read_export(path: str | Path) -> MemoryExport:
    """Read an export written by :func:`write_export`.

    Raises:
        MemoryInputError: the file is missing, unreadable or not a valid export.
    """
    source = Path(path)
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise MemoryInputError(f"cannot read export {source}: {exc.strerror}") from exc
    try:
        return _export_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise MemoryInputError(f"{source} is not a valid memory export: {exc}") from exc


def _extra(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """``extra`` as the JSON object an export carries, or MemoryInputError."""
    if extra is None:
        return {}
    if not isinstance(extra, Mapping) or not all(isinstance(k, str) for k in extra):
        raise MemoryInputError(
            f"export: extra must be a dict with string keys or None, got {shown(extra)}"
        )
    try:
        decoded: dict[str, Any] = msgspec.json.decode(_json_encoder.encode(dict(extra)))
    except (TypeError, ValueError, OverflowError) as exc:
        raise MemoryInputError(f"export: extra must be JSON-able: {exc}") from exc
    return decoded


def delete_command(targets: tuple[object, ...]) -> Delete:
    """The command that deletes ``targets``: message ids (str) or indices (int).

    Raises:
        MemoryInputError: a target neither a str nor an int.
    """
    ids = [t for t in targets if isinstance(t, str)]
    indices = [t for t in targets if isinstance(t, int) and not isinstance(t, bool)]
    if len(ids) + len(indices) != len(targets):
        bad = next(t for t in targets if not isinstance(t, str | int) or isinstance(t, bool))
        raise MemoryInputError(
            f"delete: targets are message ids (str) or indices (int), got {shown(bad)}"
        )
    return Delete(ids=ids, indices=indices)


def load_source(agent: str, source: object) -> MemoryExport:
    """What a load sends: an export as given, read from a file, or made of messages.

    Raises:
        MemoryInputError: the file or the messages are invalid.
    """
    if isinstance(source, MemoryExport):
        return source
    if isinstance(source, str | Path):
        return read_export(source)
    return MemoryExport(agent=agent, working=_batch("load", source))
