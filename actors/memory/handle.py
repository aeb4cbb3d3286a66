"""The typed handle on one agent's memory: async methods that send commands.

``rt.memory("alice")`` returns one. Methods accept :class:`Message` values or
OpenAI-style dicts, check what they can before sending, and raise
:class:`MemoryInputError` naming what was wrong; the actor checks the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory._recalling import RecallOps
from actormem.actors.memory._sharing import SharingOps
from actormem.actors.memory.commands import (
    AddResult,
    Clear,
    Context,
    Delete,
    Export,
    Forget,
    Get,
    Load,
    MemoryExport,
    MemoryStats,
    Prune,
    PruneResult,
    Reload,
    Search,
    SetSummary,
    Stats,
    Update,
)
from actormem.actors.memory.exchange import (
    _batch,
    _extra,
    _listed,
    counted_add,
    read_export,
    sender_config,
    to_message,
    write_export,
)
from actormem.actors.memory.inputs import shown
from actormem.actors.messages import Message, Role

__all__ = ("MemoryHandle", "read_export", "to_message", "write_export")


class MemoryHandle(SharingOps, RecallOps):
    """One agent's memory, as seen from orchestration code.

    Args:
        runtime: the runtime hosting (or reaching) the memory actors.
        agent: the agent's name.
        timeout: seconds each call waits for the actor (the runtime's default).
    """

    __slots__ = ()

    async def add(
        self, messages: Message | Mapping[str, Any] | Iterable[Message | Mapping[str, Any]]
    ) -> AddResult:
        """Add one message or many (Message values or dicts) to the memory.

        Each message's tokens are counted here, in the memory's encoding, and the
        counts travel with the command (see ``[memory] verify_token_counts``).
        The ids of the messages are fixed here, in the command, before it is sent:
        the runtime's resends of an ask with no reply carry the same ids and store
        nothing twice. After an :class:`AskTimeoutError` the add was applied once
        or not at all; adding the same ``Message`` values again either adds them or
        raises ``MemoryInputError`` saying an id is already stored (so it was).

        Raises:
            MemoryInputError: a message is invalid or its id is already stored;
                nothing is added then.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(counted_add("add", messages, sender_config(self.runtime)))

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
        """Empty the working view; return how many messages went.

        With ``history=True`` also erase the original history, the offloads,
        long-term memory, episodes and held insights, wherever they are kept (the
        stored log and snapshot, the session file, the transport's copies of the
        agent's commands); what the agent shared with the pool stays.
        """
        return await self._ask(Clear(history=history))

    async def forget(self) -> int:
        """Erase the agent, as if it never existed (a right to be forgotten); return
        how many history messages were erased.

        Everything ``clear(history=True)`` erases goes, and the agent's counters,
        its stored state and its session file too; the pool removes the text of what
        it shared (and the copies other memories hold) and drops its subscriptions.
        A later call starts it empty.
        """
        return await self._ask(Forget())

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

    async def reload(self, offload_id: str) -> list[Message]:
        """The original messages behind an offload id (see the compressor)."""
        return await self._ask(Reload(offload_id=offload_id))
