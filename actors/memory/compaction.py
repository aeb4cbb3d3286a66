"""Compressing an agent's working view: asking the compressor when a threshold is
crossed, and applying its result to the view it was computed from.

A compression is a *round*: its token (a secret) is recorded in the memory's
snapshot in the same commit as the command that started it, and the result,
told back as a :class:`CompressionDone` carrying the token, ends it in the commit
that applies it. So over Redis a round outlives its worker:

- a memory activated with a round in flight (its worker died, or it was
  passivated meanwhile) asks the compressor again for that round;
- whichever result of a round arrives first is applied (to the view as it is
  then, if its version still holds) and ends the round; a later result of the
  same round (the one the dead worker sent, or a redelivered one) changes nothing;
- a result computed from a view that was rewritten meanwhile is refused and a
  new round starts if the view is still over budget;
- a round whose ask failed (the compressor's worker died, say) is asked again a
  few times before the memory backs off.

The ask's time limit is not ``[compression] timeout``: that one bounds the
compression's own work, and the compressor enforces it from when it starts. A
round waiting behind others for a busy compressor takes longer; it does not fail
for it (see :data:`ASK_LIMIT_S`).
"""

from __future__ import annotations

import secrets
from typing import Any, Final

import msgspec
import structlog

from actormem.actors.compression import (
    CompressionConfig,
    CompressionOutcome,
    CompressRequest,
    compressor_address,
)
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import CompressionDone
from actormem.actors.memory.store import MessageStore
from actormem.runtime import ActorContext
from actormem.runtime.ids import new_id

__all__ = ("Compaction", "CompactionState")

log = structlog.get_logger("actormem.memory")

#: Asks of one round after a failed one, before the memory backs off.
RETRIES: Final = 2
#: How long a round's ask may wait for its reply: a day, so that time queued for a
#: busy compressor never fails a round. An ask still ends early with the
#: compressor's error, or when the runtime closes; the limit only stays finite for
#: the timers and reply TTLs it sets.
ASK_LIMIT_S: Final = 86_400.0
#: Tokens of ended rounds remembered, so their late results are known as such.
_ENDED_KEPT: Final = 4

#: Tokens of the rounds whose ask runs in this process: an actor activated again
#: while its own ask still runs (passivated meanwhile) does not ask twice.
_ASKING: set[str] = set()


class CompactionState(msgspec.Struct, kw_only=True):
    """The compressions' part of a memory snapshot. New fields go last, with defaults.

    Attributes:
        rounds: compressions started so far.
        pending: the token of the round in flight ("" for none).
        ended: tokens of the last rounds that ended, newest last.
    """

    rounds: int = 0
    pending: str = ""
    ended: list[str] = []


