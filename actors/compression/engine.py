"""The progressive compression pipeline: strategies in order until the view is under budget.

:func:`compress` is pure (no actor, no runtime): the compressor actor calls it,
and tests call it directly. It runs the five strategies of
:mod:`actormem.actors.compression.strategies` in order, lightest first, and goes round
again while any of them made progress, until the view is within its target
(``compress_to`` of both limits, so the next compression is some messages
away), no strategy can shrink it any more, the pass cap is reached or the time
is up. ``under_budget`` always refers to the limits themselves.

What the reference systems leave to chance is checked here:

- a pass counts only if it *shrank* the view (fewer messages, or fewer tokens
  and no more messages): otherwise the engine moves to the next strategy, so it
  can never loop;
- after every pass, what the view sends to an LLM (its complete tool units, see
  :func:`actormem.actors.compression._layout.sendable`) must still be a valid OpenAI
  message list (no new problem from
  :func:`actormem.actors.conversation.check_openai_messages`); a pass that cannot
  help (nothing found, no shrink, or a view that would not be valid) is skipped,
  with a debug log, and a strategy that proposed an invalid view is not run again
  in that compression;
- a timeout returns the view as it stood after the last finished pass;
- when it stops over budget, ``note`` says why.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Final

import anyio
import structlog

from actormem.actors.compression._layout import Layout, sent_and_set_aside
from actormem.actors.compression._slices import TimeSlicer
from actormem.actors.compression.config import CompressionConfig
from actormem.actors.compression.draft import PassContext, Strategy
from actormem.actors.compression.protocol import CompressionOutcome
from actormem.actors.compression.strategies import STRATEGIES
from actormem.actors.compression.summarizers import RunUsage, Summarizer
from actormem.actors.conversation import check_openai_messages
from actormem.actors.messages import Message, count_tokens
from actormem.runtime.tokens import TokenCounter

__all__ = ("compress", "render_problems")

log = structlog.get_logger("actormem.compression")

_INDEX_PREFIX: Final = re.compile(r"^\[\w+\] ")


def render_problems(view: Sequence[Message]) -> list[str]:
    """What makes ``[m.to_openai() for m in view]`` unacceptable to Chat Completions."""
    return check_openai_messages([m.to_openai() for m in view])


async def _problem_kinds(view: Sequence[Message], slicer: TimeSlicer) -> Counter[str]:
    await slicer.before_view_pass(len(view))
    sent, aside = sent_and_set_aside(view)
    await slicer.before_view_pass(len(sent))
    # Indices shift when a pass merges messages; compare problems without them.
    kinds = Counter(_INDEX_PREFIX.sub("", p) for p in render_problems(sent))
    # A pass may compress calls and results that cannot be sent, never make new ones.
    kinds.update(aside)
    return kinds


def _tokens(view: Sequence[Message]) -> int:
    return sum(m.tokens for m in view)


def _shrank(old: Sequence[Message], new: Sequence[Message], config: CompressionConfig) -> bool:
    """Progress: fewer messages (tokens may grow only within budget), or fewer tokens.

    (count, tokens) decreases lexicographically with every accepted pass, so the
    engine terminates even without the pass cap.
    """
    old_tokens, new_tokens = _tokens(old), _tokens(new)
    if len(new) < len(old):
        return new_tokens <= old_tokens or new_tokens <= config.target_tokens
    return len(new) == len(old) and new_tokens < old_tokens


def _why_over(view: Sequence[Message], config: CompressionConfig) -> str:
    layout = Layout(view, config)
    kept = [view[i] for i in sorted(layout.protected)]
    return (
        f"still over budget ({len(view)} messages / {_tokens(view)} tokens; limits "
        f"{config.msg_threshold} / {config.token_limit}): {len(kept)} protected messages "
        f"(system, pinned, latest user, calls waiting for results) hold {_tokens(kept)} tokens"
    )


async def compress(
    messages: Sequence[Message],
    *,
    config: CompressionConfig,
    counter: TokenCounter,
    summarizer: Summarizer,
    version: int = 0,
    strategies: Sequence[tuple[str, Strategy]] = STRATEGIES,
    agent: str = "",
) -> CompressionOutcome:
    """Bring a working view under budget with the progressive strategies.

    Args:
        messages: the snapshot of the working view (uncounted messages are counted).
        config: thresholds and strategy parameters.
        counter: the token counter.
        summarizer: writes summaries (offline, or an LLM with offline fallback).
        version: copied into the outcome, for the memory actor.
        strategies: the strategies in order (tests run one at a time).
        agent: whose view it is: the reload ids are then made from it and
            ``version`` (see :func:`actormem.actors.compression.draft.reload_id`);
            ``""``: unique ids of no agent.

    Returns:
        The outcome; ``messages`` replaces the snapshot. A view already under
        budget comes back unchanged with no strategy run.
    """
    started = time.perf_counter()
    view = [m if m.tokens >= 0 else m.with_tokens(count_tokens(m, counter)) for m in messages]
    tokens_before, count_before = _tokens(view), len(view)
    usage = RunUsage()
    ctx = PassContext(config, counter, summarizer, usage, agent=agent, version=version)
    offloaded: dict[str, list[Message]] = {}
    applied: list[str] = []
    passes = 0
    note = ""
    invalid: set[str] = set()
    with anyio.move_on_after(config.timeout) as scope:
        progress = config.over_budget(len(view), _tokens(view))
        baseline = await _problem_kinds(view, ctx.slicer) if progress else Counter[str]()
        while progress and config.over_target(len(view), _tokens(view)):
            progress = False
            for name, strategy in strategies:
                if not config.over_target(len(view), _tokens(view)):
                    break
                if passes >= config.max_passes:
                    note = f"stopped at the pass cap ({config.max_passes}); "
                    progress = False
                    break
                if name in invalid:
                    continue
                await ctx.slicer.pause()
                candidate = await strategy(ctx, view)
                await ctx.slicer.pause()
                if candidate is not None:
                    passes += 1  # the strategy did work (summaries, offloads)
                if candidate is None or not _shrank(view, candidate.view, config):
                    log.debug(
                        "compression_pass_skipped",
                        strategy=name,
                        reason="no change" if candidate is None else "no shrink",
                    )
                    continue
                new_problems = await _problem_kinds(candidate.view, ctx.slicer) - baseline
                await ctx.slicer.pause()
                if new_problems:
                    # A strategy's own check should have prevented this; it is not
                    # run again in this compression, so it cannot repeat.
                    invalid.add(name)
                    log.debug(
                        "compression_pass_skipped",
                        strategy=name,
                        reason="invalid view",
                        problems=sorted(new_problems),
                    )
                    continue
                view = candidate.view
                offloaded.update(candidate.offloaded)
                applied.append(name)
                progress = True
    if scope.cancelled_caught:
        note = f"timed out after {config.timeout:g}s; kept the passes finished by then; "
    under = not config.over_budget(len(view), _tokens(view))
    if under:
        note += "under budget" if applied else "already under budget"
    else:
        note += _why_over(view, config)
    if usage.fell_back:
        reasons = ", ".join(sorted(usage.fallback_reasons)) or "summarizer failed"
        note += f"; {usage.fallbacks} summaries written offline ({reasons})"
    return CompressionOutcome(
        version=version,
        messages=view,
        offloaded=offloaded,
        strategies=applied,
        passes=passes,
        tokens_before=tokens_before,
        tokens_after=_tokens(view),
        messages_before=count_before,
        messages_after=len(view),
        under_budget=under,
        summarizer=summarizer.name,
        fell_back=usage.fell_back,
        latency_s=time.perf_counter() - started,
        note=note,
    )
