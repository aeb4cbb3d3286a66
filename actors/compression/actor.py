"""The compressor actor: a small pool of them serves every agent memory's compression asks.

The lead's app registers the kind once::

    rt.register(COMPRESSOR_KIND, compressor_factory(config.compression))

and a memory actor asks ``compressor_address(agent, concurrency, shards, home)`` with a
:class:`CompressRequest`. Each actor compresses one view at a time; the pool's
size bounds how many compressions (and LLM requests) run at once. The actors of
a pool share one circuit breaker, so a failing LLM endpoint is given up on once,
not once per actor.

The pool's size is ``[compression] concurrency``, or with ``concurrency = 0``
(automatic) one compressor per Redis shard, on the shard of the memories it
serves, or :data:`LOCAL_COMPRESSORS` in one process.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from typing import Any, Final

import anyio
import msgspec
import structlog

from actormem.actors.compression.config import CompressionConfig
from actormem.actors.compression.engine import compress
from actormem.actors.compression.llm import CircuitBreaker, LLMSummarizer
from actormem.actors.compression.protocol import CompressionOutcome, CompressRequest
from actormem.actors.compression.summarizers import OfflineSummarizer, Summarizer
from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import count_tokens
from actormem.actors.metrics import ActorCounts
from actormem.runtime import Actor, ActorContext, TokenCounter, get_counter

__all__ = (
    "COMPRESSOR_KIND",
    "LOCAL_COMPRESSORS",
    "CompressorActor",
    "compressor_address",
    "compressor_factory",
    "make_summarizer",
)

log = structlog.get_logger("actormem.compression")

#: The actor kind the compressor pool is registered under.
COMPRESSOR_KIND: Final = "compressor"


#: The compressors of an automatic pool (``concurrency = 0``) in one process.
LOCAL_COMPRESSORS: Final = 6


def compressor_address(agent: str, concurrency: int, shards: int = 0, home: str = "") -> str:
    """Return the address of the pool member that serves ``agent``.

    Args:
        agent: the agent whose memory asks.
        concurrency: the pool's size; 0 for automatic: over Redis (``shards`` > 0)
            one compressor per shard, on the shard of ``home``, so compressions run
            in the worker that runs the memory and scale with the workers; in one
            process (``shards`` = 0) :data:`LOCAL_COMPRESSORS`.
        shards: the Redis shards (``[redis] shards``); 0 in one process.
        home: the asking memory's address (needed with ``concurrency = 0`` over Redis).

    The hash is stable across processes (CRC-32, not Python's salted ``hash``),
    so every worker sends one agent's asks to the same compressor.

    Raises:
        ValueError: ``concurrency`` or ``shards`` is negative, or ``home`` is
            missing where it is needed.
    """
    if concurrency < 0 or shards < 0:
        raise ValueError(f"concurrency and shards must be >= 0, got {concurrency} and {shards}")
    if concurrency == 0 and shards:
        # Over Redis only: an in-process runtime loads no Redis module.
        from actormem.runtime.redis.keys import shard_of

        if not home:
            raise ValueError("an automatic pool over Redis needs the asking memory's address")
        return f"{COMPRESSOR_KIND}/{_keys_by_shard(shards)[shard_of(home, shards)]}"
    size = concurrency or LOCAL_COMPRESSORS
    return f"{COMPRESSOR_KIND}/{zlib.crc32(agent.encode()) % size}"


@functools.cache
def _keys_by_shard(shards: int) -> tuple[int, ...]:
    """For each shard, the smallest compressor key whose address lives on it."""
    from actormem.runtime.redis.keys import shard_of

    keys: dict[int, int] = {}
    n = 0
    while len(keys) < shards:
        keys.setdefault(shard_of(f"{COMPRESSOR_KIND}/{n}", shards), n)
        n += 1
    return tuple(keys[shard] for shard in range(shards))


def make_summarizer(
    config: CompressionConfig,
    counter: TokenCounter,
    breaker: CircuitBreaker | None = None,
) -> Summarizer:
    """Build the summarizer the config asks for (the LLM one falls back offline)."""
    offline = OfflineSummarizer(counter)
    if config.summarizer == "openai":
        return LLMSummarizer(config.llm, counter, fallback=offline, breaker=breaker)
    return offline


class CompressorActor(Actor):
    """Answers :class:`CompressRequest` with a :class:`CompressionOutcome`.

    Args:
        ctx: the actor's context.
        config: the compression config.
        breaker: the pool's shared circuit breaker for the LLM summarizer.
        encoding: the token encoding the memories count with (``[memory] encoding``),
            so summaries are counted as the messages they replace.
        counts: where compressions and tokens saved are counted (the runtime's).

    Raises (to the asker):
        MemoryInputError: the message is not a CompressRequest.
    """

    def __init__(
        self,
        ctx: ActorContext,
        config: CompressionConfig,
        breaker: CircuitBreaker | None = None,
        encoding: str | None = None,
        counts: ActorCounts | None = None,
    ) -> None:
        super().__init__(ctx)
        self.config = config
        self._counts = counts or ActorCounts()
        self._breaker = breaker
        self._counter = get_counter(encoding)
        self._summarizer: Summarizer | None = None

    async def on_start(self) -> None:
        """Make the summarizer (the LLM client opens connections lazily).

        The LLM one is made in a thread: importing ``openai`` takes about a second of
        the process, which would otherwise stall every actor (and, over Redis, the
        lease renewals) of the event loop.
        """
        make = functools.partial(make_summarizer, self.config, self._counter, self._breaker)
        if self.config.summarizer == "openai":
            self._summarizer = await anyio.to_thread.run_sync(make)
        else:
            self._summarizer = make()

    async def on_stop(self) -> None:
        """Close the summarizer's connections."""
        summarizer, self._summarizer = self._summarizer, None
        if summarizer is not None:
            await summarizer.aclose()

    async def receive(self, message: Any) -> CompressionOutcome:
        """Compress the request's view; see :func:`actormem.actors.compression.compress`."""
        if not isinstance(message, CompressRequest):
            raise MemoryInputError(
                f"the compressor takes CompressRequest, got {type(message).__name__}"
            )
        if self._summarizer is None:
            await self.on_start()
        assert self._summarizer is not None
        if not self.config.enabled:
            return self._unchanged(message, "compression is disabled")
        outcome = await compress(
            message.messages,
            config=self.config,
            counter=self._counter,
            summarizer=self._summarizer,
            version=message.version,
            agent=message.agent,
        )
        outcome = msgspec.structs.replace(outcome, agent=message.agent, request=message.request)
        fields = {
            "agent": message.agent,
            "version": message.version,
            "strategies": outcome.strategies,
            "passes": outcome.passes,
            "tokens_before": outcome.tokens_before,
            "tokens_after": outcome.tokens_after,
            "saved_tokens": outcome.tokens_saved,
            "messages_before": outcome.messages_before,
            "messages_after": outcome.messages_after,
            "offloaded": len(outcome.offloaded),
            "latency_s": round(outcome.latency_s, 4),
            "summarizer": outcome.summarizer,
            "fell_back": outcome.fell_back,
            "under_budget": outcome.under_budget,
        }
        if outcome.strategies:
            self._counts.compressions += 1
            self._counts.tokens_saved += outcome.tokens_saved
            log.debug("compression_applied", **fields)
            if not outcome.under_budget:
                log.warning("compression_over_budget", note=outcome.note, **fields)
        else:
            # Nothing could be taken out; the memory says so once (compression_stuck).
            log.debug("compression_noop", note=outcome.note, **fields)
        return outcome

    def _unchanged(self, request: CompressRequest, note: str) -> CompressionOutcome:
        view = [
            m if m.tokens >= 0 else m.with_tokens(count_tokens(m, self._counter))
            for m in request.messages
        ]
        tokens = sum(m.tokens for m in view)
        return CompressionOutcome(
            version=request.version,
            messages=view,
            offloaded={},
            strategies=[],
            passes=0,
            tokens_before=tokens,
            tokens_after=tokens,
            messages_before=len(view),
            messages_after=len(view),
            under_budget=not self.config.over_budget(len(view), tokens),
            summarizer=self.config.summarizer,
            fell_back=False,
            latency_s=0.0,
            note=note,
            agent=request.agent,
            request=request.request,
        )


def compressor_factory(
    config: CompressionConfig, encoding: str | None = None, counts: ActorCounts | None = None
) -> Callable[[ActorContext], Actor]:
    """Return the factory to register the compressor kind with (one breaker per pool);
    ``encoding`` is the memories' token encoding (default ``cl100k_base``), ``counts``
    where the pool's compressions are counted."""
    breaker = CircuitBreaker(config.llm.breaker_failures, config.llm.breaker_reset)
    counts = counts or ActorCounts()

    def factory(ctx: ActorContext) -> Actor:
        return CompressorActor(ctx, config, breaker, encoding, counts)

    return factory
