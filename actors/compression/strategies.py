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
4. :func:`summarize_rounds`: each round before the current one (a user message
   and what followed it) becomes one summary (summaries it wrote before are not
   shrunk again); if the view is still over its target, the *oldest* history
   merges into one summary, as little of it as the budget needs.
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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio
import msgspec

from actormem.actors.compression._layout import Layout
from actormem.actors.compression.config import CompressionConfig
from actormem.actors.compression.offload import offload_hint, preview
from actormem.actors.compression.summarizers import Purpose, RunUsage, Summarizer
from actormem.actors.messages import Message, count_tokens
from actormem.runtime.ids import new_id
from actormem.runtime.tokens import TokenCounter

__all__ = (
    "STRATEGIES",
    "Candidate",
    "PassContext",
    "Strategy",
    "compress_current_round",
    "compress_tool_runs",
    "offload_large",
    "offload_large_keep_recent",
    "summarize_rounds",
)

#: Tokens of a summary message besides its summary text (label, hint, framing).
_SUMMARY_OVERHEAD: Final = 48
#: Argument characters kept per call line when call lines must shrink further.
_SHORT_ARGS: Final = 40


class Candidate:
    """A strategy's proposal: the next view and the originals it stored away."""

    __slots__ = ("offloaded", "view")

    def __init__(self, view: list[Message], offloaded: dict[str, list[Message]]) -> None:
        self.view = view
        self.offloaded = offloaded


class PassContext:
    """What a strategy needs besides the view: config, token counter, summarizer."""

    __slots__ = ("config", "counter", "summarizer", "usage")

    def __init__(
        self,
        config: CompressionConfig,
        counter: TokenCounter,
        summarizer: Summarizer,
        usage: RunUsage,
    ) -> None:
        self.config = config
        self.counter = counter
        self.summarizer = summarizer
        self.usage = usage

    def counted(self, message: Message) -> Message:
        """Return ``message`` with its token count cached."""
        return message.with_tokens(count_tokens(message, self.counter))

    def target(self, tokens: int) -> int:
        """The summary size aimed at for a span of ``tokens`` tokens."""
        cfg = self.config
        return max(
            cfg.summary_min_tokens, min(cfg.summary_max_tokens, int(tokens * cfg.summary_ratio))
        )

    async def summarize(
        self, messages: Sequence[Message], max_tokens: int, purpose: Purpose
    ) -> str:
        """Summarize ``messages`` in at most ``max_tokens`` tokens ("" for no messages)."""
        if not messages:
            return ""
        return await self.summarizer.summarize(
            messages, max_tokens=max(1, max_tokens), purpose=purpose, usage=self.usage
        )

    async def summarize_many(self, jobs: Sequence[_Job]) -> list[str]:
        """Summarize every job's span, up to ``summary_concurrency`` at a time, in order.

        An LLM summary takes seconds; a view of a hundred rounds must not take a
        hundred of them in a row.
        """
        bodies = [""] * len(jobs)
        sync = getattr(self.summarizer, "summarize_sync", None)
        if sync is not None:
            # CPU work with nothing to wait for: yielding between spans would only
            # queue the compressor behind every other task, many times per pass.
            for index, job in enumerate(jobs):
                if job.messages:
                    self.usage.summaries += 1
                    bodies[index] = sync(job.messages, max(1, job.target))
            return bodies
        limiter = anyio.CapacityLimiter(self.config.summary_concurrency)

        async def one(index: int, job: _Job) -> None:
            async with limiter:
                bodies[index] = await self.summarize(job.messages, job.target, job.purpose)

        if len(jobs) == 1:
            await one(0, jobs[0])
        elif jobs:
            async with anyio.create_task_group() as tg:
                for index, job in enumerate(jobs):
                    tg.start_soon(one, index, job)
        return bodies


class _Job:
    """One span to replace: what to summarize, how big, and how to build the replacement."""

    __slots__ = ("build", "hi", "lo", "messages", "purpose", "target")

    def __init__(
        self,
        lo: int,
        hi: int,
        messages: Sequence[Message],
        target: int,
        purpose: Purpose,
        build: Callable[[str], Message],
    ) -> None:
        self.lo = lo
        self.hi = hi
        self.messages = messages
        self.target = target
        self.purpose = purpose
        self.build = build


async def _run_jobs(
    ctx: PassContext, draft: _Draft, jobs: list[_Job], *, may_grow: bool = True
) -> None:
    """Summarize the jobs' spans, then replace each span where that shrinks it.

    ``may_grow``: a merge of many small messages may cost a few tokens when the
    message count is what is over (see :meth:`_Draft.accept`).
    """
    bodies = await ctx.summarize_many(jobs)
    for job, body in zip(jobs, bodies, strict=True):
        draft.accept(job.lo, job.hi, [job.build(body)], may_grow=may_grow)


Strategy = Callable[[PassContext, list[Message]], Awaitable[Candidate | None]]


