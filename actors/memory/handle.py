"""The typed handle on one agent's memory: async methods that send commands.

``rt.memory("alice")`` returns one. Methods accept :class:`Message` values or
OpenAI-style dicts, check what they can before sending, and raise
:class:`MemoryInputError` naming what was wrong; the actor checks the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import (
    Add,
    AddResult,
    AnswerToolCall,
    Clear,
    Context,
    Delete,
    EndRun,
    Export,
    Get,
    HeldInsights,
    Load,
    MemoryExport,
    MemoryStats,
    MemoryTools,
    Prune,
    PruneResult,
    RecallEpisode,
    Record,
    Reload,
    Retrieve,
    Search,
    SetSummary,
    StartEpisode,
    Stats,
    SummarizeEpisodes,
    Update,
    Vouch,
)
from actormem.actors.memory.inputs import check_command, shown
from actormem.actors.messages import Message, Role, ToolCall, admit
from actormem.actors.pool.commands import (
    AgentCommand,
    QueryInsights,
    RegisterFact,
    Share,
    ShareResult,
    Subscribe,
    SubscriptionState,
    Unsubscribe,
)
from actormem.actors.pool.insights import Insight
from actormem.actors.recall.episodes import Episode
from actormem.actors.recall.longterm import Recalled
from actormem.runtime import Command, Runtime

__all__ = ("MemoryHandle", "read_export", "to_message", "write_export")

R = TypeVar("R")
A = TypeVar("A", bound=AgentCommand)

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


class MemoryHandle:
    """One agent's memory, as seen from orchestration code.

    Args:
        runtime: the runtime hosting (or reaching) the memory actors.
        agent: the agent's name.
        timeout: seconds each call waits for the actor (the runtime's default).
    """

    __slots__ = ("address", "agent", "pool", "runtime", "timeout")

    def __init__(self, runtime: Runtime, agent: str, timeout: float | None = None) -> None:
        if not isinstance(agent, str) or not agent.strip():
            raise MemoryInputError("an agent name is a non-empty string")
        if len(agent) > 256 or any(ord(c) < 32 for c in agent):
            raise MemoryInputError(
                f"invalid agent name {agent[:40]!r}: at most 256 printable characters"
            )
        if timeout is not None and (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not 0 < timeout < math.inf
        ):
            raise MemoryInputError(
                f"timeout must be a positive number of seconds or None, got {shown(timeout)}"
            )
        self.runtime = runtime
        self.agent = agent
        self.address = f"memory/{agent}"
        self.timeout = timeout
        #: The insight pool this agent shares with.
        self.pool = "pool/main"

    def __repr__(self) -> str:
        return f"MemoryHandle({self.agent!r})"

    async def _ask(self, command: Command[R]) -> R:
        check_command(command)
        return await self.runtime.ask(self.address, command, self.timeout)

    async def _ask_pool(self, command: Command[R]) -> R:
        check_command(command)
        return await self.runtime.ask(self.pool, command, self.timeout)

    async def add(
        self, messages: Message | Mapping[str, Any] | Iterable[Message | Mapping[str, Any]]
    ) -> AddResult:
        """Add one message or many (Message values or dicts) to the memory.

        Raises:
            MemoryInputError: a message is invalid or its id is already stored;
                nothing is added then.
        """
        return await self._ask(Add(messages=_batch("add", messages)))

    async def get(
        self,
        *,
        recent_n: int | None = None,
        roles: Sequence[Role] | None = None,
        names: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        since: float | None = None,
        until: float | None = None,
        important: bool = False,
        scope: str = "working",
    ) -> list[Message]:
        """Messages matching every given filter, oldest first (see :class:`Get`).

        Raises:
            MemoryInputError: a filter of the wrong type or out of range (named).
        """
        return await self._ask(
            Get(
                recent_n=recent_n,
                roles=_listed(roles),  # type: ignore[arg-type]  # checked in _ask
                names=_listed(names),  # type: ignore[arg-type]
                metadata=dict(metadata) if isinstance(metadata, Mapping) else metadata,
                since=since,
                until=until,
                important=important,
                scope=scope,  # type: ignore[arg-type]
            )
        )

    async def recent(self, n: int) -> list[Message]:
        """The last ``n`` messages of the working view.

        Raises:
            MemoryInputError: ``n`` is not an int >= 0.
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise MemoryInputError(f"recent: n must be an int >= 0, got {shown(n)}")
        return await self.get(recent_n=n)

    async def by_role(self, role: Role) -> list[Message]:
        """The working view's messages with this role."""
        return await self.get(roles=[role])

    async def important(self) -> list[Message]:
        """Messages tagged ``important`` or at/above the importance threshold."""
        return await self.get(important=True)

    async def search(
        self,
        query: str,
        *,
        mode: str = "substring",
        k: int | None = None,
        roles: Sequence[Role] | None = None,
        scope: str = "working",
    ) -> list[Message]:
        """Find messages by text: ``substring`` (case-insensitive) or BM25 ``ranked``."""
        return await self._ask(
            Search(
                query=query,
                mode=mode,  # type: ignore[arg-type]  # checked in _ask
                k=k,
                roles=_listed(roles),  # type: ignore[arg-type]
                scope=scope,  # type: ignore[arg-type]
            )
        )

    async def delete(self, *targets: str | int) -> int:
        """Delete working-view messages by id (str) or index (int); all or none.

        Raises:
            MemoryInputError: no target, a target neither a str nor an int, an id
                unknown or an index out of range.
        """
        ids = [t for t in targets if isinstance(t, str)]
        indices = [t for t in targets if isinstance(t, int) and not isinstance(t, bool)]
        if len(ids) + len(indices) != len(targets):
            bad = next(t for t in targets if not isinstance(t, str | int) or isinstance(t, bool))
            raise MemoryInputError(
                f"delete: targets are message ids (str) or indices (int), got {shown(bad)}"
            )
        return await self._ask(Delete(ids=ids, indices=indices))

    async def update(
        self,
        id: str,
        *,
        content: str | dict[str, Any] | list[Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
    ) -> Message:
        """Change one working-view message in place, atomically; return it updated.

        Arguments left None stay as they were; ``metadata`` replaces the whole
        metadata (see :meth:`mark` to set or remove keys). The tokens are recounted
        and the message rules and size limit apply as on ``add``. The original
        history keeps the original and gains an edit record (the edited message,
        id ``<id>.edit<n>``, metadata ``edit_of`` and ``edited_at``).

        Raises:
            MemoryInputError: no message ``id`` in the working view, an argument of
                the wrong type, or an edited message the rules refuse (nothing changes).
        """
        return await self._ask(
            Update(
                id=id,
                content=content,
                metadata=dict(metadata) if isinstance(metadata, Mapping) else metadata,
                importance=importance,
            )
        )

    async def mark(self, id: str, **marks: Any) -> Message:
        """Set metadata keys of one working-view message in place (an update, see
        :meth:`update`); return it updated.

        Raises:
            MemoryInputError: no message ``id`` in the working view, or values not JSON-able.
        """
        return await self._ask(Update(id=id, set_metadata=marks))

    async def unmark(self, id: str, *keys: str) -> Message:
        """Remove metadata keys of one working-view message (absent keys are
        ignored; an update, see :meth:`update`); return it updated.

        Raises:
            MemoryInputError: no message ``id`` in the working view, or a key not a str.
        """
        return await self._ask(Update(id=id, remove_metadata=list(keys)))

    async def set_summary(self, text: str, *, replaces: Sequence[str]) -> Message:
        """Compress by hand: replace the working-view messages ``replaces`` by one
        summary (an assistant message: ``text`` and a reload hint) at the place of
        the first of them; return it. The replaced messages are kept as an offload:
        ``reload(summary.metadata["reload_id"])`` returns them. The history is unchanged.

        Raises:
            MemoryInputError: ``text`` empty, no ids, an id unknown or twice, or ids
                that would split a tool call from its result (they are named).
        """
        return await self._ask(
            SetSummary(text=text, replaces=_listed(replaces))  # type: ignore[arg-type]
        )

    async def clear(self, *, history: bool = False) -> int:
        """Empty the working view (and, with ``history=True``, the original history)."""
        return await self._ask(Clear(history=history))

    async def size(self) -> int:
        """Messages in the working view."""
        return (await self.stats()).size

    async def stats(self) -> MemoryStats:
        """Sizes and token totals."""
        return await self._ask(Stats())

    async def export(
        self,
        path: str | Path | None = None,
        *,
        include_history: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> MemoryExport:
        """Return the memory's content, and write it as JSON to ``path`` if given
        (missing folders are created); ``extra`` is the caller's own JSON-able data,
        carried in the export and given back when it is read or loaded."""
        if path is not None and not isinstance(path, str | Path):
            raise MemoryInputError(f"export: path must be a str, a Path or None, got {shown(path)}")
        carried = _extra(extra)
        data: MemoryExport = await self._ask(Export(include_history=include_history))
        if carried:
            data = msgspec.structs.replace(data, extra=carried)
        if path is not None:
            write_export(data, path)
        return data

    async def load(
        self,
        source: MemoryExport | str | Path | Iterable[Message | Mapping[str, Any]],
        *,
        overwrite: bool = False,
    ) -> int:
        """Load an export (object or JSON file) or a list of messages.

        Args:
            overwrite: replace the working view instead of merging into it.

        Returns:
            How many messages entered the working view.

        Raises:
            MemoryInputError: the source is invalid; nothing changes then.
        """
        if isinstance(source, MemoryExport):
            data = source
        elif isinstance(source, str | Path):
            data = read_export(source)
        else:
            data = MemoryExport(agent=self.agent, working=_batch("load", source))
        return await self._ask(Load(data=data, overwrite=overwrite))

    async def prune(self, max_tokens: int, *, preserve_system: bool = True) -> PruneResult:
        """Drop the oldest messages until the working view fits ``max_tokens``."""
        return await self._ask(Prune(max_tokens=max_tokens, preserve_system=preserve_system))

    async def context(
        self, max_tokens: int | None = None, *, query: str | None = None
    ) -> list[dict[str, Any]]:
        """The working view as an OpenAI message list within ``max_tokens``.

        After the system prompt comes one system message holding, as quoted data,
        core memory, the received insights and (static control) the long-term
        memories most relevant to ``query`` (the newest user message by default).

        Raises:
            ContextBudgetError: the system prompt and the newest message do not fit;
                its ``needed`` says how many tokens they take.
        """
        return await self._ask(Context(max_tokens=max_tokens, query=query))

    # -- the insight pool ------------------------------------------------------------

    async def _vouched(self, command: A) -> A:
        """``command`` as this agent's memory vouched for it, to send to the pool.

        The pool takes a command that acts for an agent only from that agent's
        memory actor (see :mod:`actormem.actors.pool.vouch`), so nobody can share as, or
        subscribe, another agent.
        """
        vouched = await self._ask(Vouch(command=command))
        if not isinstance(vouched, type(command)):
            raise TypeError(
                f"memory/{self.agent} vouched a {type(vouched).__name__} "
                f"for a {type(command).__name__}"
            )
        return vouched

    async def share(
        self,
        insight: str,
        topic: str = "general",
        importance: float = 0.5,
        *,
        source_message_ids: Sequence[str] = (),
    ) -> ShareResult:
        """Share what this agent learned; the pool sends it to the topic's subscribers.

        The pool records this agent as the source (vouched for by its memory
        actor), drops exact and near duplicates and keeps per-topic limits.
        """
        vouched = await self._vouched(
            Share(
                text=insight,
                source=self.agent,
                topic=topic,
                importance=importance,
                source_message_ids=(
                    tuple(source_message_ids)
                    if isinstance(source_message_ids, list | tuple)
                    else source_message_ids  # type: ignore[arg-type]  # refused in _ask
                ),
            )
        )
        return await self._ask_pool(vouched)

    async def register_fact(self, fact: str, importance: float = 1.0) -> ShareResult:
        """Register a fact every agent the pool knows receives (MARSYS's coordinated facts)."""
        vouched = await self._vouched(
            RegisterFact(text=fact, source=self.agent, importance=importance)
        )
        return await self._ask_pool(vouched)

    async def subscribe(self, *topics: str) -> SubscriptionState:
        """Receive the pool's insights on these topics (``*``, the default, is every topic)."""
        vouched = await self._vouched(Subscribe(agent=self.agent, topics=topics or ("*",)))
        return await self._ask_pool(vouched)

    async def unsubscribe(self, *topics: str) -> SubscriptionState:
        """Stop receiving these topics (``*``, the default, is all of them)."""
        vouched = await self._vouched(Unsubscribe(agent=self.agent, topics=topics or ("*",)))
        return await self._ask_pool(vouched)

    async def insights(self, topic: str = "*", k: int = 5) -> list[Insight]:
        """The pool's most important insights on ``topic`` (every topic by default)."""
        found = await self._ask_pool(QueryInsights(topic=topic, k=k))
        return list(found)

    async def held_insights(self, query: str | None = None, k: int = 10) -> list[Insight]:
        """The insights this agent received, most relevant to ``query`` first."""
        return await self._ask(HeldInsights(query=query, k=k))

    # -- long-term memory ------------------------------------------------------------

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

    async def reload(self, offload_id: str) -> list[Message]:
        """The original messages behind an offload id (see the compressor)."""
        return await self._ask(Reload(offload_id=offload_id))
