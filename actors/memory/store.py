"""An agent's messages: the append-only original history and the working view.

Dual storage, as in AutoContextMemory: the *original history* is append-only and
nothing rewrites it; the *working view* is what the agent sees, and prune, the
caller's edits (:mod:`~actormem.actors.memory.edits`) and the compressor rewrite
it. Every message's tokens are counted once, when it comes in (an edited one again),
and the working view's total is kept up to date as it changes, so budgets never
need a recount.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from actormem.actors.config import MemoryConfig
from actormem.actors.conversation import group_units, leading_system_count
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import EXPORT_VERSION, MemoryExport, PruneResult
from actormem.actors.messages import MAX_TIMESTAMP, Message, admit, count_tokens, message_chars
from actormem.runtime import TokenCounter

__all__ = ("MessageStore",)

_force_setattr: Final = msgspec.structs.force_setattr


class MessageStore:
    """The working view, the original history and the offload store of one agent.

    Args:
        config: the memory limits (batch size, message length).
        counter: counts each message's tokens once, when it comes in.

    Attributes:
        working: the working view, oldest first.
        working_tokens: the working view's token total.
        history: the original history (since the last wipe), oldest first.
        history_ids: the ids in ``history``.
        history_tokens: the history's token total.
        offloaded: offloaded blocks by offload id.
        version: bumped whenever the working view is rewritten (not on append):
            caches and compression results computed on an older view check it.
        history_skip: stored log entries a reload skips (snapshots written before
            a wipe rewrote the stored log).
        erased: the history was wiped since the last durable change: the stored log
            is replaced, and the store erases its other copies of it.
        log_pending: history messages not yet handed to the durable log.
        durable: the transport keeps this state (``log_pending`` is tracked).
        dirty: the stored snapshot is out of date beyond what replaying adds restores.
        peak_tokens: the most tokens the working view ever held.
        peak_size: the most messages the working view ever held.
        edited: ids of working messages that may differ from the history's
            message of that id (updated): the snapshot stores them whole.
    """

    __slots__ = (
        "_config",
        "_counter",
        "_history_summed",
        "_history_tokens",
        "_peak_size",
        "_peak_tokens",
        "dirty",
        "durable",
        "edited",
        "erased",
        "history",
        "history_ids",
        "history_skip",
        "log_pending",
        "offloaded",
        "version",
        "working",
        "working_tokens",
    )

    def __init__(self, config: MemoryConfig, counter: TokenCounter) -> None:
        self._config = config
        self._counter = counter
        self.working: list[Message] = []
        self.working_tokens = 0
        self.history: list[Message] = []
        self.history_ids: set[str] = set()
        # The history's total, summed up to how many of its messages (see history_tokens).
        self._history_tokens = 0
        self._history_summed = 0
        self.offloaded: dict[str, list[Message]] = {}
        self.version = 0
        self.history_skip = 0
        self.erased = False
        # Durable state (Redis transport): off until the transport restores the actor.
        self.durable = False
        self.log_pending: list[Message] = []
        self.dirty = False
        # The peaks as of the last time the working view could shrink (see peak_tokens).
        self._peak_tokens = 0
        self._peak_size = 0
        self.edited: set[str] = set()

    # An add leaves the history's total and the peaks below as they are: with many
    # agents each object an add reads is likely out of the processor's cache. They
    # are brought up to date when read, and the peaks also before the working view
    # is rewritten (the only way it shrinks).

    @property
    def history_tokens(self) -> int:
        """The history's token total."""
        history = self.history
        if self._history_summed < len(history):
            self._history_tokens += sum(m.tokens for m in history[self._history_summed :])
            self._history_summed = len(history)
        return self._history_tokens

    @history_tokens.setter
    def history_tokens(self, total: int) -> None:
        """Set the token total of the history as it is now."""
        self._history_tokens = total
        self._history_summed = len(self.history)

    @property
    def peak_tokens(self) -> int:
        """The most tokens the working view ever held."""
        return max(self._peak_tokens, self.working_tokens)

    @peak_tokens.setter
    def peak_tokens(self, tokens: int) -> None:
        self._peak_tokens = tokens

    @property
    def peak_size(self) -> int:
        """The most messages the working view ever held."""
        return max(self._peak_size, len(self.working))

    @peak_size.setter
    def peak_size(self, size: int) -> None:
        self._peak_size = size

    # -- writes -------------------------------------------------------------------

    def counted(
        self,
        messages: Sequence[Message],
        what: str,
        *,
        stored: bool = False,
        encoding: str | None = None,
    ) -> list[Message]:
        """Validate messages and return them with their token counts cached, each
        holding none of the sender's dicts or lists (:meth:`Message.detached`).

        ``stored``: the messages were stored before (a session file), so only their
        types and sizes are checked, not the rules :func:`admit` adds over time.
        ``encoding``: the one the sender counted the messages' ``tokens`` with
        (see :meth:`sent_count`).

        Raises:
            MemoryInputError: not a list of messages, too many, one too long, an
                id twice, or a sent count that verification refuses.
        """
        if not isinstance(messages, list | tuple):
            raise MemoryInputError(f"{what} takes a list of messages")
        if len(messages) > self._config.max_batch:
            raise MemoryInputError(
                f"{what} got {len(messages)} messages; at most {self._config.max_batch} at once"
            )
        limit = self._config.max_message_chars
        seen: set[str] = set()
        for i, m in enumerate(messages):
            if not isinstance(m, Message):
                raise MemoryInputError(f"{what}: item {i} is a {type(m).__name__}, not a Message")
            if m.id in seen:
                raise MemoryInputError(f"{what}: message id {m.id!r} appears twice")
            seen.add(m.id)
            try:
                size = message_chars(m)  # first: the rules below read every character
                if size > limit:
                    raise MemoryInputError(
                        f"message {m.id!r} has {size} characters (content, name, "
                        f"tool calls and metadata); the limit is {limit}"
                    )
                if not stored:
                    admit(m)
            except MemoryInputError as exc:
                raise MemoryInputError(f"{what}: message {i}: {exc}") from None
        # Counted only once every message passed: no tokenizing of refused input.
        out = []
        for i, m in enumerate(messages):
            try:
                out.append(self.sent_count(m, encoding).detached())
            except MemoryInputError as exc:
                raise MemoryInputError(f"{what}: message {i}: {exc}") from None
        return out

    def sent_count(self, message: Message, encoding: str | None) -> Message:
        """``message`` with its token count: the one it carries when the sender
        counted it in this memory's encoding (recounted and compared first with
        ``verify_token_counts``), else counted here.

        Raises:
            MemoryInputError: verification is on and the count carried is not the
                message's exact count.
        """
        counter = self._counter
        if encoding != counter.encoding or message.tokens < 0:
            return message.with_tokens(count_tokens(message, counter))
        if self._config.verify_token_counts:
            exact = count_tokens(message, counter)
            if message.tokens != exact:
                raise MemoryInputError(
                    f"message {message.id!r} carries a count of {message.tokens} tokens, "
                    f"but it has {exact} in {counter.encoding}"
                )
        return message

    def add_simple(self, messages: list[Message], encoding: str | None = None) -> Message | None:
        """Add ``messages`` when it is one valid, new, plain-text message (the hot
        path of every agent's turn) and return it counted; else add nothing and
        return None: the caller then takes :meth:`add`, with its checks.

        ``encoding``: see :meth:`sent_count`.

        Raises:
            MemoryInputError: the message's sent count is refused (nothing is added).
        """
        if type(messages) is not list or len(messages) != 1:
            return None
        m = messages[0]
        if (
            type(m) is not Message
            or type(m.content) is not str
            or m.tool_calls
            or m.metadata
            or m.url
            or not 0.0 <= m.timestamp <= MAX_TIMESTAMP
            or len(m.content)
            + (len(m.name) if m.name else 0)
            + (len(m.tool_call_id) if m.tool_call_id else 0)
            > self._config.max_message_chars
            or m.id in self.history_ids
        ):
            return None
        counter = self._counter
        if encoding != counter.encoding or m.tokens < 0:
            # sent_count()'s usual case, inline: not counted by the sender, counted here.
            tokens = count_tokens(m, counter)
        else:
            try:
                tokens = self.sent_count(m, encoding).tokens
            except MemoryInputError as exc:
                raise MemoryInputError(f"add: message 0: {exc}") from None
        # Message.detached() with the count, inline (plain text, no metadata): a copy
        # that skips __post_init__ and holds a metadata dict of its own.
        kept: Message = m.__copy__()  # type: ignore[attr-defined]  # msgspec's own
        _force_setattr(kept, "tokens", tokens)
        _force_setattr(kept, "metadata", {})
        m = kept
        # The effects of add() for one message, without the batch bookkeeping.
        self.working.append(m)
        self.working_tokens += m.tokens
        self.history_ids.add(m.id)
        self.history.append(m)
        if self.durable:
            self.log_pending.append(m)
        return m

    def append_history(self, messages: Sequence[Message]) -> None:
        """Add to the original history the messages it does not hold yet."""
        for m in messages:
            if m.id not in self.history_ids:
                self.history_ids.add(m.id)
                self.history.append(m)
                if self.durable:
                    self.log_pending.append(m)

    def add(self, messages: list[Message], encoding: str | None = None) -> list[Message]:
        """Append new messages to the working view and the history; return them counted
        (``encoding``: see :meth:`sent_count`).

        Raises:
            MemoryInputError: invalid messages (see :meth:`counted`), or an id
                already stored.
        """
        counted = self.counted(messages, "add", encoding=encoding)
        clash = [m.id for m in counted if m.id in self.history_ids]
        if clash:
            raise MemoryInputError(
                f"add: message id {clash[0]!r} is already stored"
                + (f" (and {len(clash) - 1} more)" if len(clash) > 1 else "")
            )
        self.working.extend(counted)
        self.working_tokens += sum(m.tokens for m in counted)
        self.append_history(counted)
        return counted

    def set_working(self, messages: list[Message]) -> None:
        """Rewrite the working view."""
        self.note_peak()  # before the view may shrink
        self.working = messages
        self.working_tokens = sum(m.tokens for m in messages)
        self.version += 1
        self.dirty = True

    def note_peak(self) -> None:
        """Raise the peaks to the working view's size now."""
        self._peak_tokens = self.peak_tokens
        self._peak_size = self.peak_size

    def delete(self, ids: list[str], indices: list[int]) -> int:
        """Drop messages from the working view by id or index; return how many.

        Raises:
            MemoryInputError: neither given, an index out of range or an id not there.
        """
        if not ids and not indices:
            raise MemoryInputError("delete needs ids or indices")
        n = len(self.working)
        doomed: set[int] = set()
        for index in indices:
            if not -n <= index < n:
                raise MemoryInputError(f"delete: index {index} is out of range for {n} messages")
            doomed.add(index % n)
        if ids:
            wanted = set(ids)
            for pos, m in enumerate(self.working):
                if m.id in wanted:
                    doomed.add(pos)
                    wanted.discard(m.id)
            if wanted:
                missing = sorted(wanted)
                raise MemoryInputError(
                    f"delete: no message with id {missing[0]!r} in the working view"
                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                )
        self.set_working([m for pos, m in enumerate(self.working) if pos not in doomed])
        return len(doomed)

    def clear(self, history: bool) -> int:
        """Empty the working view (and the history and offloads with ``history``);
        return how many working messages went."""
        removed = len(self.working)
        self.set_working([])
        if history:
            # Erased, not skipped: the stored log is replaced by what follows.
            self.erased = True
            self.history_skip = 0
            self.log_pending = []
            self.history = []
            self.history_ids = set()
            self.history_tokens = 0
            self.offloaded = {}
            self.edited = set()
        return removed

    def forget(self) -> int:
        """Erase everything, peaks included, as if the agent never existed; return
        how many history messages went."""
        erased = len(self.history)
        self.clear(history=True)
        self.peak_tokens = 0
        self.peak_size = 0
        return erased

    def load(self, data: MemoryExport, overwrite: bool, *, stored: bool = False) -> int:
        """Take in an export (over the working view with ``overwrite``, else after
        it); return how many working messages were loaded (``stored``: see
        :meth:`counted`).

        Raises:
            MemoryInputError: not an export, another export version, or invalid
                messages (nothing is changed then).
        """
        if not isinstance(data, MemoryExport):
            raise MemoryInputError("load takes a MemoryExport")
        if data.version != EXPORT_VERSION:
            raise MemoryInputError(
                f"load: export format version {data.version} is not supported "
                f"(this version reads {EXPORT_VERSION})"
            )
        # Validate everything before changing anything.
        working = self.counted(data.working, "load", stored=stored)
        history = (
            self.counted(data.history, "load (history)", stored=stored) if data.history else []
        )
        offloaded = {
            k: self.counted(v, "load (offloaded)", stored=stored) for k, v in data.offloaded.items()
        }
        if overwrite:
            self.set_working(working)
            loaded = len(working)
        else:
            have = {m.id for m in self.working}
            fresh = [m for m in working if m.id not in have]
            self.working.extend(fresh)
            self.working_tokens += sum(m.tokens for m in fresh)
            loaded = len(fresh)
        self.append_history(history)
        self.append_history(working)
        # Updated messages: the history holds their original under the same id.
        self.edited.update(
            m.metadata["edit_of"] for m in history if isinstance(m.metadata.get("edit_of"), str)
        )
        self.offloaded.update(offloaded)
        self.note_peak()
        return loaded

    def prune(self, max_tokens: int, preserve_system: bool) -> PruneResult:
        """Keep the newest whole units that fit ``max_tokens`` (and the leading
        system messages with ``preserve_system``).

        Raises:
            MemoryInputError: ``max_tokens`` below 1.
        """
        if max_tokens < 1:
            raise MemoryInputError(f"prune: max_tokens must be >= 1, got {max_tokens}")
        working = self.working
        head = leading_system_count(working) if preserve_system else 0
        budget = max_tokens - sum(m.tokens for m in working[:head])
        keep: set[int] = set(range(head))
        units = group_units(working[head:])
        positions = {id(m): head + i for i, m in enumerate(working[head:])}
        for unit in reversed(units):
            if unit.tokens > budget:
                break
            budget -= unit.tokens
            keep.update(positions[id(m)] for m in unit.messages)
        removed = len(working) - len(keep)
        if removed:
            self.set_working([m for pos, m in enumerate(working) if pos in keep])
        return PruneResult(removed=removed, working_tokens=self.working_tokens)

    # -- reads ----------------------------------------------------------------------

    def source(self, scope: str) -> list[Message]:
        """The messages of ``scope``: ``working``, ``history`` or ``offloaded``.

        Raises:
            MemoryInputError: another scope.
        """
        if scope == "working":
            return self.working
        if scope == "history":
            return self.history
        if scope == "offloaded":
            return [m for block in self.offloaded.values() for m in block]
        raise MemoryInputError(f"scope must be 'working', 'history' or 'offloaded', got {scope!r}")
