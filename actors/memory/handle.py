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
    _extra,
    _listed,
    counted_add,
    delete_command,
    load_source,
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
        """Add one message or many to the memory.

        Each message's tokens are counted here, in the memory's encoding. The counts
        travel with the command (see ``[memory] verify_token_counts``). The ids of
        the messages are fixed here, before the command is sent. So the runtime's
        resends of an ask with no reply carry the same ids and store nothing twice.
        After an :class:`AskTimeoutError` the add was applied once or not at all.
        Adding the same ``Message`` values again then either adds them, or raises
        ``MemoryInputError`` saying an id is already stored.

        Args:
            messages: one message or an iterable of them, as ``Message`` values or
                OpenAI-style dicts.

        Returns:
            What was added: the ids and the tokens counted.

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
        """Messages matching every given filter, oldest first.

        Args:
            recent_n: only the last ``recent_n`` matching messages.
            roles: only messages with one of these roles.
            names: only messages with one of these speaker names.
            metadata: only messages whose metadata holds these keys and values.
            since: only messages at or after this time (seconds since the epoch).
            until: only messages at or before this time.
            important: only messages tagged ``important`` or at the threshold.
            scope: ``"working"`` (the working view) or ``"history"`` (the original).

        Returns:
            The matching messages, oldest first.

        Raises:
            MemoryInputError: a filter of the wrong type or out of range (named).
            AskTimeoutError: no reply within the handle's timeout.
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

        Args:
            n: how many messages, at least 0.

        Returns:
            Up to ``n`` messages, oldest first.

        Raises:
            MemoryInputError: ``n`` is not an int >= 0.
            AskTimeoutError: no reply within the handle's timeout.
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise MemoryInputError(f"recent: n must be an int >= 0, got {shown(n)}")
        return await self.get(recent_n=n)

    async def by_role(self, role: Role) -> list[Message]:
        """The working view's messages with this role.

        Args:
            role: ``system``, ``user``, ``assistant``, ``tool``, ``agent_call`` or
                ``agent_response``.

        Returns:
            The messages with that role, oldest first.

        Raises:
            MemoryInputError: ``role`` is not a known role.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self.get(roles=[role])

    async def important(self) -> list[Message]:
        """Messages tagged ``important`` or at or above the importance threshold.

        Returns:
            The important messages of the working view, oldest first.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
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
        """Find messages by text.

        Args:
            query: the text to look for; not empty.
            mode: ``"substring"`` (case-insensitive) or ``"ranked"`` (BM25).
            k: at most this many results, at least 1 (all by default).
            roles: only messages with one of these roles.
            scope: ``"working"`` (the working view) or ``"history"`` (the original).

        Returns:
            The matches: oldest first for a substring, best first when ranked.

        Raises:
            MemoryInputError: an empty query, ``k`` below 1, an unknown mode or scope.
            AskTimeoutError: no reply within the handle's timeout.
        """
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
        """Delete working-view messages by id or index, all or none.

        Args:
            *targets: message ids (str) or indices into the working view (int).

        Returns:
            How many messages were deleted.

        Raises:
            MemoryInputError: no target, a target neither a str nor an int, an id
                unknown or an index out of range.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(delete_command(targets))

    async def update(
        self,
        id: str,
        *,
        content: str | dict[str, Any] | list[Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
    ) -> Message:
        """Change one working-view message in place, atomically.

        Arguments left None stay as they were. The tokens are recounted, and the
        message rules and size limit apply as on ``add``. The original history keeps
        the original and gains an edit record: the edited message, with id
        ``<id>.edit<n>`` and metadata ``edit_of`` and ``edited_at``.

        Args:
            id: the message's id.
            content: the new content.
            metadata: the new metadata; it replaces the whole metadata (see
                :meth:`mark` to set or remove keys).
            importance: the new importance, 0..1.

        Returns:
            The message as updated.

        Raises:
            MemoryInputError: no message ``id`` in the working view, an argument of
                the wrong type, or an edited message the rules refuse (nothing changes).
            AskTimeoutError: no reply within the handle's timeout.
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
        """Set metadata keys of one working-view message in place.

        It is an update (see :meth:`update`).

        Args:
            id: the message's id.
            **marks: the keys to set and their JSON-able values.

        Returns:
            The message as updated.

        Raises:
            MemoryInputError: no message ``id`` in the working view, or values not JSON-able.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Update(id=id, set_metadata=marks))

    async def unmark(self, id: str, *keys: str) -> Message:
        """Remove metadata keys of one working-view message.

        Absent keys are ignored. It is an update (see :meth:`update`).

        Args:
            id: the message's id.
            *keys: the metadata keys to remove.

        Returns:
            The message as updated.

        Raises:
            MemoryInputError: no message ``id`` in the working view, or a key not a str.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Update(id=id, remove_metadata=list(keys)))

    async def set_summary(self, text: str, *, replaces: Sequence[str]) -> Message:
        """Compress by hand: replace working-view messages by one summary.

        The summary is an assistant message holding ``text`` and a reload hint, at
        the place of the first replaced message. The replaced messages are kept as
        an offload: ``reload(summary.metadata["reload_id"])`` returns them. The
        history is unchanged.

        Args:
            text: the summary; not empty.
            replaces: the ids of the messages it replaces.

        Returns:
            The summary message.

        Raises:
            MemoryInputError: ``text`` empty, no ids, an id unknown or twice, or ids
                that would split a tool call from its result (they are named).
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(
            SetSummary(text=text, replaces=_listed(replaces))  # type: ignore[arg-type]
        )

    async def clear(self, *, history: bool = False) -> int:
        """Empty the working view.

        With ``history=True`` it also erases the original history, the offloads,
        long-term memory, episodes and held insights, wherever they are kept. That
        includes the stored log and snapshot, the session file and the transport's
        copies of the agent's commands. What the agent shared with the pool stays.

        Args:
            history: also erase everything the agent holds, as above.

        Returns:
            How many messages left the working view.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Clear(history=history))

    async def forget(self) -> int:
        """Erase the agent, as if it never existed (a right to be forgotten).

        Everything ``clear(history=True)`` erases goes, and so do the agent's
        counters, its stored state and its session file. The pool removes the text
        of what it shared, and the copies other memories hold, and drops its
        subscriptions. A later call starts the agent empty.

        Returns:
            How many history messages were erased.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Forget())

    async def size(self) -> int:
        """Messages in the working view.

        Returns:
            The working view's length.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        return (await self.stats()).size

    async def stats(self) -> MemoryStats:
        """Sizes and token totals.

        Returns:
            The memory's sizes, token totals and counters.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Stats())

    async def export(
        self,
        path: str | Path | None = None,
        *,
        include_history: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> MemoryExport:
        """Return the memory's content, and write it as JSON to ``path`` if given.

        Args:
            path: a file to write the export to; missing folders are created.
            include_history: include the original history, not only the working view.
            extra: the caller's own JSON-able data, carried in the export and given
                back when it is read or loaded.

        Returns:
            The export.

        Raises:
            MemoryInputError: ``path`` is not a str, a Path or None, or ``extra`` is
                not JSON-able.
            AskTimeoutError: no reply within the handle's timeout.
        """
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
            source: a ``MemoryExport``, the path of an export file, or messages.
            overwrite: replace the working view instead of merging into it.

        Returns:
            How many messages entered the working view.

        Raises:
            MemoryInputError: the source is invalid; nothing changes then.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Load(data=load_source(self.agent, source), overwrite=overwrite))

    async def prune(self, max_tokens: int, *, preserve_system: bool = True) -> PruneResult:
        """Drop the oldest messages until the working view fits ``max_tokens``.

        Args:
            max_tokens: the budget, at least 1.
            preserve_system: keep the system messages at the start.

        Returns:
            What was dropped, and the tokens left.

        Raises:
            MemoryInputError: ``max_tokens`` is not an int >= 1.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Prune(max_tokens=max_tokens, preserve_system=preserve_system))

    async def context(
        self, max_tokens: int | None = None, *, query: str | None = None
    ) -> list[dict[str, Any]]:
        """The working view as an OpenAI message list within ``max_tokens``.

        After the system prompt comes one system message holding, as quoted data,
        core memory, the received insights and (static control) the long-term
        memories most relevant to ``query``.

        Args:
            max_tokens: the budget of the whole request, reply priming included
                (the memory's default when None).
            query: what to recall long-term memories for (by default the newest
                user message).

        Returns:
            Chat Completions messages (dicts), system first, every tool result after
            its call.

        Raises:
            ContextBudgetError: the system prompt and the newest message do not fit;
                its ``needed`` says how many tokens they take.
            MemoryInputError: ``max_tokens`` is not an int >= 1.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Context(max_tokens=max_tokens, query=query))

    async def reload(self, offload_id: str) -> list[Message]:
        """The original messages behind an offload id (see the compressor).

        Args:
            offload_id: the ``reload_id`` of an offloaded or summarized block.

        Returns:
            The original messages, oldest first.

        Raises:
            MemoryInputError: no block has that id.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(Reload(offload_id=offload_id))
