"""AgentScope on agent memory (the optional extra ``agentscope``).

AgentScope 2 keeps an agent's conversation in its ``AgentState`` (``state.context``
and a compressed ``state.summary``) and plugs memory backends in as middleware.
:class:`ActormemMiddleware` is one, backed by one agent's
:class:`~actormem.actors.memory.handle.MemoryHandle`:

- after every reply it adds the messages the reply brought into ``state.context``
  (the input, the assistant's text, its tool calls and their results) to the
  memory, as OpenAI messages with every tool call next to its result;
- before every model call it adds the insights the agent received and its
  long-term memories relevant to the newest user message, as one user message of
  quoted data (for that call only; the agent's state does not keep it);
- after every reply it records the exchange in long-term memory;
- :meth:`ActormemMiddleware.restore` rebuilds a fresh agent's ``state.context``
  from the memory's context within a token budget (a restarted process picks the
  conversation up where the memory has it).

The memory's own operations (``get``, ``search``, ``delete``, ``mark``, ``clear``,
``export``/``load``, ``set_summary``) act on what was added. Runtime hints
(AgentScope's ``hint`` blocks) and thinking blocks are not stored.

Importing this module without the extra raises :class:`MissingExtraError`, which
says how to install it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final

from actormem.actors.integrations._extras import MissingExtraError, require

require("agentscope.agent", "agentscope", "the AgentScope adapter", major=("agentscope", 2))

from agentscope.agent import Agent  # noqa: E402  (after the extra is checked)
from agentscope.formatter import OpenAIChatFormatter  # noqa: E402
from agentscope.message import (  # noqa: E402
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolCallState,
    ToolResultBlock,
    ToolResultState,
)
from agentscope.middleware import MiddlewareBase  # noqa: E402

from actormem.actors.integrations import _common  # noqa: E402
from actormem.actors.memory.handle import MemoryHandle  # noqa: E402
from actormem.runtime import TokenCounter  # noqa: E402

__all__ = ("ActormemMiddleware", "MissingExtraError", "from_openai", "to_openai")

#: The tokens the recall message may take by default.
DEFAULT_RECALL_TOKENS: Final = 1024
#: The key of this middleware's data in ``AgentState.middle_context``.
STATE_KEY: Final = "actormem"
#: Blocks that are not part of the conversation (runtime hints, reasoning).
_SKIPPED_BLOCKS: Final = frozenset({"hint", "thinking"})
#: How the context's message of received insights starts (it is not the agent's).
_QUOTED: Final = "<shared_insights>"

_formatter = OpenAIChatFormatter()


async def to_openai(messages: list[Msg]) -> list[dict[str, Any]]:
    """AgentScope messages as OpenAI messages (AgentScope's own OpenAI formatter),
    runtime hints and thinking left out; an assistant message's tool calls become
    its ``tool_calls`` and each tool result a ``tool`` message after it."""
    kept = []
    for msg in messages:
        blocks = [b for b in msg.content if b.type not in _SKIPPED_BLOCKS]
        if blocks:
            kept.append(msg.model_copy(update={"content": blocks}))
    return await _formatter.format(kept) if kept else []


def from_openai(messages: list[dict[str, Any]], agent_name: str) -> list[Msg]:
    """OpenAI messages (a memory's ``context()``) as AgentScope messages, the way
    an AgentScope agent keeps them: one assistant message per reply, holding its
    tool calls, their results and its text; system messages are left out (the
    agent has its own)."""
    out: list[Msg] = []
    for data in messages:
        role = data["role"]
        text = _common.content_text(data.get("content"))
        if role == "tool":
            result = ToolResultBlock(
                id=data["tool_call_id"],
                name=data.get("name") or "",
                output=text,
                state=ToolResultState.SUCCESS,
            )
            if out and out[-1].role == "assistant":
                out[-1].content.append(result)
            continue
        if role == "system":
            continue
        blocks: list[Any] = [TextBlock(text=text)] if text else []
        for call in data.get("tool_calls") or ():
            fn = call["function"]
            blocks.append(
                ToolCallBlock(
                    id=call["id"],
                    name=fn["name"],
                    input=fn["arguments"],
                    state=ToolCallState.FINISHED,
                )
            )
        name = data.get("name") or (agent_name if role == "assistant" else "user")
        if role == "assistant" and out and out[-1].role == "assistant" and out[-1].name == name:
            out[-1].content.extend(blocks)  # one reply, one message
        elif blocks:
            out.append(Msg(name=name, content=blocks, role=role))
    return out


def _newest_user_text(messages: list[Msg]) -> str | None:
    for msg in reversed(messages):
        if msg.role == "user":
            text = "\n".join(b.text for b in msg.content if isinstance(b, TextBlock)).strip()
            if text:
                return text
    return None


class ActormemMiddleware(MiddlewareBase):
    """An AgentScope agent's conversation kept in its actormem memory.

    Give it to an agent: ``Agent(..., middlewares=[ActormemMiddleware(memory)])``.

    Args:
        memory: the agent's memory (``runtime.memory("alice")``).
        max_tokens: the token budget :meth:`restore` fills (the memory's configured
            ``max_tokens`` if None).
        recall: add received insights and relevant long-term memories to each
            model call.
        record: record each exchange (input and final text) in long-term memory.
        k: at most this many insights and this many long-term memories.
        recall_tokens: the most tokens the recall message takes.

    A message the memory refuses fails the reply with its
    :class:`~actormem.actors.errors.MemoryInputError` and nothing of that reply is
    stored; the agent keeps the messages, and the next reply offers them again.
    """

    def __init__(
        self,
        memory: MemoryHandle,
        *,
        max_tokens: int | None = None,
        recall: bool = True,
        record: bool = True,
        k: int = 5,
        recall_tokens: int = DEFAULT_RECALL_TOKENS,
    ) -> None:
        self.memory = memory
        self.max_tokens = max_tokens
        self.recall = recall
        self.record = record
        self.k = k
        self.recall_tokens = recall_tokens
        self._counter = TokenCounter()

    @staticmethod
    def _stored(agent: Agent) -> list[str]:
        """The ids of the agent's context messages already in the memory (kept in
        its state, so a saved and loaded state carries them)."""
        data: dict[str, Any] = agent.state.middle_context.setdefault(STATE_KEY, {})
        stored: list[str] = data.setdefault("stored", [])
        return stored

    async def restore(self, agent: Agent) -> int:
        """Set the agent's ``state.context`` to the memory's context within the
        budget (recall blocks and system messages left out); return how many
        messages it holds.

        Raises:
            ContextBudgetError: the newest message does not fit ``max_tokens``.
        """
        context = await self.memory.context(self.max_tokens)
        said = [
            m for m in context if not _common.content_text(m.get("content")).startswith(_QUOTED)
        ]
        messages = from_openai(said, agent.name)
        agent.state.context = messages
        agent.state.middle_context[STATE_KEY] = {"stored": [m.id for m in messages]}
        return len(messages)

    async def save(self, agent: Agent) -> int:
        """Add the agent's messages not yet in the memory (a reply waiting for a
        tool's permission or result is added once it ends); return how many
        messages that added to the memory."""
        if agent.state.has_awaiting_tool_calls(agent.name):
            return 0
        done = set(self._stored(agent))
        new = [m for m in agent.state.context if m.id not in done]
        converted = await to_openai(new)
        if converted:
            await self.memory.add(converted)
        # Only what the context still holds can come up again.
        agent.state.middle_context[STATE_KEY]["stored"] = [m.id for m in agent.state.context]
        return len(converted)

    async def recall_text(self, query: str | None) -> str | None:
        """The recall for ``query``: the received insights (quoted, with their
        sources) and the long-term memories relevant to it; None if none."""
        return await _common.recall_text(
            self.memory, query, self.k, self.recall_tokens, self._counter
        )

    async def on_reply(
        self,
        agent: Agent,
        input_kwargs: dict[str, Any],
        next_handler: Callable[..., AsyncGenerator[Any, None]],
    ) -> AsyncGenerator[Any, None]:
        """Run the reply, then add its messages to the memory and record it."""
        final: Msg | None = None
        async for item in next_handler(**input_kwargs):
            if isinstance(item, Msg) and item.role == "assistant":
                final = item
            yield item
        await self.save(agent)
        if self.record and final is not None:
            query = _newest_user_text(agent.state.context)
            said = [{"role": "user", "content": query}] if query else []
            text = final.get_text_content()
            if text:
                said.append({"role": "assistant", "content": text})
            if said:
                await self.memory.record(said)

    async def on_model_call(
        self,
        agent: Agent,
        input_kwargs: dict[str, Any],
        next_handler: Callable[..., Awaitable[Any]],
    ) -> Any:
        """Add the recall for the newest user message to this model call."""
        if self.recall:
            messages: list[Msg] = input_kwargs["messages"]
            text = await self.recall_text(_newest_user_text(messages))
            if text:
                note = Msg(name="memory", content=[TextBlock(text=text)], role="user")
                at = next((i for i, m in enumerate(messages) if m.role != "system"), 0)
                input_kwargs = {**input_kwargs, "messages": [*messages[:at], note, *messages[at:]]}
        return await next_handler(**input_kwargs)
