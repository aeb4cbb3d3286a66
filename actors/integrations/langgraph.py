"""LangGraph over agents' memories (the optional extra ``langgraph``).

- :class:`MemoryStore`: a LangGraph ``BaseStore`` whose items are keyed long-term
  entries of agents' memories (:mod:`actormem.actors.recall.keyed`). A namespace
  belongs to the agent ``agent_for(namespace)`` names: by default its first label.
  Items may have a time to live (LangGraph's ``ttl``, in minutes).
- :class:`MessageHistory`: a graph's conversation kept in an agent's memory. Its
  hooks store the graph's new messages and hand the model the memory's
  ``context()`` (trimmed to the budget, tool calls and their results together, with
  the recall blocks), so the graph needs no checkpointer for its messages.
- :func:`to_memory_messages` / :func:`to_langchain_messages`: the conversions.

Importing this module without the extra raises :class:`MissingExtraError`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from actormem.actors.errors import MemoryInputError
from actormem.actors.integrations._extras import MissingExtraError, require

require("langgraph.store.base", "langgraph", "the LangGraph integration", major=("langgraph", 1))

from langchain_core.messages import (  # noqa: E402 (only once the extra is known present)
    BaseMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from actormem.actors.app.wiring import MemoryRuntime  # noqa: E402
from actormem.actors.memory.handle import MemoryHandle  # noqa: E402
from actormem.actors.recall.keyed import KeyedEntry  # noqa: E402
from actormem.actors.recall.keyed_filters import value_text  # noqa: E402

__all__ = (
    "MemoryStore",
    "MessageHistory",
    "MissingExtraError",
    "first_label",
    "to_langchain_messages",
    "to_memory_messages",
)

#: History records beyond the state's messages a save looks back through.
_HISTORY_SLACK: Final = 16
#: LangGraph's time to live is in minutes, the memory's in seconds.
_SECONDS_PER_MINUTE: Final = 60.0


def first_label(namespace: tuple[str, ...]) -> str:
    """The default ``agent_for``: a namespace (or search prefix) belongs to the agent
    its first label names.

    Raises:
        MemoryInputError: the namespace is empty, or its first label is ``*``.
    """
    if not namespace or namespace[0] == "*":
        raise MemoryInputError(
            f"namespace {namespace!r} names no agent: its first label is the agent's name"
        )
    return namespace[0]


class MemoryStore(BaseStore):
    """A LangGraph store over agents' keyed long-term entries.

    ``put``/``get``/``search``/``delete``/``list_namespaces`` (and their ``a``
    versions) act on the memory of the agent the namespace belongs to: an item is
    the entry under (namespace, key), its value a JSON object. A search or a
    namespace listing reaches one agent's memory, so its prefix must name the agent.

    - ``search`` with a ``query`` ranks as the agent's long-term memory does
      (recency, importance, BM25 relevance) and gives each item its ``score``;
      the words matched are the value's strings, or the fields ``index`` names
      (dotted paths; ``index=False`` leaves the item out of ranked searches). With
      no query, the most recently written first.
    - ``filter`` keeps the items whose value has the given key values, or compares
      with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``.
    - ``ttl`` (minutes; ``ttl_config["default_ttl"]`` when not given): the item
      expires that long after it was last written, or read with ``refresh_ttl``
      (``ttl_config["refresh_on_read"]``, default true). An expired item is never
      returned; it is dropped from the memory on the agent's next keyed command.

    The memory's own checks apply: a key is 1..1024 characters, a value at most
    64 KiB as JSON, a namespace 1..16 labels of 1..256 printable characters; a bad
    one raises :class:`MemoryInputError`.

    The synchronous methods (``get``, ``put``...) are for code in another thread
    than the event loop of the runtime (LangGraph runs synchronous nodes and tools
    in threads); in a coroutine, use the ``a`` versions.

    Args:
        runtime: an open memory runtime (stays open while the store is used).
        agent_for: the agent a namespace (or a search or listing prefix) belongs to;
            by default :func:`first_label`.
        ttl: LangGraph's TTL config (``default_ttl`` in minutes, ``refresh_on_read``).
        timeout: seconds each memory call waits (the runtime's default).
    """

    supports_ttl = True

    def __init__(
        self,
        runtime: MemoryRuntime,
        *,
        agent_for: Callable[[tuple[str, ...]], str] = first_label,
        ttl: TTLConfig | None = None,
        timeout: float | None = None,
    ) -> None:
        self.runtime = runtime
        self.agent_for = agent_for
        self.ttl_config = ttl
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):  # else known on the first async call
            self._loop = asyncio.get_running_loop()

    def memory(self, namespace: tuple[str, ...]) -> MemoryHandle:
        """The memory of the agent ``namespace`` belongs to."""
        return self.runtime.memory(self.agent_for(tuple(namespace)), timeout=self.timeout)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; return their results in order."""
        self._loop = asyncio.get_running_loop()
        return [await self._run(op) for op in ops]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`abatch` from another thread than the runtime's event loop.

        Raises:
            RuntimeError: called on the event loop's own thread (it would wait for
                itself: use the ``a`` methods there), or before the store met its loop.
        """
        loop = self._loop
        if loop is None:
            raise RuntimeError(
                "MemoryStore: the synchronous API needs the runtime's event loop: make "
                "the store inside it, or call an async method (aget, aput...) first"
            )
        running = None
        with contextlib.suppress(RuntimeError):
            running = asyncio.get_running_loop()
        if running is loop:
            raise RuntimeError(
                "MemoryStore: a synchronous call on the event loop's own thread would "
                "block it: use aget, aput, asearch, adelete or alist_namespaces there"
            )
        return asyncio.run_coroutine_threadsafe(self.abatch(list(ops)), loop).result()

    async def _run(self, op: Op) -> Result:
        match op:
            case GetOp(namespace=namespace, key=key, refresh_ttl=refresh):
                entry = await self.memory(namespace).get_entry(namespace, key, refresh_ttl=refresh)
                return None if entry is None else _item(entry)
            case PutOp(namespace=namespace, key=key, value=value, index=index, ttl=ttl):
                if value is None:
                    await self.memory(namespace).delete_entry(namespace, key)
                    return None
                await self.memory(namespace).put_entry(
                    namespace,
                    key,
                    dict(value),
                    text=None if index is None else _indexed_text(value, index),
                    ttl=None if ttl is None else ttl * _SECONDS_PER_MINUTE,
                )
                return None
            case SearchOp():
                found = await self.memory(op.namespace_prefix).search_entries(
                    op.namespace_prefix,
                    op.query,
                    filter=op.filter,
                    limit=op.limit,
                    offset=op.offset,
                    refresh_ttl=op.refresh_ttl,
                )
                return [_search_item(f.entry, f.score) for f in found]
            case ListNamespacesOp():
                return await self._namespaces(op)
        raise MemoryInputError(f"MemoryStore does not run {type(op).__name__}")

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefix: tuple[str, ...] = ()
        suffix: tuple[str, ...] = ()
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                prefix = tuple(condition.path)
            else:
                suffix = tuple(condition.path)
        return await self.memory(prefix).list_namespaces(
            prefix, suffix, max_depth=op.max_depth, limit=op.limit, offset=op.offset
        )


def _when(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)


def _item(entry: KeyedEntry) -> Item:
    return Item(
        value=entry.value,
        key=entry.key,
        namespace=entry.namespace,
        created_at=_when(entry.created),
        updated_at=_when(entry.updated),
    )


def _search_item(entry: KeyedEntry, score: float | None) -> SearchItem:
    return SearchItem(
        namespace=entry.namespace,
        key=entry.key,
        value=entry.value,
        created_at=_when(entry.created),
        updated_at=_when(entry.updated),
        score=score,
    )


def _indexed_text(value: Mapping[str, Any], index: Any) -> str:
    """The words a ranked search matches for a put's ``index``: none for False, else
    the strings of the fields its dotted paths name (``a.b``, ``a[0]``, ``a[*]``)."""
    if index is False:
        return ""
    if not isinstance(index, list | tuple) or not all(isinstance(p, str) for p in index):
        raise MemoryInputError(f"index must be False, None or a list of field paths, got {index!r}")
    return " ".join(value_text(v) for path in index for v in _field(value, path))


def _field(value: Any, path: str) -> list[Any]:
    """The values at a dotted ``path`` of ``value`` (none when it is absent)."""
    found = [value]
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        step: list[Any] = []
        for v in found:
            if part == "[*]" and isinstance(v, list):
                step.extend(v)
            elif part.startswith("[") and part.endswith("]") and isinstance(v, list):
                with contextlib.suppress(ValueError, IndexError):
                    step.append(v[int(part[1:-1])])
            elif isinstance(v, dict) and part in v:
                step.append(v[part])
        found = step
    return found


# -- message history -----------------------------------------------------------------------


def to_memory_messages(messages: Iterable[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as the OpenAI-style dicts a memory handle adds, each with
    the LangChain message's ``id`` (when it has one) as the memory message's id.

    Raises:
        MemoryInputError: a message LangChain cannot express as an OpenAI message.
    """
    out = []
    for m in messages:
        try:
            data = dict(convert_to_openai_messages(m))
        except (ValueError, TypeError, NotImplementedError) as exc:
            raise MemoryInputError(
                f"cannot store a {type(m).__name__} as a chat message: {exc}"
            ) from exc
        if m.id:
            data["id"] = m.id
        out.append(data)
    return out