class _Draft:
    """Collects replacements of ranges of a view, then builds the new view."""

    def __init__(self, ctx: PassContext, view: list[Message]) -> None:
        self.ctx = ctx
        self.view = view
        self.replaced: dict[int, tuple[int, list[Message]]] = {}
        self.offloaded: dict[str, list[Message]] = {}
        self.count_over = len(view) > ctx.config.target_messages

    def accept(self, lo: int, hi: int, new: list[Message], *, may_grow: bool = True) -> bool:
        """Replace ``view[lo:hi]`` with ``new`` if that shrinks it; True if it did.

        With ``may_grow`` a replacement with fewer messages but more tokens counts
        too, while the message count is over its target.
        """
        old = self.view[lo:hi]
        old_tokens = sum(m.tokens for m in old)
        new_tokens = sum(m.tokens for m in new)
        fewer = len(new) < len(old)
        # Tokens must drop, except that merging many small messages into one may
        # cost a few tokens when the message count is what is over budget.
        if not (new_tokens < old_tokens and len(new) <= len(old)) and not (
            may_grow and fewer and self.count_over
        ):
            return False
        self.replaced[lo] = (hi, new)
        return True

    def store(self, originals: list[Message]) -> str:
        reload_id = new_id()
        self.offloaded[reload_id] = list(originals)
        return reload_id

    def candidate(self) -> Candidate | None:
        if not self.replaced:
            return None
        out: list[Message] = []
        i = 0
        while i < len(self.view):
            hit = self.replaced.get(i)
            if hit is None:
                out.append(self.view[i])
                i += 1
            else:
                out.extend(hit[1])
                i = hit[0]
        used = {m.metadata.get("reload_id") or m.metadata.get("offloaded") for m in out}
        return Candidate(out, {k: v for k, v in self.offloaded.items() if k in used})


def _builder(
    ctx: PassContext,
    draft: _Draft,
    originals: Sequence[Message],
    *,
    label: str,
    kind: str,
    strategy: str,
    before: str = "",
) -> Callable[[str], Message]:
    """Return what builds the summary of ``originals`` from its body (storing the originals)."""

    def build(body: str) -> Message:
        reload_id = draft.store(list(originals))
        text = f"{before}\n{body}" if before and body else before or body
        return _summary(
            ctx, originals, text, label=label, kind=kind, strategy=strategy, reload_id=reload_id
        )

    return build


def _summary(
    ctx: PassContext,
    originals: Sequence[Message],
    body: str,
    *,
    label: str,
    kind: str,
    strategy: str,
    reload_id: str,
) -> Message:
    """The message standing for ``originals``: a label, the body, and the reload hint."""
    hint = offload_hint(reload_id, f"{len(originals)} messages")
    metadata: dict[str, Any] = {
        "compressed": kind,
        "strategy": strategy,
        "reload_id": reload_id,
        "summarized_ids": [m.id for m in originals],
    }
    weights = [m.importance for m in originals if m.importance is not None]
    return ctx.counted(
        Message(
            role="assistant",
            content=f"[{label}] {body}\n{hint}",
            metadata=metadata,
            # The summary stands for its most important message, and sorts where
            # the span ended, so time filters and importance ranking still work.
            importance=max(weights) if weights else None,
            timestamp=originals[-1].timestamp,
        )
    )


# -- strategy 1 -----------------------------------------------------------------------


