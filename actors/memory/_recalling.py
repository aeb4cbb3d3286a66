"""A memory handle's long-term memory (with its keyed entries), memory tools,
episodes and run retention."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory._handle_base import HandleBase
from actormem.actors.memory.commands import (
    AnswerToolCall,
    DeleteEntry,
    EndRun,
    GetEntry,
    ListNamespaces,
    MemoryTools,
    PutEntry,
    RecallEpisode,
    Record,
    Retrieve,
    SearchEntries,
    StartEpisode,
    SummarizeEpisodes,
)
from actormem.actors.memory.exchange import _batch, _tool_call
from actormem.actors.memory.inputs import shown
from actormem.actors.messages import Message, ToolCall
from actormem.actors.recall.episodes import Episode
from actormem.actors.recall.keyed import (
    FoundEntry,
    KeyedEntry,
    check_key,
    check_namespace,
    check_value,
)
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

    # -- keyed long-term entries (actormem.actors.recall.keyed) ---------------------------

    async def put_entry(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        text: str | None = None,
        importance: float | None = None,
        ttl: float | None = None,
    ) -> KeyedEntry:
        """Store ``value`` (a JSON object) under (namespace, key) in long-term memory,
        replacing what was there; return the entry.

        Args:
            namespace: 1..16 non-empty labels.
            key: a non-empty string.
            value: a JSON object (at most 64 KiB as JSON).
            text: what :meth:`search_entries` matches (by default the value's strings).
            importance: 0..1, for the ranking (by default ``[longterm] default_importance``).
            ttl: seconds the entry lives after its last write or refreshing read
                (None: until deleted).

        Raises:
            MemoryInputError: an invalid argument, or the memory is full
                (``[longterm] max_entries``); nothing is stored then.
        """
        check_key(key)
        value = dict(value) if isinstance(value, Mapping) else value
        check_value(value)
        return await self._ask(
            PutEntry(
                namespace=_namespace(namespace),
                key=key,
                value=value,
                text=text,
                importance=importance,
                ttl=ttl,
            )
        )

    async def get_entry(
        self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = True
    ) -> KeyedEntry | None:
        """The entry under (namespace, key), or None; ``refresh_ttl`` restarts its ttl."""
        check_key(key)
        return await self._ask(
            GetEntry(namespace=_namespace(namespace), key=key, refresh_ttl=refresh_ttl)
        )

    async def delete_entry(self, namespace: Sequence[str], key: str) -> bool:
        """Delete the entry under (namespace, key); False when there was none."""
        check_key(key)
        return await self._ask(DeleteEntry(namespace=_namespace(namespace), key=key))

    async def search_entries(
        self,
        prefix: Sequence[str] = (),
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = True,
    ) -> list[FoundEntry]:
        """Entries whose namespace starts with ``prefix`` and whose value meets
        ``filter`` (equality, or ``{"$gt": x}`` and the like): ranked for ``query`` by
        recency, importance and relevance as :meth:`retrieve` ranks, or the newest
        first without a query."""
        return await self._ask(
            SearchEntries(
                prefix=_namespace(prefix, "namespace prefix"),
                query=query,
                filter=dict(filter) if isinstance(filter, Mapping) else filter,
                limit=limit,
                offset=offset,
                refresh_ttl=refresh_ttl,
            )
        )

    async def list_namespaces(
        self,
        prefix: Sequence[str] = (),
        suffix: Sequence[str] = (),
        *,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The namespaces of the entries, sorted, that start with ``prefix`` and end
        with ``suffix`` (a ``*`` label matches any), cut to ``max_depth`` labels."""
        return await self._ask(
            ListNamespaces(
                prefix=_namespace(prefix, "namespace prefix"),
                suffix=_namespace(suffix, "namespace suffix"),
                max_depth=max_depth,
                limit=limit,
                offset=offset,
            )
        )

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


def _namespace(labels: Sequence[str], what: str = "namespace") -> tuple[str, ...]:
    """``labels`` as a checked namespace tuple (a prefix or suffix may be empty)."""
    check_namespace(labels, what, empty=what != "namespace")
    return tuple(labels)
