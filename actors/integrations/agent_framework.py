"""Microsoft Agent Framework on agent memory (the optional extra ``agent-framework``).

Two context providers of ``agent-framework-core`` backed by one agent's
:class:`~actormem.actors.memory.handle.MemoryHandle`:

- :class:`ActormemHistoryProvider`, the chat message store: every run's input and
  response messages are added to the memory (function calls and their results as
  assistant ``tool_calls`` and ``tool`` messages), and the next run is given the
  memory's ``context()``: the conversation within a token budget, every function
  call next to its result, after the recall blocks (core memory, received
  insights, the long-term memories relevant to the new input) as quoted data.
- :class:`ActormemContextProvider`, for an agent whose history is kept elsewhere:
  before each run it adds the insights the agent received and its long-term
  memories relevant to the input as one user message of quoted data, and after the
  run records the exchange in long-term memory.

What an Agent Framework message holds beyond text, function calls and function
results (reasoning, images, hosted tool items) is not stored.

Importing this module without the extra raises :class:`MissingExtraError`, which
says how to install it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from actormem.actors.integrations._extras import MissingExtraError, require

require(
    "agent_framework",
    "agent-framework",
    "the Agent Framework adapter",
    major=("agent-framework-core", 1),
)

from agent_framework import AgentSession as _Session  # noqa: E402
from agent_framework import (  # noqa: E402  (after the extra is checked)
    Content,
    ContextProvider,
    HistoryProvider,
    Message,
    SessionContext,
    SupportsAgentRun,
)

from actormem.actors.integrations import _common  # noqa: E402
from actormem.actors.memory.handle import MemoryHandle  # noqa: E402
from actormem.runtime import TokenCounter  # noqa: E402

__all__ = (
    "ActormemContextProvider",
    "ActormemHistoryProvider",
    "MissingExtraError",
    "from_openai",
    "to_openai",
)

#: The tokens the recall message of :class:`ActormemContextProvider` may take by default.
DEFAULT_RECALL_TOKENS: Final = 1024


def _text(message: Message) -> str:
    return "\n".join(c.text for c in message.contents if c.type == "text" and c.text)


def _result_text(content: Content) -> str:
    if content.exception is not None:
        return f"Error: {content.exception}"
    result = content.result
    if isinstance(result, str):
        return result
    return json.dumps(result, default=str)


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Agent Framework messages as OpenAI-style message dicts for a memory.

    An assistant message's function calls become its ``tool_calls``; each function
    result becomes a ``tool`` message answering its call. The author's name is kept
    as ``name``. Other content than text, function calls and results is left out;
    a message left empty is dropped.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        text = _text(message)
        calls = [c for c in message.contents if c.type == "function_call" and c.call_id]
        results = [c for c in message.contents if c.type == "function_result" and c.call_id]
        named = {"name": message.author_name} if message.author_name else {}
        if calls:
            out.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [
                        {"id": c.call_id, "name": c.name or "", "arguments": c.arguments or "{}"}
                        for c in calls
                    ],
                    **named,
                }
            )
        elif text:
            role = message.role if message.role in ("system", "user", "assistant") else "user"
            out.append({"role": role, "content": text, **named})
        out.extend(
            {"role": "tool", "tool_call_id": c.call_id, "content": _result_text(c)} for c in results
        )
    return out


def from_openai(messages: Sequence[dict[str, Any]]) -> list[Message]:
    """OpenAI-style message dicts (a memory's ``context()``) as Agent Framework messages.

    ``tool_calls`` become function calls and ``tool`` messages function results,
    with the same call ids.
    """
    out: list[Message] = []
    for data in messages:
        role = data["role"]
        text = _common.content_text(data.get("content"))
        contents: list[Content] = [Content.from_text(text)] if text else []
        if role == "tool":
            contents = [Content.from_function_result(data["tool_call_id"], result=text)]
        for call in data.get("tool_calls") or ():
            function = call["function"]
            contents.append(
                Content.from_function_call(
                    call["id"], function["name"], arguments=function["arguments"]
                )
            )
        out.append(Message(role, contents, author_name=data.get("name")))
    return out


def _latest_text(context: SessionContext) -> str | None:
    for message in reversed(context.input_messages):
        text = _text(message)
        if text:
            return text
    return None


class ActormemHistoryProvider(HistoryProvider):
    """An agent's chat history kept in its actormem memory.

    Give it to an agent as a context provider (``Agent(..., context_providers=[...])``).
    The memory is the agent's whatever the session; each run adds its messages.

    Args:
        memory: the agent's memory (``runtime.memory("alice")``).
        max_tokens: the token budget of the context given to each run (the memory's
            configured ``max_tokens`` if None).
        source_id: the provider's id among the agent's context providers.
        load_messages, store_inputs, store_context_messages, store_context_from,
        store_outputs: as for any ``HistoryProvider``.

    A run whose new input and system prompt cannot fit ``max_tokens`` fails with the
    memory's :class:`~actormem.actors.errors.ContextBudgetError`; a message the
    memory refuses fails the run with its
    :class:`~actormem.actors.errors.MemoryInputError`, and nothing of that run's
    batch is stored.
    """

    def __init__(
        self,
        memory: MemoryHandle,
        *,
        max_tokens: int | None = None,
        source_id: str = "actormem",
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
    ) -> None:
        super().__init__(
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self.memory = memory
        self.max_tokens = max_tokens

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The memory's context within the budget, as Agent Framework messages;
        ``query=`` ranks the recalled memories (default: the newest user message)."""
        query = kwargs.get("query")
        return from_openai(await self.memory.context(self.max_tokens, query=query))

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Add ``messages`` to the memory, in one batch."""
        converted = to_openai(messages)
        if converted:
            await self.memory.add(converted)

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: _Session,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Give the run the memory's context, recall ranked for the new input."""
        history = await self.get_messages(
            context.session_id, state=state, query=_latest_text(context)
        )
        context.extend_messages(self, history)


class ActormemContextProvider(ContextProvider):
    """Received insights and long-term memories as context for each run.

    Args:
        memory: the agent's memory.
        k: at most this many insights and this many long-term memories.
        max_tokens: the most tokens the recall message takes.
        record: after each run, record its input and response in long-term memory.
        source_id: the provider's id among the agent's context providers.
    """

    def __init__(
        self,
        memory: MemoryHandle,
        *,
        k: int = 5,
        max_tokens: int = DEFAULT_RECALL_TOKENS,
        record: bool = True,
        source_id: str = "actormem-recall",
    ) -> None:
        super().__init__(source_id)
        self.memory = memory
        self.k = k
        self.max_tokens = max_tokens
        self.record = record
        self._counter = TokenCounter()

    async def recall(self, query: str | None) -> str | None:
        """The recall text for ``query``: the insights (quoted, with their sources)
        and long-term memories relevant to it, within ``max_tokens``; None if none."""
        return await _common.recall_text(self.memory, query, self.k, self.max_tokens, self._counter)

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: _Session,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Add the recall for the new input as one user message (data, not instructions)."""
        text = await self.recall(_latest_text(context))
        if text:
            context.extend_messages(self, [Message("user", [text])])

    async def after_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: _Session,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Record the run's input and text response in long-term memory."""
        if not self.record:
            return
        said = list(context.input_messages)
        if context.response is not None:
            said.extend(context.response.messages)
        texts = [m for m in to_openai(said) if m["role"] in ("user", "assistant") and m["content"]]
        if texts:
            await self.memory.record([{"role": m["role"], "content": m["content"]} for m in texts])