async def compress_tool_runs(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 1: compress runs of tool messages before the latest assistant message."""
    layout = Layout(view, ctx.config)
    if layout.latest_assistant is None:
        return None
    draft = _Draft(ctx, view)
    plan_tools = frozenset(ctx.config.plan_note_tools)
    jobs: list[_Job] = []
    for lo, hi in layout.tool_runs(layout.first, layout.latest_assistant):
        if hi - lo <= ctx.config.min_consecutive_tool_messages:
            continue
        plan_calls: Counter[str] = Counter()
        other: list[Message] = []
        i = lo
        while i < hi:
            end = layout.unit_end(i)
            assert end is not None
            calls = view[i].tool_calls
            if all(call.name in plan_tools for call in calls):
                plan_calls.update(call.name for call in calls)
            else:
                other.extend(view[i:end])
            i = end
        plan_line = ""
        if plan_calls:
            # AutoContext keeps only that the plan was worked on: the plan notebook
            # itself holds the plan, so its tool traffic needs no summary.
            named = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in plan_calls.items())
            plan_line = f"plan notebook updated ({named})."
        build = _builder(
            ctx,
            draft,
            view[lo:hi],
            label="Tool calls, compressed",
            kind="tool_run",
            strategy="compress_tool_runs",
            before=plan_line,
        )
        target = ctx.target(sum(m.tokens for m in other))
        jobs.append(_Job(lo, hi, other, target, "tool_run", build))
    await _run_jobs(ctx, draft, jobs)
    return draft.candidate()


# -- strategies 2 and 3 --------------------------------------------------------------------


def _offload_in_place(ctx: PassContext, draft: _Draft, index: int, strategy: str) -> None:
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
    layout = Layout(view, ctx.config)
    draft = _Draft(ctx, view)
    limit = ctx.config.large_payload_threshold
    for i in range(layout.first, hi):
        m = view[i]
        if i in layout.protected or "offloaded" in m.metadata:
            continue
        if len(m.text()) > limit:
            _offload_in_place(ctx, draft, i, strategy)
    return draft.candidate()


async def offload_large_keep_recent(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 2: offload large messages before the latest assistant, keeping the last N."""
    latest = Layout(view, ctx.config).latest_assistant
    if latest is None:
        return None
    hi = min(latest, len(view) - ctx.config.last_keep)
    return await _offload(ctx, view, hi, "offload_large_keep_recent")


async def offload_large(ctx: PassContext, view: list[Message]) -> Candidate | None:
    """Strategy 3: offload every large message that is not protected."""
    return await _offload(ctx, view, len(view), "offload_large")


# -- strategy 4 -------------------------------------------------------------------------------


#: Summaries strategy 4 wrote: it merges them when it must, never shrinks them again.
_SETTLED: Final = frozenset({"round_summary", "history_summary"})


def _is_summary(messages: Sequence[Message]) -> bool:
    return len(messages) == 1 and "compressed" in messages[0].metadata


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
    layout = Layout(view, ctx.config)
    draft = _Draft(ctx, view)
    jobs: list[_Job] = []
    for round_lo, round_hi in layout.rounds(layout.first, layout.current_start):
        segments = layout.segments(round_lo, round_hi)
        for lo, hi in [part for seg in segments for part in _unsettled(view, *seg)]:
            span = view[lo:hi]
            if _is_summary(span):
                continue
            build = _builder(
                ctx,
                draft,
                span,
                label="Earlier round, summarized",
                kind="round_summary",
                strategy="summarize_rounds",
            )
            target = ctx.target(sum(m.tokens for m in span))
            jobs.append(_Job(lo, hi, span, target, "round", build))
    # A round summary must be smaller than its round; too many small rounds are the
    # merge's job below, which saves the summaries' overhead too.
    await _run_jobs(ctx, draft, jobs, may_grow=False)
    first = draft.candidate()
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
    layout = Layout(view, cfg)
    history = layout.segments(layout.first, layout.current_start)
    segments = [(lo, hi) for lo, hi in history if hi - lo > 1]
    if not segments:
        return None
    draft = _Draft(ctx, view)
    count, total = len(view), sum(m.tokens for m in view)
    jobs: list[_Job] = []
    for lo, hi in segments:
        if not cfg.over_target(count, total):
            break
        prefix = view[lo].tokens
        for end in range(lo + 2, hi + 1):
            prefix += view[end - 1].tokens
            room = cfg.target_tokens - (total - prefix) - _SUMMARY_OVERHEAD
            # Merging already cuts the message count; the text shrinks only as far as
            # the token budget needs, so older facts are not squeezed out early.
            aim = min(cfg.summary_max_tokens, prefix, room)
            target = max(cfg.summary_min_tokens, aim)
            merged_count = count - (end - lo - 1)
            merged_total = total - prefix + target + _SUMMARY_OVERHEAD
            # Merge one more summary rather than halve the merged text: the oldest
            # summary holds the facts of the most rounds.
            roomy = target >= min(cfg.summary_max_tokens, prefix // 2)
            if roomy and not cfg.over_target(merged_count, merged_total):
                break
        count, total = merged_count, merged_total
        span = view[lo:end]
        build = _builder(
            ctx,
            draft,
            span,
            label="Earlier conversation, summarized",
            kind="history_summary",
            strategy="summarize_rounds",
        )
        jobs.append(_Job(lo, end, span, target, "history", build))
    await _run_jobs(ctx, draft, jobs)
    return draft.candidate()


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
    layout = Layout(view, ctx.config)
    lo_bound = layout.current_start + (1 if layout.latest_user is not None else 0)
    draft = _Draft(ctx, view)
    total = sum(m.tokens for m in view)
    jobs: list[_Job] = []
    for lo, hi in layout.segments(lo_bound, len(view)):
        span = view[lo:hi]
        if _is_summary(span):
            continue
        span_tokens = sum(m.tokens for m in span)
        room = ctx.config.target_tokens - (total - span_tokens) - _SUMMARY_OVERHEAD
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
        build = _builder(
            ctx,
            draft,
            span,
            label="This round so far, compressed",
            kind="current_round",
            strategy="compress_current_round",
            before=f"tool calls made:\n{lines}\nresults and notes:" if calls else "",
        )
        target = max(ctx.config.summary_min_tokens, target)
        jobs.append(_Job(lo, hi, said, target, "current_round", build))
    await _run_jobs(ctx, draft, jobs)
    return draft.candidate()


#: The strategies in AutoContextMemory's order, lightest first.
STRATEGIES: Final[tuple[tuple[str, Strategy], ...]] = (
    ("compress_tool_runs", compress_tool_runs),
    ("offload_large_keep_recent", offload_large_keep_recent),
    ("offload_large", offload_large),
    ("summarize_rounds", summarize_rounds),
    ("compress_current_round", compress_current_round),
)
