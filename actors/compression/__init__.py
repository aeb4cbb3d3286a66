"""The compressor: AutoContextMemory's five strategies, offload and reload, summarizers.

An agent's memory actor asks a compressor actor (``compressor/<i>``) with a
:class:`CompressRequest` when its working view crosses a threshold; the answer is
a :class:`CompressionOutcome` whose view replaces the snapshot it was computed
from. :func:`compress` is the same pipeline without an actor.

Wiring (what the memory actor does)::

    rt.register(COMPRESSOR_KIND, compressor_factory(config))    # once, per runtime

    if config.over_budget(len(working), working_tokens) and not in_flight:
        request = CompressRequest(agent=name, messages=list(working), version=v)
        ctx.pipe(lambda: ctx.ref(compressor_address(name, config.concurrency))
                 .ask(request, timeout=86_400), wrap=...)  # queueing is no failure
    # on the outcome, if its version is still current:
    working = outcome.messages + working[len(request.messages):]
    offload_store.update(outcome.offloaded)

An agent gets offloaded content back through the ``context_reload`` tool
(:data:`CONTEXT_RELOAD_TOOL`); :func:`reload_tool_result` answers the call from
the offload store.
"""

from actormem.actors.compression.actor import (
    COMPRESSOR_KIND,
    LOCAL_COMPRESSORS,
    CompressorActor,
    compressor_address,
    compressor_factory,
    make_summarizer,
)
from actormem.actors.compression.config import PLAN_NOTE_TOOLS, CompressionConfig, LLMConfig
from actormem.actors.compression.engine import compress, render_problems
from actormem.actors.compression.llm import CircuitBreaker, LLMSummarizer
from actormem.actors.compression.offload import (
    CONTEXT_RELOAD_TOOL,
    RELOAD_TOOL_NAME,
    ReloadArgumentsError,
    format_reloaded,
    offload_hint,
    parse_reload_arguments,
    reload_ids,
    reload_tool_result,
)
from actormem.actors.compression.protocol import CompressionOutcome, CompressRequest
from actormem.actors.compression.summarizers import OfflineSummarizer, RunUsage, Summarizer

__all__ = (
    "COMPRESSOR_KIND",
    "CONTEXT_RELOAD_TOOL",
    "LOCAL_COMPRESSORS",
    "PLAN_NOTE_TOOLS",
    "RELOAD_TOOL_NAME",
    "CircuitBreaker",
    "CompressRequest",
    "CompressionConfig",
    "CompressionOutcome",
    "CompressorActor",
    "LLMConfig",
    "LLMSummarizer",
    "OfflineSummarizer",
    "ReloadArgumentsError",
    "RunUsage",
    "Summarizer",
    "compress",
    "compressor_address",
    "compressor_factory",
    "format_reloaded",
    "make_summarizer",
    "offload_hint",
    "parse_reload_arguments",
    "reload_ids",
    "reload_tool_result",
    "render_problems",
)
