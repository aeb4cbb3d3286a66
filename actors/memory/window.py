"""The context window: the system prompt, the recall blocks, and the newest whole units
of the working view that fit a token budget.

The rules (:func:`context_window`):

- the *system prompt*, the system messages at the start of the working view, is
  always sent, first (see :mod:`actormem.actors.conversation`);
- the newest complete unit of the conversation is always sent; when the budget
  cannot hold it with the system prompt, :class:`ContextBudgetError` says how many
  tokens that smallest valid context needs;
- the recall blocks (core memory, insights, recalled long-term memories) take at
  most a quarter of what the system prompt leaves, never the newest unit's room,
  and only the tokens they actually use. The agent's own (core memory, long-term
  memories) go in one system message; the insights other agents shared go in a
  *user* message of their own, quoted as data with their sources: another agent
  never speaks with system authority;
- the rest goes to the conversation, newest unit first, back to the first unit
  that does not fit.
"""

from __future__ import annotations

from typing import Any, Final

from actormem.actors.conversation import leading_system_count
from actormem.actors.errors import ContextBudgetError, MemoryInputError
from actormem.actors.memory.store import MessageStore
from actormem.actors.messages import Message
from actormem.actors.recall.agent import BLOCK_FRAMING, BLOCK_SHARE, AgentRecall
from actormem.actors.recall.inbox import INSIGHTS_TAG
from actormem.runtime import TokenCounter
from actormem.runtime.tokens import REPLY_PRIMING_TOKENS

__all__ = ("context_window", "latest_query")

_INSIGHTS_OPEN: Final = f"<{INSIGHTS_TAG}>"


async def context_window(
    store: MessageStore,
    budget: int,
    query: str | None,
    recall: AgentRecall | None,
    counter: TokenCounter,
) -> list[dict[str, Any]]:
    """Return the OpenAI messages of a context within ``budget`` tokens.

    The list is empty only when the working view holds nothing that can be sent.

    Args:
        store: the agent's messages.
        budget: the tokens the context may take, the reply priming included.
        query: what the recall blocks are ranked for (None: the latest question).
        recall: the agent's recall, or None when it has none yet (no blocks then).
        counter: counts the recall block's tokens.

    Raises:
        MemoryInputError: a budget below 1.
        ContextBudgetError: the system prompt and the newest complete unit do not
            fit; its ``needed`` says how many tokens they take.
    """
    if budget < 1:
        raise MemoryInputError(f"context: max_tokens must be at least 1, got {budget}")
    working = store.working
    head = leading_system_count(working)
    pinned = REPLY_PRIMING_TOKENS + sum(m.tokens for m in working[:head])
    remaining = budget - pinned
    picked, newest = _newest_units(working, head, remaining)
    if remaining < 0 or (newest and not picked):
        needed = pinned + newest
        parts = [f"system prompt: {pinned - REPLY_PRIMING_TOKENS}"] if head else []
        if newest:
            parts.append(f"newest message, tool results included: {newest}")
        parts.append(f"reply priming: {REPLY_PRIMING_TOKENS}")
        raise ContextBudgetError(
            f"context: max_tokens is {budget}, but the smallest valid context needs "
            f"{needed} tokens ({', '.join(parts)})",
            needed=needed,
        )
    out = [m.to_openai() for m in working[:head]]
    if recall is not None:
        # The blocks never take the newest unit's room, nor more than a share.
        cap = min(int(remaining * BLOCK_SHARE), remaining - newest)
        if cap > _FRAMING:
            blocks, picked = await _with_blocks(
                store, budget, query, recall, counter, cap, remaining, picked
            )
            out.extend(blocks)
    for unit in reversed(picked):
        out.extend(m.to_openai() for m in unit)
    return out


#: The chat framing of the recall messages: the system one and the insights' user one.
_FRAMING: Final = 2 * BLOCK_FRAMING


