"""The five progressive strategies of AutoContextMemory, lightest first.

Each strategy looks at the current view and returns a *candidate*: the next view
and the originals it stored away, or None when it finds nothing to do. The engine
(:mod:`actormem.actors.compression.engine`) keeps a candidate only if it shrank the view
and still renders to a valid OpenAI message list.

1. :func:`compress_tool_runs`: runs of more than ``min_consecutive_tool_messages``
   tool messages before the latest assistant message become one summary; calls of
   the plan notebook's tools shrink to one line naming them.
2. :func:`offload_large_keep_recent`: messages over ``large_payload_threshold``
   characters before the latest assistant message, outside the last
   ``last_keep`` messages, are offloaded: a preview and a reload hint remain.
3. :func:`offload_large`: the same, anywhere in the view.
4. :func:`~actormem.actors.compression.rounds.summarize_rounds`: each round before
   the current one (a user message and what followed it) becomes one summary
   (summaries it wrote before are not shrunk again); if the view is still over its
   target, the *oldest* history merges into one summary, as little of it as the
   budget needs.
5. :func:`compress_current_round`: what followed the latest user message becomes
   one message listing each tool call's name and arguments, with the results
   summarized.

Summaries of one pass are written concurrently (``summary_concurrency``), and
each replaces its span only if that shrinks it.

Every replaced message is stored under a reload id that the replacement names,
and a summary lists the ids of the messages it stands for in
``metadata["summarized_ids"]``. Protected messages (see
:mod:`actormem.actors.compression._layout`) are never changed.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

import msgspec

from actormem.actors.compression._layout import Layout
from actormem.actors.compression.draft import (
    SUMMARY_OVERHEAD,
    Candidate,
    Draft,
    Job,
    PassContext,
    Strategy,
    is_summary,
    run_jobs,
    summary_builder,
)
from actormem.actors.compression.offload import offload_hint, preview
from actormem.actors.compression.rounds import summarize_rounds
from actormem.actors.messages import Message

__all__ = (
    "STRATEGIES",
    "compress_current_round",
    "compress_tool_runs",
    "offload_large",
    "offload_large_keep_recent",
)

#: Argument characters kept per call line when call lines must shrink further.
_SHORT_ARGS: Final = 40


# -- strategy 1 -----------------------------------------------------------------------


async def compress_tool_runs(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 1: compress runs of tool messages before the latest assistant message."""
    layout = await Layout.build(view, ctx.config, ctx.slicer)
    if layout.latest_assistant is None:
        return None
    draft = Draft(ctx, view)
    plan_tools = frozenset(ctx.config.plan_note_tools)
    jobs: list[Job] = []
    for lo, hi in layout.tool_runs(layout.first, layout.latest_assistant):
        if hi - lo <= ctx.config.min_consecutive_tool_messages:
            continue
        pulled, span = layout.take(lo, hi)
        plan_calls: Counter[str] = Counter()
        plan_ids: set[str] = set()
        other: list[Message] = []
        for m in span:
            if m.tool_calls and all(call.name in plan_tools for call in m.tool_calls):
                plan_calls.update(call.name for call in m.tool_calls)
                plan_ids.update(call.id for call in m.tool_calls)
            elif m.role != "tool" or m.tool_call_id not in plan_ids:
                other.append(m)
        plan_line = ""
        if plan_calls:
            # AutoContext keeps only that the plan was worked on: the plan notebook
            # itself holds the plan, so its tool traffic needs no summary.
            named = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in plan_calls.items())
            plan_line = f"plan notebook updated ({named})."
        build = summary_builder(
            ctx,
            draft,
            span,
            label="Tool calls, compressed",
            kind="tool_run",
            strategy="compress_tool_runs",
            before=plan_line,
        )
        target = ctx.target(sum(m.tokens for m in other))
        jobs.append(Job(lo, hi, other, target, "tool_run", build, pulled))
    await run_jobs(ctx, draft, jobs)
    return draft.candidate()


# -- strategies 2 and 3 --------------------------------------------------------------------


