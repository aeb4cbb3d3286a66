"""A compression pass's machinery: what a strategy proposes, what it needs, and the
draft of the next view it builds by replacing spans with summaries or offloads.

Every replaced message is stored under a reload id that the replacement names,
and a summary lists the ids of the messages it stands for in
``metadata["summarized_ids"]``.

A reload id made for an agent is :func:`reload_id`: the agent, the version of the
view compressed (the memory bumps it whenever it rewrites the view, and keeps it in
its snapshot) and a serial number, so the same run makes the same ids (a replayed
model run sees the same hints) and an agent never gets one id twice, across
restarts too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio

from actormem.actors.compression._slices import TimeSlicer
from actormem.actors.compression.config import CompressionConfig
from actormem.actors.compression.offload import offload_hint
from actormem.actors.compression.summarizers import Purpose, RunUsage, Summarizer
from actormem.actors.messages import Message, count_tokens
from actormem.runtime.ids import new_id
from actormem.runtime.tokens import TokenCounter

__all__ = (
    "SUMMARY_OVERHEAD",
    "Candidate",
    "Draft",
    "Job",
    "PassContext",
    "Strategy",
    "is_summary",
    "least_summary_tokens",
    "reload_id",
    "run_jobs",
    "summary_builder",
)

#: Tokens of a summary message besides its summary text (label, hint, framing).
SUMMARY_OVERHEAD: Final = 48


def reload_id(agent: str, version: int, serial: int | str) -> str:
    """The reload id ``serial`` of a rewrite of ``agent``'s view at ``version``:
    ``<agent tag>.<version>.<serial>``, the tag 12 hex digits of a hash of the
    name (so that any name makes an id a reload hint can quote)."""
    tag = hashlib.blake2b(agent.encode(), digest_size=6).hexdigest()
    return f"{tag}.{version}.{serial}"


class Candidate:
    """A strategy's proposal: the next view and the originals it stored away."""

    __slots__ = ("offloaded", "view")

    def __init__(self, view: list[Message], offloaded: dict[str, list[Message]]) -> None:
        self.view = view
        self.offloaded = offloaded


class PassContext:
    """What a strategy needs besides the view: config, token counter, summarizer,
    and the reload ids of the compression (:func:`reload_id` of ``agent`` and
    ``version``; without an agent, unique ids from :func:`new_id`)."""

    __slots__ = (
        "_serial",
        "agent",
        "config",
        "counter",
        "slicer",
        "summarizer",
        "usage",
        "version",
    )

    def __init__(
        self,
        config: CompressionConfig,
        counter: TokenCounter,
        summarizer: Summarizer,
        usage: RunUsage,
        *,
        agent: str = "",
        version: int = 0,
    ) -> None:
        self.config = config
        self.counter = counter
        self.summarizer = summarizer
        self.usage = usage
        self.agent = agent
        self.version = version
        self._serial = 0
        #: Shared by the compression's passes, so pauses come every slice overall.
        self.slicer = TimeSlicer()

    def new_reload_id(self) -> str:
        """The compression's next reload id (one serial over all its passes)."""
        if not self.agent:
            return new_id()
        self._serial += 1
        return reload_id(self.agent, self.version, self._serial)

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

    async def summarize_many(self, jobs: Sequence[Job]) -> list[str]:
        """Summarize every job's span, up to ``summary_concurrency`` at a time, in order.

        An LLM summary takes seconds; a view of a hundred rounds must not take a
        hundred of them in a row.
        """
        bodies = [""] * len(jobs)
        sliced = getattr(self.summarizer, "summarize_sliced", None)
        if sliced is not None:
            # CPU work with nothing to wait for: one span after the other, handing
            # the event loop back only when a time slice is used up.
            for index, job in enumerate(jobs):
                if job.messages:
                    self.usage.summaries += 1
                    bodies[index] = await sliced(job.messages, max(1, job.target), self.slicer)
            return bodies
        limiter = anyio.CapacityLimiter(self.config.summary_concurrency)

        async def one(index: int, job: Job) -> None:
            async with limiter:
                bodies[index] = await self.summarize(job.messages, job.target, job.purpose)

        if len(jobs) == 1:
            await one(0, jobs[0])
        elif jobs:
            async with anyio.create_task_group() as tg:
                for index, job in enumerate(jobs):
                    tg.start_soon(one, index, job)
        return bodies


