"""A memory handle's long-term memory, memory tools, episodes and run retention."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory._exchange import _batch, _tool_call
from actormem.actors.memory._handle_base import HandleBase
from actormem.actors.memory.commands import (
    AnswerToolCall,
    EndRun,
    MemoryTools,
    RecallEpisode,
    Record,
    Retrieve,
    StartEpisode,
    SummarizeEpisodes,
)
from actormem.actors.memory.inputs import shown
from actormem.actors.messages import Message, ToolCall
from actormem.actors.recall.episodes import Episode
from actormem.actors.recall.longterm import Recalled

__all__ = ("RecallOps",)


class RecallOps(HandleBase):
    """Long-term memory, memory tools, episodes and retention, seen from one agent."""

    __slots__ = ()

    async def record(
        self, messages: Message | Mapping[str, Any] | Iterable[Message | Mapping[str, Any]]
    ) -> int:
        """Record messages in long-term memory; returns how many new memories that made."""
        return await self._ask(Record(messages=_batch("record", messages)))

    async def retrieve(self, query: str, k: int | None = None) -> list[Recalled]:
        """Long-term memories for ``query``, ranked by recency, importance and relevance."""
        return await self._ask(Retrieve(query=query, k=k))

    async def memory_tools(self) -> list[dict[str, Any]]:
        """OpenAI tool schemas (``record_to_memory``, ``retrieve_from_memory``) to offer
        the model in agent_control and both modes; none in static_control."""
        return await self._ask(MemoryTools())

    async def answer_tool_call(self, call: ToolCall | Mapping[str, Any]) -> Message | None:
        """Run a memory tool call the model made; return its ``tool`` message (None if
        the call is not a memory tool). Add the result with :meth:`add` as usual."""
        if not isinstance(call, ToolCall):
            if not isinstance(call, Mapping):
                raise MemoryInputError(
                    f"answer_tool_call: call must be a ToolCall or a dict, got {shown(call)}"
                )
            try:
                call = msgspec.convert(_tool_call(call), ToolCall)
            except msgspec.ValidationError as exc:
                raise MemoryInputError(f"answer_tool_call: invalid tool call: {exc}") from exc
        return await self._ask(AnswerToolCall(call=call))

    # -- episodes and retention --------------------------------------------------------

    async def start_episode(self, **metadata: Any) -> Episode | None:
        """Close the current episode (returned if it held anything) and open a new one."""
        return await self._ask(StartEpisode(metadata=dict(metadata)))

    async def recall_episode(self, query: str, k: int = 1) -> list[Episode]:
        """Past episodes most relevant to ``query``, best first."""
        return await self._ask(RecallEpisode(query=query, k=k))

    async def summarize_episodes(self) -> list[str]:
        """A short summary of each closed episode."""
        return await self._ask(SummarizeEpisodes())

    async def end_run(self) -> None:
        """A run ended: ``single_run`` memories are cleared, ``persistent`` ones saved."""
        await self._ask(EndRun())