def _messages(blocks: list[str]) -> list[dict[str, Any]]:
    """The recall blocks as messages: the agent's own in a system message, the
    insights other agents shared in a user message (quoted data, never system)."""
    own = [b for b in blocks if not b.startswith(_INSIGHTS_OPEN)]
    shared = [b for b in blocks if b.startswith(_INSIGHTS_OPEN)]
    out: list[dict[str, Any]] = []
    if own:
        out.append({"role": "system", "content": "\n\n".join(own)})
    if shared:
        out.append({"role": "user", "content": "\n\n".join(shared)})
    return out


async def _with_blocks(
    store: MessageStore,
    budget: int,
    query: str | None,
    recall: AgentRecall,
    counter: TokenCounter,
    cap: int,
    remaining: int,
    picked: list[list[Message]],
) -> tuple[list[dict[str, Any]], list[list[Message]]]:
    """Add the recall blocks to the widest window ``picked``: return their messages
    (none: nothing to show) and the units left for the conversation.

    The blocks are first asked for what the widest window leaves out; the window
    then gives up only the blocks' actual size. Should that push a core memory
    message out, the blocks are rendered again (in the same room) so they can quote it.
    """
    working = store.working
    text = latest_query(working) if query is None else query
    blocks = await recall.blocks(
        text,
        cap - _FRAMING,
        counter,
        {m.id for unit in picked for m in unit},
        # The widest window is fixed by the view (its version and length) and budget.
        exclude_key=(store.version, len(working), budget),
    )
    if not blocks:
        return [], picked
    messages = _messages(blocks)
    cost = sum(counter.count_message(m) for m in messages)
    if cost > cap:
        return [], picked
    kept = _first_units(picked, remaining - cost)
    if len(kept) < len(picked):
        core = {m.id for m in recall.episodes.core()}
        if any(m.id in core for unit in picked[len(kept) :] for m in unit):
            again = await recall.blocks(
                text, cost - _FRAMING, counter, {m.id for unit in kept for m in unit}
            )
            if again:
                redone = _messages(again)
                if sum(counter.count_message(m) for m in redone) <= cost:
                    messages = redone
    return messages, kept


def _first_units(units: list[list[Message]], room: int) -> list[list[Message]]:
    """The longest prefix of ``units`` whose tokens fit in ``room``."""
    for n, unit in enumerate(units):
        room -= sum(m.tokens for m in unit)
        if room < 0:
            return units[:n]
    return units


def _newest_units(
    working: list[Message], head: int, remaining: int
) -> tuple[list[list[Message]], int]:
    """Walk back from the newest message, one unit at a time, until ``remaining``
    tokens are spent.

    Returns the units taken, newest first, and the tokens of the newest complete
    unit (0 when the view after ``head`` has none).

    A tool result waits in ``answers`` until its assistant message is reached, so a
    call and its results are taken or dropped together; a call still waiting for
    results, and a result whose call is not there, are never taken.
    """
    picked: list[list[Message]] = []
    answers: dict[str, Message] = {}
    newest = 0
    i = len(working) - 1
    while i >= head:
        m = working[i]
        i -= 1
        if m.role == "tool":
            answers[m.tool_call_id or ""] = m
            continue
        if m.tool_calls:
            results = [r for c in m.tool_calls if (r := answers.pop(c.id, None)) is not None]
            if len(results) < len(m.tool_calls):
                continue  # a call still waiting for results cannot be sent
            unit = [m, *results]
            cost = m.tokens + sum(r.tokens for r in results)
        else:
            unit = [m]
            cost = m.tokens
        if not newest:
            newest = cost
        if cost > remaining:
            break
        remaining -= cost
        picked.append(unit)
    return picked, newest


def latest_query(working: list[Message]) -> str:
    """The newest user or agent_call text: what recall is ranked for by default."""
    for i in range(len(working) - 1, -1, -1):
        if working[i].role in ("user", "agent_call"):
            return working[i].text()
    return ""
