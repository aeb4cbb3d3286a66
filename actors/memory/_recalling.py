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
from actormem.actors.recall.keyed import FoundEntry, KeyedEntry
from actormem.actors.recall.keyed_checks import check_key, check_namespace, check_value
from actormem.actors.recall.longterm import Recalled

__all__ = ("RecallOps",)


class RecallOps(HandleBase):
    """Long-term memory, memory tools, episodes and retention, seen from one agent."""

    __slots__ = ()

    async def record(
        self, messages: Message | Mapping[str, Any] | Iterable[Message | Mapping[str, Any]]
    ) -> int:
        """Record messages in long-term memory.

        Args:
            messages: one message or many, as ``Message`` values or dicts.

        Returns:
            How many new memories that made.

        Raises:
            MemoryInputError: a message is invalid; nothing is recorded then.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Record(messages=_batch("record", messages)))

    async def retrieve(self, query: str, k: int | None = None) -> list[Recalled]:
        """Long-term memories for ``query``, ranked by recency, importance and relevance.

        Args:
            query: what to recall.
            k: at most this many, at least 1 (``[longterm]``'s default when None).

        Returns:
            The memories with their scores, best first.

        Raises:
            MemoryInputError: ``k`` below 1.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Retrieve(query=query, k=k))

    async def memory_tools(self) -> list[dict[str, Any]]:
        """OpenAI tool schemas to offer the model.

        They are ``record_to_memory`` and ``retrieve_from_memory``, in the
        ``agent_control`` and ``both`` modes; ``static_control`` offers none.

        Returns:
            The tool schemas, as dicts.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(MemoryTools())

    async def answer_tool_call(self, call: ToolCall | Mapping[str, Any]) -> Message | None:
        """Run a memory tool call the model made.

        Add the result with :meth:`add` as usual.

        Args:
            call: the call, as a ``ToolCall`` or an OpenAI-style dict.

        Returns:
            The call's ``tool`` message, or None if the call is no memory tool.

        Raises:
            MemoryInputError: the call is not a ToolCall or a dict, or is invalid.
            AskTimeoutError: no reply within the handle's timeout.
        """
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
            AskTimeoutError: no reply within the handle's timeout.
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
        """The entry under (namespace, key), or None.

        Args:
            namespace: 1..16 non-empty labels.
            key: a non-empty string.
            refresh_ttl: restart the entry's ttl.

        Returns:
            The entry, or None when there is none.

        Raises:
            MemoryInputError: an invalid namespace or key.
            AskTimeoutError: no reply within the handle's timeout.
        """
        check_key(key)
        return await self._ask(
            GetEntry(namespace=_namespace(namespace), key=key, refresh_ttl=refresh_ttl)
        )

    async def delete_entry(self, namespace: Sequence[str], key: str) -> bool:
        """Delete the entry under (namespace, key).

        Args:
            namespace: 1..16 non-empty labels.
            key: a non-empty string.

        Returns:
            True when there was an entry, else False.

        Raises:
            MemoryInputError: an invalid namespace or key.
            AskTimeoutError: no reply within the handle's timeout.
        """
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
        """Entries whose namespace starts with ``prefix`` and whose value meets ``filter``.

        With a query they are ranked as :meth:`retrieve` ranks; without one, the
        newest come first.

        Args:
            prefix: the namespace prefix; empty matches every entry.
            query: the text to rank entries for.
            filter: equality per key, or ``{"$gt": x}`` and the like.
            limit: at most this many.
            offset: skip this many first.
            refresh_ttl: restart the ttl of each entry found.

        Returns:
            The entries found, with their scores.

        Raises:
            MemoryInputError: an invalid prefix, limit or offset.
            AskTimeoutError: no reply within the handle's timeout.
        """
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
        """The namespaces of the entries, sorted.

        Args:
            prefix: only namespaces that start with these labels.
            suffix: only namespaces that end with these labels (``*`` matches any).
            max_depth: cut each namespace to this many labels.
            limit: at most this many.
            offset: skip this many first.

        Returns:
            The namespaces, as tuples of labels.

        Raises:
            MemoryInputError: an invalid prefix, suffix, depth, limit or offset.
            AskTimeoutError: no reply within the handle's timeout.
        """
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
        """Close the current episode and open a new one.

        Args:
            **metadata: JSON-able data kept with the new episode.

        Returns:
            The closed episode, or None if it held nothing.

        Raises:
            MemoryInputError: metadata that is not JSON-able.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(StartEpisode(metadata=dict(metadata)))

    async def recall_episode(self, query: str, k: int = 1) -> list[Episode]:
        """Past episodes most relevant to ``query``, best first.

        Args:
            query: what to recall.
            k: at most this many, at least 1.

        Returns:
            The episodes, best first.

        Raises:
            MemoryInputError: ``k`` below 1.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(RecallEpisode(query=query, k=k))

    async def summarize_episodes(self) -> list[str]:
        """A short summary of each closed episode.

        Returns:
            One summary per closed episode, oldest first.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(SummarizeEpisodes())

    async def end_run(self) -> None:
        """Tell the memory a run ended.

        ``single_run`` memories are cleared; ``persistent`` ones are saved.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        await self._ask(EndRun())


def _namespace(labels: Sequence[str], what: str = "namespace") -> tuple[str, ...]:
    """``labels`` as a checked namespace tuple (a prefix or suffix may be empty)."""
    check_namespace(labels, what, empty=what != "namespace")
    return tuple(labels)
