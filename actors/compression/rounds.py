"""Strategy 4 of AutoContextMemory: summarize each round before the current one and,
if the view is still over its target, merge the oldest history into one summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from actormem.actors.compression._layout import Layout
from actormem.actors.compression.draft import (
    SUMMARY_OVERHEAD,
    Candidate,
    Draft,
    Job,
    PassContext,
    is_summary,
    least_summary_tokens,
    run_jobs,
    summary_builder,
)
from actormem.actors.messages import Message

__all__ = ("summarize_rounds",)


#: The label of a round's summary.
_ROUND_LABEL: Final = "Earlier round, summarized"
#: Summaries strategy 4 wrote: it merges them when it must, never shrinks them again.
_SETTLED: Final = frozenset({"round_summary", "history_summary"})


def _unsettled(view: Sequence[Message], lo: int, hi: int) -> list[tuple[int, int]]:
    """Split ``[lo, hi)`` around the summaries strategy 4 already wrote.

    Summarizing a summary again at a fraction of its size, on every compression,
    would wear its facts away; new rounds get summaries of their own instead.
    """
    out: list[tuple[int, int]] = []
    start = lo
    for i in range(lo, hi + 1):
        if i == hi or view[i].metadata.get("compressed") in _SETTLED:
            if start < i:
                out.append((start, i))
            start = i + 1
    return out


async def summarize_rounds(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 4: summarize each round before the current one; merge them if still over."""
    layout = await Layout.build(view, ctx.config, ctx.slicer)
    draft = Draft(ctx, view)
    jobs: list[Job] = []
    for round_lo, round_hi in layout.rounds(layout.first, layout.current_start):
        await ctx.slicer.pause()
        parts = _unsettled(view, round_lo, round_hi)
        for lo, hi in [seg for part in parts for seg in layout.segments(*part)]:
            pulled, span = layout.take(lo, hi)
            if is_summary(span):
                continue
            # Taken here, in the rounds' order, as each job's summary would take it.
            made = ctx.new_reload_id()
            tokens = sum(m.tokens for m in span)
            if tokens <= SUMMARY_OVERHEAD and tokens <= least_summary_tokens(
                ctx, span, label=_ROUND_LABEL, reload_id=made
            ):
                continue  # no summary of it can be smaller: it stays as it is
            build = summary_builder(
                ctx,
                draft,
                span,
                label=_ROUND_LABEL,
                kind="round_summary",
                strategy="summarize_rounds",
                reload_id=made,
            )
            jobs.append(Job(lo, hi, span, ctx.target(tokens), "round", build, pulled))
    # A round summary must be smaller than its round; too many small rounds are the
    # merge's job below, which saves the summaries' overhead too.
    await run_jobs(ctx, draft, jobs, may_grow=False)
    first = draft.candidate()
    await ctx.slicer.pause()
    current = first.view if first is not None else view
    if not ctx.config.over_target(len(current), sum(m.tokens for m in current)):
        return first
    merged = await _merge_history(ctx, current)
    if merged is None:
        return first
    if first is not None:
        merged.offloaded = {**first.offloaded, **merged.offloaded}
    return merged


async def _merge_history(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Merge the oldest history (summaries included) into one summary: as little as fits.

    Recent rounds keep their own summaries; only as many of the oldest messages
    are merged as the budget needs, oldest segment first.
    """
    cfg = ctx.config
    layout = await Layout.build(view, cfg, ctx.slicer)
    history = layout.segments(layout.first, layout.current_start)
    segments = [(lo, hi) for lo, hi in history if hi - lo > 1 or layout.pulled(lo, hi)]
    if not segments:
        return None
    await ctx.slicer.pause()
    draft = Draft(ctx, view)
    count, total = len(view), sum(m.tokens for m in view)
    jobs: list[Job] = []
    for lo, hi in segments:
        if not cfg.over_target(count, total):
            break
        prefix = taken = 0
        for end in range(lo + 1, hi + 1):
            # A call brings its late results along (see Layout.take).
            more, more_tokens = layout.unit_cost(end - 1)
            taken += more
            prefix += more_tokens
            if taken < 2:
                continue
            room = cfg.target_tokens - (total - prefix) - SUMMARY_OVERHEAD
            # Merging already cuts the message count; the text shrinks only as far as
            # the token budget needs, so older facts are not squeezed out early.
            aim = min(cfg.summary_max_tokens, prefix, room)
            target = max(cfg.summary_min_tokens, aim)
            merged_count = count - (taken - 1)
            merged_total = total - prefix + target + SUMMARY_OVERHEAD
            # Merge one more summary rather than halve the merged text: the oldest
            # summary holds the facts of the most rounds.
            roomy = target >= min(cfg.summary_max_tokens, prefix // 2)
            if roomy and not cfg.over_target(merged_count, merged_total):
                break
        count, total = merged_count, merged_total
        pulled, span = layout.take(lo, end)
        build = summary_builder(
            ctx,
            draft,
            span,
            label="Earlier conversation, summarized",
            kind="history_summary",
            strategy="summarize_rounds",
        )
        jobs.append(Job(lo, end, span, target, "history", build, pulled))
    await run_jobs(ctx, draft, jobs)
    return draft.candidate()
