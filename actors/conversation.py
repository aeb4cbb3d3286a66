"""Conversation structure: tool-call units, and the validity check for OpenAI message lists.

OpenAI's Chat Completions API rejects a request where a ``tool`` message does not
follow the assistant message whose ``tool_calls`` holds its id, or where an
assistant's tool call has no result. Everything that cuts a conversation
(context, prune, compression) works on *units* so it can never split such a pair:

- a unit is an assistant message with ``tool_calls`` together with the ``tool``
  messages answering those calls (moved up next to it, in call order), or
- any other single message.

A unit whose calls are not all answered yet, and a tool message whose call is
not in the conversation, are *incomplete*; they never reach an LLM.

System messages: the system messages at the start of a conversation are its
*system prompt*. Nothing cuts it (``context()`` always sends it, first; ``prune``
keeps it) and ``context()`` puts its recall blocks right after it. A system
message added after the conversation started is an ordinary message: it stays
where it was added, goes to the LLM there (Chat Completions accepts a system
message anywhere in the list) and is kept or cut like any other single message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actormem.actors.messages import Message

__all__ = ("Unit", "check_openai_messages", "group_units", "leading_system_count")


class Unit:
    """Messages that must stay together, with their token total.

    Attributes:
        messages: the messages, in the order they go to the LLM.
        tokens: the sum of their cached token counts.
        complete: False for an assistant whose calls are not all answered, or an
            orphan tool result.
        start: the working-view index of the unit's first message.
    """

    __slots__ = ("complete", "messages", "start", "tokens")

    def __init__(self, messages: list[Message], start: int, complete: bool = True) -> None:
        self.messages = messages
        self.start = start
        self.complete = complete
        self.tokens = sum(max(m.tokens, 0) for m in messages)

    def __repr__(self) -> str:
        roles = ",".join(m.role for m in self.messages)
        return f"Unit({roles}, tokens={self.tokens}, complete={self.complete})"


def leading_system_count(messages: Sequence[Message]) -> int:
    """Return how many messages at the start are system messages: the system prompt."""
    n = 0
    for m in messages:
        if m.role != "system":
            break
        n += 1
    return n


def group_units(messages: Sequence[Message]) -> list[Unit]:
    """Group a conversation into units (see the module doc), in conversation order.

    A tool result is placed right after the assistant message that called it,
    even when other messages came in between; a result whose call is unknown, or
    a second result for the same call, makes its own incomplete unit.
    """
    caller: dict[str, int] = {}  # call id -> index of the assistant that made it
    answer_of: dict[str, int] = {}  # call id -> index of its (first) tool result
    for index, m in enumerate(messages):
        if m.role == "assistant":
            for call in m.tool_calls:
                caller.setdefault(call.id, index)
        elif m.role == "tool" and m.tool_call_id is not None:
            made = caller.get(m.tool_call_id)
            if made is not None and made < index and m.tool_call_id not in answer_of:
                answer_of[m.tool_call_id] = index
    placed = set(answer_of.values())
    units: list[Unit] = []
    for index, m in enumerate(messages):
        if m.role == "tool":
            if index not in placed:
                units.append(Unit([m], index, complete=False))
            continue
        if m.role == "assistant" and m.tool_calls:
            group = [m]
            complete = True
            for call in m.tool_calls:
                at = answer_of.get(call.id)
                if at is None or caller[call.id] != index:
                    complete = False
                    continue
                group.append(messages[at])
            units.append(Unit(group, index, complete=complete))
            continue
        units.append(Unit([m], index))
    return units


def check_openai_messages(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Return what makes ``messages`` unacceptable to Chat Completions (empty: valid).

    Checks: the list is not empty; roles are known; every tool message directly
    follows (within the block of results) the assistant whose ``tool_calls``
    holds its id; every tool call is answered before the next non-tool message;
    no call is answered twice; content is present where needed. A system message
    may stand anywhere (see the module doc).
    """
    problems: list[str] = []
    waiting: set[str] = set()
    answered: set[str] = set()
    empty = True
    for i, m in enumerate(messages):
        empty = False
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            problems.append(f"[{i}] unknown role {role!r}")
            continue
        if role != "tool" and waiting:
            problems.append(f"[{i}] {role} message before tool results for {sorted(waiting)}")
            waiting.clear()
        if role == "system":
            if m.get("content") is None:
                problems.append(f"[{i}] system message without content")
            continue
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in waiting:
                what = "answered twice" if call_id in answered else "no matching tool call"
                problems.append(f"[{i}] tool message {call_id!r}: {what}")
            waiting.discard(str(call_id))
            answered.add(str(call_id))
            continue
        if role == "assistant" and m.get("tool_calls"):
            waiting = {c["id"] for c in m["tool_calls"]}
        elif m.get("content") is None:
            problems.append(f"[{i}] {role} message without content")
    if waiting:
        problems.append(f"[end] tool calls without results: {sorted(waiting)}")
    if empty:
        problems.append("no messages")
    return problems