def _offload_in_place(ctx: PassContext, draft: Draft, index: int, strategy: str) -> None:
    original = draft.view[index]
    text = original.text()
    reload_id = draft.store([original])
    content = (
        preview(text, ctx.config.offload_preview)
        + "\n"
        + offload_hint(reload_id, f"offloaded {len(text)} chars")
    )
    metadata = {**original.metadata, "offloaded": reload_id, "compressed": "offloaded"}
    metadata["strategy"] = strategy
    smaller = ctx.counted(msgspec.structs.replace(original, content=content, metadata=metadata))
    draft.accept(index, index + 1, [smaller])


async def _offload(
    ctx: PassContext, view: list[Message], hi: int, strategy: str
) -> Candidate | None:
    layout = await Layout.build(view, ctx.config, ctx.slicer)
    draft = Draft(ctx, view)
    limit = ctx.config.large_payload_threshold
    for i in range(layout.first, hi):
        await ctx.slicer.pause()
        m = view[i]
        if i in layout.protected or "offloaded" in m.metadata:
            continue
        if len(m.text()) > limit:
            _offload_in_place(ctx, draft, i, strategy)
    return draft.candidate()


async def offload_large_keep_recent(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 2: offload large messages before the latest assistant, keeping the last N."""
    latest = (await Layout.build(view, ctx.config, ctx.slicer)).latest_assistant
    if latest is None:
        return None
    hi = min(latest, len(view) - ctx.config.last_keep)
    return await _offload(ctx, view, hi, "offload_large_keep_recent")


async def offload_large(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 3: offload every large message that is not protected."""
    return await _offload(ctx, view, len(view), "offload_large")


# -- strategy 5 --------------------------------------------------------------------------------


def _call_lines(calls: list[tuple[str, str]], arg_chars: int | None) -> str:
    if arg_chars is None:
        counts = Counter(name for name, _ in calls)
        return "tools called: " + ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items())
    return "\n".join(f"- {name}({preview(args, arg_chars)})" for name, args in calls)


async def compress_current_round(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 5: compress what followed the latest user message into one message each span.

    Tool call names and arguments are kept (arguments cut to ``offload_preview``
    characters, shorter if the budget needs it); results and assistant text are
    summarized.
    """
    layout = await Layout.build(view, ctx.config, ctx.slicer)
    lo_bound = layout.current_start + (1 if layout.latest_user is not None else 0)
    draft = Draft(ctx, view)
    total = sum(m.tokens for m in view)
    jobs: list[Job] = []
    for lo, hi in layout.segments(lo_bound, len(view)):
        pulled, span = layout.take(lo, hi)
        if is_summary(span):
            continue
        span_tokens = sum(m.tokens for m in span)
        room = ctx.config.target_tokens - (total - span_tokens) - SUMMARY_OVERHEAD
        allowed = (
            min(span_tokens - 1, room) if total > ctx.config.target_tokens else span_tokens - 1
        )
        calls = [(c.name, c.arguments) for m in span for c in m.tool_calls]
        lines = ""
        if calls:
            for arg_chars in (ctx.config.offload_preview, _SHORT_ARGS, None):
                lines = _call_lines(calls, arg_chars)
                if ctx.counter.count_text(lines) <= max(
                    allowed // 2, ctx.config.summary_min_tokens
                ):
                    break
        # The calls are listed above; the summary is of what came back and was said.
        said = [msgspec.structs.replace(m, tool_calls=()) for m in span if m.content is not None]
        target = min(ctx.target(span_tokens), allowed - ctx.counter.count_text(lines))
        build = summary_builder(
            ctx,
            draft,
            span,
            label="This round so far, compressed",
            kind="current_round",
            strategy="compress_current_round",
            before=f"tool calls made:\n{lines}\nresults and notes:" if calls else "",
        )
        target = max(ctx.config.summary_min_tokens, target)
        jobs.append(Job(lo, hi, said, target, "current_round", build, pulled))
    await run_jobs(ctx, draft, jobs)
    return draft.candidate()


#: The strategies in AutoContextMemory's order, lightest first.
STRATEGIES: Final[tuple[tuple[str, Strategy], ...]] = (
    ("compress_tool_runs", compress_tool_runs),
    ("offload_large_keep_recent", offload_large_keep_recent),
    ("offload_large", offload_large),
    ("summarize_rounds", summarize_rounds),
    ("compress_current_round", compress_current_round),
)
