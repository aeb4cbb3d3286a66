"""The context window: the newest whole units of the working view that fit a token
budget, after the leading system messages and with the recall blocks."""

from __future__ import annotations

from typing import Any

from actormem.actors.conversation import leading_system_count
from actormem.actors.errors import ContextBudgetError, MemoryInputError
from actormem.actors.memory.store import MessageStore
from actormem.actors.messages import Message
from actormem.actors.recall.agent import BLOCK_FRAMING, BLOCK_SHARE, AgentRecall
from actormem.runtime import TokenCounter
from actormem.runtime.tokens import REPLY_PRIMING_TOKENS

__all__ = ("context_window", "latest_query")


async def context_window(
    store: MessageStore,
    budget: int,
    query: str | None,
    recall: AgentRecall | None,
    counter: TokenCounter,
) -> list[dict[str, Any]]:
    """Return the OpenAI messages of a context within ``budget`` tokens.

    Args:
        store: the agent's messages.
        budget: the tokens the context may take, the reply priming included.
        query: what the recall blocks are ranked for (None: the latest question).
        recall: the agent's recall, or None when it has none yet (no blocks then).
        counter: counts the recall block's tokens.

    Raises:
        MemoryInputError: a budget not above the reply priming.
        ContextBudgetError: the system messages alone do not fit.
    """
    if budget <= REPLY_PRIMING_TOKENS:
        raise MemoryInputError(
            f"context: max_tokens must be > {REPLY_PRIMING_TOKENS} (the reply priming "
            f"every request pays), got {budget}"
        )
    working = store.working
    head = leading_system_count(working)
    remaining = budget - REPLY_PRIMING_TOKENS - sum(m.tokens for m in working[:head])
    if remaining < 0:
        raise ContextBudgetError(
            f"context: the system messages alone need {budget - remaining} tokens "
            f"with the reply priming; the budget is {budget}"
        )
    # A share of the budget is kept for the recall blocks (core memory, insights,
    # long-term memories), filled after the conversation is picked so that
    # nothing already in the context is repeated there.
    reserve = int(remaining * BLOCK_SHARE) if recall is not None else 0
    remaining -= reserve
    picked = _newest_units(working, head, remaining)
    out = [m.to_openai() for m in working[:head]]
    if reserve > BLOCK_FRAMING and recall is not None:
        shown = {m.id for unit in picked for m in unit}
        blocks = await recall.blocks(
            latest_query(working) if query is None else query,
            reserve - BLOCK_FRAMING,
            counter,
            shown,
            # The window is fixed by the view (its version and length) and budget.
            exclude_key=(store.version, len(working), budget),
        )
        if blocks:
            block = {"role": "system", "content": "\n\n".join(blocks)}
            if counter.count_message(block) <= reserve:
                out.append(block)
    for unit in reversed(picked):
        out.extend(m.to_openai() for m in unit)
    return out


def _newest_units(working: list[Message], head: int, remaining: int) -> list[list[Message]]:
    """Walk back from the newest message, one unit at a time, until ``remaining``
    tokens are spent; return the units taken, newest first.

    A tool result waits in ``answers`` until its assistant message is reached, so a
    call and its results are taken or dropped together.
    """
    picked: list[list[Message]] = []
    answers: dict[str, Message] = {}
    i = len(working) - 1
    while i >= head:
        m = working[i]
        i -= 1
        if m.role == "tool":
            answers[m.tool_call_id or ""] = m
            continue
        if m.tool_calls:
            unit = [m]
            for call in m.tool_calls:
                answer = answers.pop(call.id, None)
                if answer is None:
                    break
                unit.append(answer)
            else:
                cost = sum(x.tokens for x in unit)
                if cost > remaining:
                    break
                remaining -= cost
                picked.append(unit)
            # A call still waiting for results cannot be sent: skip the unit.
            continue
        if m.tokens > remaining:
            break
        remaining -= m.tokens
        picked.append([m])
    return picked


def latest_query(working: list[Message]) -> str:
    """The newest user or agent_call text: what recall is ranked for by default."""
    for i in range(len(working) - 1, -1, -1):
        if working[i].role in ("user", "agent_call"):
            return working[i].text()
    return ""