class Job:
    """One span to replace: what to summarize, how big, and how to build the replacement."""

    __slots__ = ("build", "hi", "lo", "messages", "pulled", "purpose", "target")

    def __init__(
        self,
        lo: int,
        hi: int,
        messages: Sequence[Message],
        target: int,
        purpose: Purpose,
        build: Callable[[str], Message],
        pulled: Sequence[int] = (),
    ) -> None:
        self.lo = lo
        self.hi = hi
        self.pulled = pulled
        self.messages = messages
        self.target = target
        self.purpose = purpose
        self.build = build


async def run_jobs(
    ctx: PassContext, draft: Draft, jobs: list[Job], *, may_grow: bool = True
) -> None:
    """Summarize the jobs' spans, then replace each span where that shrinks it.

    ``may_grow``: a merge of many small messages may cost a few tokens when the
    message count is what is over (see :meth:`Draft.accept`).
    """
    bodies = await ctx.summarize_many(jobs)
    for job, body in zip(jobs, bodies, strict=True):
        draft.accept(job.lo, job.hi, [job.build(body)], may_grow=may_grow, pulled=job.pulled)
        await ctx.slicer.pause()


Strategy = Callable[[PassContext, list[Message]], Awaitable[Candidate | None]]


class Draft:
    """Collects replacements of ranges of a view, then builds the new view."""

    def __init__(self, ctx: PassContext, view: list[Message]) -> None:
        self.ctx = ctx
        self.view = view
        self.replaced: dict[int, tuple[int, list[Message]]] = {}
        self.offloaded: dict[str, list[Message]] = {}
        self.count_over = len(view) > ctx.config.target_messages

    def accept(
        self,
        lo: int,
        hi: int,
        new: list[Message],
        *,
        may_grow: bool = True,
        pulled: Sequence[int] = (),
    ) -> bool:
        """Replace ``view[lo:hi]`` with ``new`` if that shrinks it; True if it did.

        ``pulled``: indices after ``hi`` (late results of calls in the span) that
        ``new`` stands for too; they are taken out of the view with it.

        With ``may_grow`` a replacement with fewer messages but more tokens counts
        too, while the message count is over its target.
        """
        old = [*self.view[lo:hi], *(self.view[i] for i in pulled)]
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
        for i in pulled:
            self.replaced[i] = (i + 1, [])
        return True

    def store(self, originals: list[Message], reload_id: str = "") -> str:
        """Keep ``originals`` under ``reload_id`` (``""``: a new reload id); return the id."""
        made = reload_id or self.ctx.new_reload_id()
        self.offloaded[made] = list(originals)
        return made

    def candidate(self) -> Candidate | None:
        """The view with every accepted replacement, or None when there is none."""
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


def summary_builder(
    ctx: PassContext,
    draft: Draft,
    originals: Sequence[Message],
    *,
    label: str,
    kind: str,
    strategy: str,
    before: str = "",
    reload_id: str = "",
) -> Callable[[str], Message]:
    """Return what builds the summary of ``originals`` from its body (storing the
    originals under ``reload_id``; ``""``: a new reload id when it is built)."""

    def build(body: str) -> Message:
        made = draft.store(list(originals), reload_id)
        text = f"{before}\n{body}" if before and body else before or body
        return _summary(
            ctx, originals, text, label=label, kind=kind, strategy=strategy, reload_id=made
        )

    return build


def least_summary_tokens(
    ctx: PassContext, originals: Sequence[Message], *, label: str, reload_id: str
) -> int:
    """The fewest tokens a summary of ``originals`` built by :func:`summary_builder`
    (with no ``before``) under ``reload_id`` can have, whatever its body.

    It is the summary with an empty body: label and hint are split from the body by
    a space and a newline, where the encodings' pre-tokenizer cuts, so they count
    the same with any body, and what lies between them (one token when empty) is
    at least one token.
    """
    empty = _summary(ctx, originals, "", label=label, kind="", strategy="", reload_id=reload_id)
    return empty.tokens


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


def is_summary(messages: Sequence[Message]) -> bool:
    """True when ``messages`` is one message a compression wrote."""
    return len(messages) == 1 and "compressed" in messages[0].metadata