def to_langchain_messages(messages: Iterable[Mapping[str, Any]]) -> list[BaseMessage]:
    """OpenAI-style message dicts (what ``context()`` returns) as LangChain messages."""
    return convert_to_messages([dict(m) for m in messages])


class MessageHistory:
    """A LangGraph graph's conversation, kept in an agent's memory.

    The graph's state holds the messages of the current run; the agent's memory
    holds the whole conversation, durably, and gives the model its ``context()``:
    the leading system message, the recall blocks, and the newest messages within
    the token budget, every tool result after the call that asked for it. Each run
    passes only the new input (no checkpointer needed for the messages).

    With ``create_react_agent``, pass ``pre_model_hook=history.pre_model_hook``
    and ``post_model_hook=history.post_model_hook``. In a graph of your own, call
    :meth:`sync` in the model's node and :meth:`save` on its reply.

    The memory tells stored messages by their ids: the state's messages need ids
    (LangGraph's ``add_messages`` gives every message one).

    Args:
        runtime: an open memory runtime.
        agent: the agent whose memory holds the conversation; None: the run
            config's ``configurable["thread_id"]`` names it.
        max_tokens: the context's token budget (the memory's ``max_tokens`` by default).
        timeout: seconds each memory call waits (the runtime's default).
    """

    def __init__(
        self,
        runtime: MemoryRuntime,
        agent: str | None = None,
        *,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.max_tokens = max_tokens
        self.timeout = timeout

    def memory(self, config: RunnableConfig | None = None) -> MemoryHandle:
        """The memory of the agent this history (or the run's ``thread_id``) names.

        Raises:
            MemoryInputError: no agent was given and the config has no thread_id.
        """
        agent = self.agent
        if agent is None:
            agent = ((config or {}).get("configurable") or {}).get("thread_id")
            if not isinstance(agent, str):
                raise MemoryInputError(
                    "MessageHistory has no agent: give one, or run the graph with "
                    'config={"configurable": {"thread_id": AGENT}}'
                )
        return self.runtime.memory(agent, timeout=self.timeout)

    async def save(
        self, messages: Sequence[BaseMessage], config: RunnableConfig | None = None
    ) -> int:
        """Add to the memory the messages it does not hold yet; return how many.

        Raises:
            MemoryInputError: a message cannot be stored (the memory's message).
        """
        memory = self.memory(config)
        if not messages:
            return 0
        # The messages are the newest of the conversation: the history's tail holds
        # any stored before, with room for edit records and messages added elsewhere.
        window = 2 * len(messages) + _HISTORY_SLACK
        held = {m.id for m in await memory.get(recent_n=window, scope="history")}
        new = [m for m in to_memory_messages(messages) if m.get("id") not in held]
        if new:
            await memory.add(new)
        return len(new)

    async def context(self, config: RunnableConfig | None = None) -> list[BaseMessage]:
        """The memory's context for the next model call, as LangChain messages."""
        return to_langchain_messages(await self.memory(config).context(self.max_tokens))

    async def sync(
        self, messages: Sequence[BaseMessage], config: RunnableConfig | None = None
    ) -> list[BaseMessage]:
        """:meth:`save` the messages, then return the :meth:`context`."""
        await self.save(messages, config)
        return await self.context(config)

    async def pre_model_hook(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """A ``create_react_agent`` pre-model hook: store the state's new messages and
        give the model the memory's context (``llm_input_messages``; the state's
        messages stay as they are)."""
        return {"llm_input_messages": await self.sync(_messages_of(state), config)}

    async def post_model_hook(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """A ``create_react_agent`` post-model hook: store the model's reply."""
        await self.save(_messages_of(state), config)
        return {}


def _messages_of(state: Any) -> list[BaseMessage]:
    messages = (
        state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    )
    if not isinstance(messages, list):
        raise MemoryInputError("the graph's state has no 'messages' list")
    return messages