class Compaction:
    """One agent's compressions: at most one round in flight, the memory serving meanwhile.

    Args:
        agent: the agent's name.
        config: when and how to compress.
        store: the messages compressed.
        ctx: the memory actor's context (it asks the compressor).
        shards: the Redis shards the memories live on (0: in one process), for
            an automatic compressor pool (see :func:`compressor_address`).

    Attributes:
        compressions: compressions applied.
        tokens_saved: tokens they saved.
    """

    __slots__ = (
        "_attempts",
        "_config",
        "_ctx",
        "_ended",
        "_floor",
        "_fruitless",
        "_rounds",
        "_shards",
        "_store",
        "_token",
        "agent",
        "compressions",
        "enabled",
        "tokens_saved",
    )

    def __init__(
        self,
        agent: str,
        config: CompressionConfig,
        store: MessageStore,
        ctx: ActorContext,
        shards: int = 0,
    ) -> None:
        self.agent = agent
        self._config = config
        self._shards = shards
        #: Compression is on (read on every add, so a plain attribute).
        self.enabled = config.enabled
        self._store = store
        self._ctx = ctx
        # The round in flight ("" for none), rounds started, and the last ones ended.
        self._token = ""
        self._rounds = 0
        self._ended: list[str] = []
        # Asks of the round in flight so far.
        self._attempts = 0
        # After a compression that could not get under budget, wait for this many
        # messages before trying again (else every add would ask once more).
        self._floor = 0
        # Compressions in a row that could take nothing out: each doubles the wait.
        self._fruitless = 0
        self.compressions = 0
        self.tokens_saved = 0

    @property
    def compressing(self) -> bool:
        """A compression round is in flight."""
        return bool(self._token)

    # -- durable state ----------------------------------------------------------------

    def state(self) -> CompactionState:
        """The rounds as the memory's snapshot keeps them."""
        return CompactionState(rounds=self._rounds, pending=self._token, ended=list(self._ended))

    def restore(self, state: CompactionState | None) -> None:
        """Take back what :meth:`state` returned (None: a snapshot from before rounds
        were kept, with none in flight); :meth:`resume` then asks for a pending round."""
        if state is not None:
            self._rounds, self._token, self._ended = state.rounds, state.pending, state.ended
            self._attempts = 0

    def resume(self) -> None:
        """Ask the compressor for the round in flight, unless this process asks already."""
        token = self._token
        if token and token not in _ASKING:
            log.info("compression_resumed", agent=self.agent, round=self._rounds)
            self._ask()

    # -- rounds ------------------------------------------------------------------------

    def maybe_compress(self) -> None:
        """Start a round when a threshold is crossed; keep serving meanwhile."""
        cfg = self._config
        store = self._store
        size = len(store.working)
        if (
            not cfg.enabled
            or self._token
            or size <= self._floor
            or not cfg.over_budget(size, store.working_tokens)
        ):
            return
        self._token = secrets.token_hex(16)
        self._rounds += 1
        self._attempts = 0
        # The round joins the snapshot stored with the command that started it.
        store.dirty = True
        self._ask()

    def _ask(self) -> None:
        """Ask the compressor about the view as it is now, for the round in flight."""
        cfg = self._config
        store = self._store
        token = self._token
        version = store.version
        request = CompressRequest(
            agent=self.agent, messages=list(store.working), version=version, request=new_id()
        )
        address = compressor_address(self.agent, cfg.concurrency, self._shards, self._ctx.address)
        runtime = self._ctx.runtime
        self._attempts += 1

        async def ask() -> Any:
            _ASKING.add(token)
            try:
                return await runtime.ask(address, request, timeout=ASK_LIMIT_S)
            finally:
                _ASKING.discard(token)

        def done(outcome: Any, error: BaseException | None) -> CompressionDone:
            if error is None and (outcome.agent, outcome.request) != (self.agent, request.request):
                # A reply meant for another ask (a late one, to a worker that had the
                # same name before a restart) is no result of this round.
                reason = f"the compressor answered another request ({outcome.agent!r})"
                return CompressionDone(version=version, error=reason, token=token)
            if error is not None:
                reason = f"{type(error).__name__}: {error}"
                return CompressionDone(version=version, error=reason, token=token)
            return CompressionDone(version=version, outcome=outcome, token=token)

        self._ctx.pipe(ask, None, done)

    def done(self, message: CompressionDone) -> bool:
        """End the round the result belongs to: apply it to the prefix it was computed
        from, keeping what came after; a late result of an ended round changes nothing.
        Returns whether a result was applied.

        Raises:
            MemoryInputError: the message's token names no round of this memory.
        """
        token = message.token
        if not (self._token and secrets.compare_digest(token, self._token)):
            if any(secrets.compare_digest(token, t) for t in self._ended):
                log.info("compression_result_repeated", agent=self.agent)
                return False
            raise MemoryInputError("no compression with that token is in flight")
        if message.outcome is None and self._attempts <= RETRIES:
            log.info(
                "compression_retried", agent=self.agent, round=self._rounds, reason=message.error
            )
            self._ask()
            return False
        self._ended = [*self._ended, token][-_ENDED_KEPT:]
        self._token = ""
        return self._apply(message.version, message.outcome, message.error)

    def _apply(self, version: int, outcome: CompressionOutcome | None, error: str | None) -> bool:
        cfg = self._config
        store = self._store
        if outcome is None:
            # Nothing changed; wait for more messages before asking again.
            self._floor = len(store.working) + max(1, cfg.msg_threshold // 10)
            log.warning("compression_failed", agent=self.agent, reason=error)
            return False
        if version != store.version or len(store.working) < outcome.messages_before:
            # The view was rewritten meanwhile (delete, prune, clear, load): the
            # result no longer fits it. A new round starts if still needed.
            log.info("compression_discarded", agent=self.agent, reason="view changed")
            self.maybe_compress()
            return False
        added_since = store.working[outcome.messages_before :]
        store.set_working([*outcome.messages, *added_since])
        store.offloaded.update(outcome.offloaded)
        self.compressions += 1
        self.tokens_saved += max(0, outcome.tokens_saved)
        if outcome.under_budget:
            self._floor = self._fruitless = 0
        else:
            if outcome.strategies:
                self._fruitless = 0
            else:
                self._fruitless += 1
                if self._fruitless == 1:
                    # Said once; asking again every few messages changes nothing.
                    log.warning("compression_stuck", agent=self.agent, note=outcome.note)
            step = max(1, cfg.msg_threshold // 10) << min(self._fruitless, 8)
            self._floor = len(store.working) + min(step, cfg.msg_threshold)
        self.maybe_compress()
        return True
