"""Property: conversations whose tool results come late, twice, never, or without a
call, compressed with the town-small settings, end within budget and valid."""

from __future__ import annotations

import json

import anyio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from actormem.actors.compression import CompressionConfig, OfflineSummarizer, RunUsage
from actormem.actors.compression._layout import sendable
from actormem.actors.compression.draft import Candidate, PassContext
from actormem.actors.compression.rounds import summarize_rounds
from actormem.actors.conversation import check_openai_messages
from actormem.actors.messages import Message, ToolCall
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import (
    SUMMARY_FLOOR,
    assert_valid,
    compress_offline,
    counted,
    reachable_text,
    tokens,
    town_small,
)
from tests.actors.compression._build import (
    texts as build_texts,
)
from tests.support import examples

WORDS = ("Mara", "harbour", "4821", "decided", "crates", "Tuesday", "the", "of", "price", "420")
#: Words per text: most messages are short, some are large payloads.
SIZES = (2, 12, 40, 120, 400)
FATES = ("now", "now", "now", "late", "missing", "twice")

#: Big examples are the point here.
SLOW = (HealthCheck.too_slow, HealthCheck.data_too_large)


TEXTS = build_texts(WORDS, SIZES, 4)


class Conversation(list[Message]):
    """A view whose repr is one line per message, short enough to read in a failure."""

    def __repr__(self) -> str:
        def line(m: Message) -> str:
            calls = ",".join(c.id for c in m.tool_calls)
            what = (
                f" calls {calls}"
                if calls
                else f" answers {m.tool_call_id}"
                if m.tool_call_id
                else ""
            )
            return f"{m.role}{what} ({m.tokens} tokens)"

        return "Conversation([\n  " + "\n  ".join(line(m) for m in self) + "\n])"


@st.composite
def messy_conversations(draw: st.DrawFn) -> Conversation:
    """Rounds of user requests, tool calls and replies; each result comes at once,
    some messages later (rounds later too), twice, never, or without any call."""
    view: list[Message] = []
    late: list[Message] = []
    ids = iter(range(10**6))
    if draw(st.booleans()):
        view.append(Message(role="system", content="You keep the town's records."))

    def deliver_some() -> None:
        while late and draw(st.integers(0, 2)) == 0:
            view.append(late.pop(draw(st.integers(0, len(late) - 1))))

    for _ in range(draw(st.integers(2, 16))):
        view.append(
            Message(role=draw(st.sampled_from(["user", "agent_call"])), content=draw(TEXTS))
        )
        deliver_some()
        for _ in range(draw(st.integers(0, 4))):
            calls = tuple(
                ToolCall(f"c{next(ids)}", "search", json.dumps({"q": draw(TEXTS)[:60]}))
                for _ in range(draw(st.integers(1, 2)))
            )
            view.append(Message(role="assistant", content=None, tool_calls=calls))
            for call in calls:
                answer = Message(
                    role="tool", content=draw(TEXTS), tool_call_id=call.id, name="search"
                )
                fate = draw(st.sampled_from(FATES))
                if fate in ("now", "twice"):
                    view.append(answer)
                if fate in ("late", "twice"):
                    late.append(answer)
            if draw(st.integers(0, 5)) == 0:
                orphan_id = f"gone{next(ids)}"
                view.append(
                    Message(role="tool", content=draw(TEXTS), tool_call_id=orphan_id, name="x")
                )
            deliver_some()
        if draw(st.booleans()):
            view.append(Message(role="assistant", content=draw(TEXTS)))
    if draw(st.booleans()):
        view.extend(late)
    return Conversation(counted(view))


def must_keep(view: list[Message], config: CompressionConfig) -> list[Message]:
    """What compression keeps: system, the latest user message, and calls that may still
    be answered (in the current round or the last ``last_keep`` messages) with their results."""
    users = [i for i, m in enumerate(view) if m.role in ("user", "agent_call")]
    current = users[-1] if users else 0
    waiting_from = min(current, len(view) - config.last_keep)
    answered: dict[str, int] = {}
    called: set[str] = set()
    for i, m in enumerate(view):
        called.update(c.id for c in m.tool_calls)
        if m.role == "tool" and m.tool_call_id in called:
            answered.setdefault(m.tool_call_id, i)
    keep: set[int] = {i for i, m in enumerate(view) if m.role == "system"}
    keep.update(users[-1:])
    for i, m in enumerate(view):
        if i >= waiting_from and any(c.id not in answered for c in m.tool_calls):
            keep.add(i)
            keep.update(answered[c.id] for c in m.tool_calls if c.id in answered)
    return [view[i] for i in sorted(keep)]


@settings(max_examples=examples(80), deadline=None, suppress_health_check=SLOW)
@given(view=messy_conversations())
def test_messy_conversations_end_valid_and_within_budget(view: list[Message]) -> None:
    config = town_small()
    out = compress_offline(view, config)

    # What the compressed view sends is a list Chat Completions accepts, and nothing
    # more is set aside than before.
    assert not check_openai_messages([m.to_openai() for m in sendable(out.messages)])
    assert_valid(out.messages, before=view)

    reachable = reachable_text(out)
    for m in view:
        assert m.text() in reachable

    kept = must_keep(view, config)
    assert all(m in out.messages for m in kept)
    fits = (
        2 * len(kept) + 1 <= config.msg_threshold
        and tokens(kept) + (len(kept) + 1) * SUMMARY_FLOOR <= config.token_limit
    )
    event("room for summaries" if fits else "protected messages fill the budget")
    event("compressed" if out.strategies else "not compressed")
    if fits:
        assert out.under_budget, out.note


@settings(max_examples=examples(60), deadline=None, suppress_health_check=SLOW)
@given(view=messy_conversations())
def test_summarize_rounds_proposes_only_valid_views(view: list[Message]) -> None:
    counter = get_counter()
    config = CompressionConfig(msg_threshold=4, max_tokens=400, compress_to=0.5)
    ctx = PassContext(config, counter, OfflineSummarizer(counter), RunUsage())

    async def go() -> Candidate | None:
        return await summarize_rounds(ctx, view)

    candidate = anyio.run(go)
    if candidate is not None:
        assert_valid(candidate.view, before=view)
