"""Compressing an agent's working view: asking the compressor when a threshold is
crossed, and applying its result to the view it was computed from."""

from __future__ import annotations

import secrets
from typing import Any

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

__all__ = ("Compaction",)

log = structlog.get_logger("actormem.memory")


class Compaction:
    """One agent's compressions: at most one in flight, the memory serving meanwhile.

    Args:
        agent: the agent's name.
        config: when and how to compress.
        store: the messages compressed.
        ctx: the memory actor's context (it asks the compressor).

    Attributes:
        compressing: a compression is in flight.
        compressions: compressions applied.
        tokens_saved: tokens they saved.
    """

    __slots__ = (
        "_config",
        "_ctx",
        "_floor",
        "_fruitless",
        "_store",
        "_token",
        "agent",
        "compressing",
        "compressions",
        "enabled",
        "tokens_saved",
    )

    def __init__(
        self, agent: str, config: CompressionConfig, store: MessageStore, ctx: ActorContext
    ) -> None:
        self.agent = agent
        self._config = config
        #: Compression is on (read on every add, so a plain attribute).
        self.enabled = config.enabled
        self._store = store
        self._ctx = ctx
        self.compressing = False
        self._token = ""
        # After a compression that could not get under budget, wait for this many
        # messages before trying again (else every add would ask once more).
        self._floor = 0
        # Compressions in a row that could take nothing out: each doubles the wait.
        self._fruitless = 0
        self.compressions = 0
        self.tokens_saved = 0

    def maybe_compress(self) -> None:
        """Ask the compressor when a threshold is crossed; keep serving meanwhile."""
        cfg = self._config
        store = self._store
        size = len(store.working)
        if (
            not cfg.enabled
            or self.compressing
            or size <= self._floor
            or not cfg.over_budget(size, store.working_tokens)
        ):
            return
        self.compressing = True
        token = self._token = secrets.token_hex(16)
        version = store.version
        request = CompressRequest(agent=self.agent, messages=list(store.working), version=version)
        address = compressor_address(self.agent, cfg.concurrency)
        runtime = self._ctx.runtime

        async def ask() -> Any:
            return await runtime.ask(address, request, timeout=cfg.timeout + 5)

        def done(outcome: Any, error: BaseException | None) -> CompressionDone:
            if error is not None:
                reason = f"{type(error).__name__}: {error}"
                return CompressionDone(version=version, error=reason, token=token)
            return CompressionDone(version=version, outcome=outcome, token=token)

        self._ctx.pipe(ask, wrap=done)

    def done(self, message: CompressionDone) -> None:
        """Apply a compression to the prefix it was computed from; keep what came after.

        Raises:
            MemoryInputError: no compression with the message's token is in flight.
        """
        if not self.compressing or not secrets.compare_digest(message.token, self._token):
            raise MemoryInputError("no compression with that token is in flight")
        self.compressing = False
        self._apply(message.version, message.outcome, message.error)

    def _apply(self, version: int, outcome: CompressionOutcome | None, error: str | None) -> None:
        cfg = self._config
        store = self._store
        if outcome is None:
            # Nothing changed; wait for more messages before asking again.
            self._floor = len(store.working) + max(1, cfg.msg_threshold // 10)
            log.warning("compression_failed", agent=self.agent, reason=error)
            return
        if version != store.version or len(store.working) < outcome.messages_before:
            # The view was rewritten meanwhile (delete, prune, clear, load): the
            # result no longer fits it. The next add asks again if still needed.
            log.info("compression_discarded", agent=self.agent, reason="view changed")
            self.maybe_compress()
            return
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
