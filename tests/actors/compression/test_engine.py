"""The progressive pipeline: order, termination, protection, timeouts, planted facts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import msgspec
import pytest
from structlog.testing import capture_logs

from actormem.actors.compression import (
    CompressionConfig,
    CompressRequest,
    OfflineSummarizer,
    RunUsage,
    compress,
    render_problems,
)
from actormem.actors.compression._slices import TimeSlicer
from actormem.actors.compression.draft import Candidate, PassContext
from actormem.actors.compression.strategies import STRATEGIES
from actormem.actors.compression.summarizers import Purpose
from actormem.actors.messages import Message
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import (
    assert_valid,
    assistant,
    chatter,
    counted,
    reachable_ids,
    reachable_text,
    system,
    tokens,
    tool_unit,
    user,
)

pytestmark = pytest.mark.anyio

ORDER = [name for name, _ in STRATEGIES]


async def run(view: list[Message], strategies: Any = STRATEGIES, **cfg: Any) -> Any:
    counter = get_counter()
    return await compress(
        view,
        config=CompressionConfig(**{"compress_to": 1.0, **cfg}),
        counter=counter,
        summarizer=OfflineSummarizer(counter),
        strategies=strategies,
    )


def long_conversation(rounds: int = 20, big_every: int = 4) -> list[Message]:
    view = [system("You are the town archivist.")]
    for r in range(rounds):
        view.append(user(f"Round {r}: " + chatter(4)))
        for t in range(4):
            payload = "result " + chatter(2, "records")
            if t == 0 and r % big_every == 0:
                payload += " X" * 3000
            view += tool_unit("search", {"q": f"record {r}-{t}"}, payload)
        view.append(assistant(f"Finished round {r}. " + chatter(2)))
    view.append(user("What did we learn?"))
    return counted(view)


async def test_a_view_under_budget_comes_back_unchanged() -> None:
    view = counted([system(), user("hi"), assistant("hello")])
    out = await run(view)
    assert out.messages == view and out.strategies == [] and out.passes == 0
    assert out.under_budget and out.note == "already under budget"
    assert out.tokens_before == out.tokens_after == tokens(view)


async def test_uncounted_messages_are_counted() -> None:
    view = [system(), user("hi"), assistant("hello")]
    out = await run(view)
    assert all(m.tokens > 0 for m in out.messages)
    assert out.tokens_before == tokens(counted(view))


async def test_strategies_run_lightest_first_and_stop_when_under_budget() -> None:
    view = long_conversation()
    # Tool runs alone bring 20 rounds x 8 tool messages down to 20 x 3 messages.
    light = await run(view, msg_threshold=70, max_tokens=10**6)
    assert light.strategies == ["compress_tool_runs"]
    assert light.under_budget and light.messages_after <= 70

    heavy = await run(view, msg_threshold=30, max_tokens=4000)
    assert heavy.under_budget
    assert heavy.strategies[0] == "compress_tool_runs"
    positions = [ORDER.index(s) for s in heavy.strategies]
    assert positions == sorted(positions)  # one cycle was enough, in order
    assert "summarize_rounds" in heavy.strategies
    assert heavy.tokens_after <= 3000 and heavy.messages_after <= 30
    assert_valid(heavy.messages)


async def test_every_original_stays_reachable() -> None:
    view = long_conversation()
    out = await run(view, msg_threshold=10, max_tokens=3000)
    assert out.under_budget
    assert {m.id for m in view} <= reachable_ids(out)


async def test_the_latest_user_message_is_kept_verbatim_even_when_over_budget() -> None:
    huge = user("Please read this: " + "word " * 3000)
    view = counted([system(), user("earlier " + chatter(20)), assistant("ok " + chatter(20)), huge])
    out = await run(view, max_tokens=1000, token_ratio=1.0)
    assert out.messages[-1] == view[-1]
    assert not out.under_budget
    assert "still over budget" in out.note and "latest user" in out.note


async def test_pinned_messages_and_system_messages_are_never_compressed() -> None:
    pinned = Message(role="user", content="Pin: " + chatter(30), metadata={"pinned": True})
    view = long_conversation(rounds=6)
    view = counted([*view[:3], pinned, *view[3:]])
    out = await run(view, msg_threshold=5, max_tokens=2000)
    ids = {m.id: m for m in out.messages}
    assert ids[view[0].id] == view[0]
    assert ids[pinned.id] == view[3]


async def test_pinned_tools_are_never_compressed() -> None:
    keep = counted(tool_unit("read_contract", {"id": 7}, "clause 4.2: " + chatter(40)))
    view = long_conversation(rounds=4)
    view = [*view[:11], *keep, *view[11:]]  # after round 0
    out = await run(view, msg_threshold=5, max_tokens=1500, pinned_tools=("read_contract",))
    assert keep[0] in out.messages and keep[1] in out.messages
    assert_valid(out.messages)


async def test_nothing_left_to_compress_stops_and_says_why() -> None:
    pins = [
        Message(role="user", content=f"rule {i}: " + chatter(3), metadata={"pinned": True})
        for i in range(12)
    ]
    view = counted([system(), *pins, user("go")])
    out = await run(view, msg_threshold=5)
    assert out.messages == view
    assert not out.under_budget and out.strategies == []
    assert "protected" in out.note


async def test_a_pass_that_does_not_shrink_the_view_is_skipped() -> None:
    async def grows(ctx: PassContext, view: list[Message]) -> Candidate:
        return Candidate([*view, ctx.counted(assistant("more"))], {})

    view = counted([system(), *[user(f"m{i}") for i in range(6)]])
    out = await run(view, [("grows", grows)], msg_threshold=3)
    assert out.messages == view and out.strategies == [] and out.passes == 1


async def test_a_pass_that_breaks_validity_is_dropped_quietly_and_not_rerun() -> None:
    async def orphans(ctx: PassContext, view: list[Message]) -> Candidate:
        return Candidate([m for m in view if m.role != "assistant"], {})

    view = counted([user("a"), *tool_unit("t", {}, "r"), user("b"), user("c")])
    with capture_logs() as logs:
        out = await run(view, [("orphans", orphans)], msg_threshold=2)
    assert out.messages == view
    skipped = [e for e in logs if e["event"] == "compression_pass_skipped"]
    assert [(e["strategy"], e["reason"], e["log_level"]) for e in skipped] == [
        ("orphans", "invalid view", "debug")
    ]
    assert not [e for e in logs if e["log_level"] in ("warning", "error")]


async def test_the_pass_cap_ends_compression() -> None:
    async def trims(ctx: PassContext, view: list[Message]) -> Candidate:
        last = view[-1]
        return Candidate(
            [*view[:-1], ctx.counted(msgspec.structs.replace(last, content=last.text()[:-5]))], {}
        )

    view = counted([user("x " * 500)])
    out = await run(view, [("trims", trims)], max_tokens=10, max_passes=3)
    assert out.passes == 3 and out.strategies == ["trims"] * 3
    assert "pass cap" in out.note and not out.under_budget


class StuckSummarizer:
    """Never answers: stands for an LLM endpoint that hangs."""

    name = "stuck"

    async def summarize(
        self, messages: Sequence[Message], *, max_tokens: int, purpose: Purpose, usage: RunUsage
    ) -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_a_timeout_returns_the_view_of_the_last_finished_pass() -> None:
    big = "BIG " * 2000
    view = counted(
        [
            system(),
            user(big),
            assistant("read"),
            user("more " + chatter(30)),
            assistant("ok"),
            user("go"),
        ]
    )
    out = await compress(
        view,
        config=CompressionConfig(msg_threshold=2, timeout=0.2),
        counter=get_counter(),
        summarizer=StuckSummarizer(),
    )
    # Offloading needs no summarizer and finished; summarizing rounds never did.
    assert out.strategies == ["offload_large"]
    assert "timed out" in out.note and not out.under_budget
    assert not render_problems(out.messages)


PLANTED = {
    "4821": "By the way, the vault code is 4821.",
    "1987-03-14": "Mara was born on 1987-03-14 in Tromsø.",
    "Quentin": "We decided that Quentin will chair the harvest council.",
    "17 crates": "The storehouse holds 17 crates of barley.",
    "2031-09-02": "The bridge reopens on 2031-09-02.",
}


async def test_planted_facts_survive_heavy_compression_offline() -> None:
    view = [system("You are the town archivist.")]
    facts = list(PLANTED.values())
    for r in range(40):
        view.append(user(f"round {r}: " + chatter(6, "the market")))
        if r % 8 == 3:
            view.append(user(facts.pop()))
        view += tool_unit("search", {"q": f"market {r}"}, "nothing new " + chatter(8, "prices"))
        view.append(assistant("noted. " + chatter(5, "the market")))
    view.append(user("Summarize what you know."))
    view = counted(view)
    out = await run(view, msg_threshold=8, max_tokens=1200)
    assert out.under_budget
    assert out.tokens_after <= 900 and out.messages_after <= 8
    assert_valid(out.messages)
    in_view = "\n".join(m.text() for m in out.messages)
    reachable = reachable_text(out)
    for key in PLANTED:
        assert key in reachable, key
    # The extractive summaries favour facts over chatter: most stay in plain sight.
    assert sum(key in in_view for key in PLANTED) >= 3


async def test_compression_leaves_headroom_so_it_does_not_run_on_every_message() -> None:
    view = long_conversation()
    out = await run(view, msg_threshold=40, max_tokens=8000, compress_to=0.5)
    assert out.messages_after <= 20 and out.tokens_after <= 3000
    assert "under budget" in out.note


async def test_an_empty_view_is_under_budget() -> None:
    out = await run([])
    assert out.messages == [] and out.under_budget and out.tokens_after == 0


class _CountingSummarizer(OfflineSummarizer):
    """The offline summarizer, counting the spans it summarizes and their messages."""

    def __init__(self) -> None:
        super().__init__(get_counter())
        self.spans: list[int] = []

    async def summarize_sliced(
        self, messages: Sequence[Message], max_tokens: int, slicer: TimeSlicer
    ) -> str:
        self.spans.append(len(messages))
        return await super().summarize_sliced(messages, max_tokens, slicer)


async def test_a_request_decoded_from_msgpack_costs_and_gives_what_the_original_does() -> None:
    # Over Redis the compressor gets the request decoded: no cached count or field
    # the work depends on may be lost on the way.
    request = CompressRequest(agent="ada", messages=long_conversation(), version=3)
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=CompressRequest)
    results = []
    for asked in (request, decoded):
        summarizer = _CountingSummarizer()
        out = await compress(
            asked.messages,
            config=CompressionConfig(msg_threshold=30, max_tokens=4000),
            counter=get_counter(),
            summarizer=summarizer,
            version=asked.version,
            agent=asked.agent,
        )
        view = [(m.role, m.content, m.tokens) for m in out.messages]
        results.append((out.strategies, out.passes, summarizer.spans, view, sorted(out.offloaded)))
    assert results[0] == results[1]
    assert "summarize_rounds" in results[0][0]
