"""Each of the five strategies on its own, on hand-built conversations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actormem.actors.compression import (
    CompressionConfig,
    CompressionOutcome,
    OfflineSummarizer,
    compress,
)
from actormem.actors.compression._layout import set_aside
from actormem.actors.compression._slices import TimeSlicer
from actormem.actors.compression.draft import (
    Draft,
    PassContext,
    least_summary_tokens,
    reload_id,
    summary_builder,
)
from actormem.actors.compression.rounds import summarize_rounds
from actormem.actors.compression.strategies import (
    compress_current_round,
    compress_tool_runs,
    offload_large,
    offload_large_keep_recent,
)
from actormem.actors.compression.summarizers import RunUsage
from actormem.actors.messages import Message, ToolCall
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import (
    assert_valid,
    assistant,
    chatter,
    counted,
    reachable_ids,
    system,
    tokens,
    tool_unit,
    user,
)
from tests.support import examples

pytestmark = pytest.mark.anyio

BIG = "BEGIN " + "lorem ipsum dolor " * 400  # about 7200 characters, over the 5120 threshold


async def run_one(strategy: Any, name: str, view: list[Message], **cfg: Any) -> CompressionOutcome:
    config = CompressionConfig(**{"compress_to": 1.0, **cfg})  # AutoContext's stop point
    counter = get_counter()
    out = await compress(
        view,
        config=config,
        counter=counter,
        summarizer=OfflineSummarizer(counter),
        strategies=[(name, strategy)],
    )
    assert_valid(out.messages, before=view)
    for m in out.messages:
        assert m.tokens >= 0
    return out


def by_id(view: list[Message]) -> dict[str, Message]:
    return {m.id: m for m in view}


# -- strategy 1 ------------------------------------------------------------------------


async def test_tool_runs_longer_than_the_minimum_become_one_summary() -> None:
    run = [m for i in range(4) for m in tool_unit("search", {"q": f"term {i}"}, f"found {i}")]
    view = counted([system(), user("look things up"), *run, assistant("all found"), user("thanks")])
    out = await run_one(compress_tool_runs, "s1", view, msg_threshold=5)

    run = view[2 : 2 + len(run)]
    assert out.strategies == ["s1"]
    assert len(out.messages) == len(view) - len(run) + 1
    summary = out.messages[2]
    assert summary.role == "assistant" and not summary.tool_calls
    assert summary.metadata["summarized_ids"] == [m.id for m in run]
    assert out.offloaded[summary.metadata["reload_id"]] == run
    assert "search" in summary.text() and summary.metadata["reload_id"] in summary.text()
    # Everything outside the run is untouched.
    assert out.messages[:2] == view[:2] and out.messages[3:] == view[-2:]


async def test_tool_runs_at_or_under_the_minimum_are_left_alone() -> None:
    run = [m for i in range(3) for m in tool_unit("search", {"q": i}, f"found {i}")]  # 6 messages
    view = counted([system(), user("look"), *run, assistant("done"), user("ok")])
    out = await run_one(compress_tool_runs, "s1", view, msg_threshold=5)
    assert out.strategies == [] and out.messages == view


async def test_plan_notebook_runs_shrink_to_one_line() -> None:
    names = ["create_plan", "update_subtask_state", "update_subtask_state", "finish_subtask"]
    run = [
        m
        for i, n in enumerate(names)
        for m in tool_unit(n, {"subtask": i}, f"plan state {i}: " + chatter(20, "the plan"))
    ]
    view = counted([user("plan it"), *run, assistant("planned"), user("go")])
    out = await run_one(compress_tool_runs, "s1", view, msg_threshold=3)
    text = out.messages[1].text()
    assert "plan notebook updated" in text
    assert "update_subtask_state x2" in text and "create_plan" in text
    assert "plan state" not in text  # results are not summarized, only named


async def test_tool_runs_from_the_latest_assistant_on_are_kept() -> None:
    early = [m for i in range(4) for m in tool_unit("search", {"q": i}, f"found {i}")]
    late = [m for i in range(4) for m in tool_unit("fetch", {"url": i}, f"page {i}")]
    view = counted([user("research"), *early, *late])
    out = await run_one(compress_tool_runs, "s1", view, msg_threshold=3)
    # The latest assistant is the last fetch call: its unit stays; the run before it
    # (all searches and three fetches) is compressed.
    assert out.messages[-2:] == view[-2:]
    assert len(out.messages) == 1 + 1 + 2


async def test_a_pinned_tool_breaks_the_run_and_stays() -> None:
    a = [m for i in range(4) for m in tool_unit("search", {"q": i}, f"found {i}")]
    keep = tool_unit("read_contract", {"id": 7}, "clause 4.2: payment in 30 days")
    b = [m for i in range(4) for m in tool_unit("search", {"q": i}, f"found {i}")]
    view = counted([user("go"), *a, *keep, *b, assistant("done"), user("next")])
    out = await run_one(
        compress_tool_runs, "s1", view, msg_threshold=3, pinned_tools=("read_contract",)
    )
    ids = [m.id for m in out.messages]
    assert keep[0].id in ids and keep[1].id in ids
    assert len(out.messages) == 1 + 1 + 2 + 1 + 2


# -- strategies 2 and 3 ---------------------------------------------------------------------


def offload_view() -> list[Message]:
    unit = tool_unit("fetch", {"url": "https://example.org"}, BIG)
    return counted(
        [
            system(),
            user(BIG),  # 1: large, early
            assistant("read it"),  # 2
            *unit,  # 3, 4: large tool result
            assistant("summary of the page"),  # 5: latest assistant
            user("and now? " + BIG),  # 6: latest user, large
        ]
    )


async def test_offload_keep_recent_offloads_large_messages_before_the_latest_assistant() -> None:
    view = offload_view()
    out = await run_one(offload_large_keep_recent, "s2", view, msg_threshold=3, last_keep=3)
    early = out.messages[1]
    assert early.id == view[1].id and early.role == "user"
    assert early.text().startswith("BEGIN lorem") and len(early.text()) < 500
    reload_id = early.metadata["offloaded"]
    assert out.offloaded[reload_id] == [view[1]]
    assert f'context_reload(id="{reload_id}")' in early.text()
    # The tool result is within the last 3 messages, the latest user message is never
    # compressed: both stay verbatim.
    assert out.messages[4] == view[4] and out.messages[6] == view[6]
    assert out.tokens_after < out.tokens_before


async def test_offload_without_keep_takes_every_large_message_but_the_latest_user() -> None:
    view = offload_view()
    out = await run_one(offload_large, "s3", view, msg_threshold=3, last_keep=3)
    assert "offloaded" in out.messages[1].metadata
    result = out.messages[4]
    assert result.role == "tool" and result.tool_call_id == view[4].tool_call_id
    assert out.offloaded[result.metadata["offloaded"]] == [view[4]]
    assert out.messages[6] == view[6]
    assert len(out.offloaded) == 2


async def test_offload_preview_length_is_configurable() -> None:
    view = offload_view()
    out = await run_one(offload_large, "s3", view, msg_threshold=3, offload_preview=50)
    first_line = out.messages[1].text().split("\n")[0]
    assert len(first_line) <= 50


# -- strategy 4 ----------------------------------------------------------------------------------


def rounds_view() -> list[Message]:
    return counted(
        [
            system(),
            user("Round one: " + chatter(6)),
            assistant("Noted. " + chatter(6)),
            user("Round two: Ada approved the budget of 12000 euros. " + chatter(6)),
            *tool_unit("lookup", {"who": "Ada"}, "Ada Lovelace, finance lead. " + chatter(5)),
            assistant("Recorded the approval. " + chatter(6)),
            user("Round three, current: what is next?"),
            assistant("Working on it."),
        ]
    )


async def test_each_historical_round_becomes_one_summary() -> None:
    view = rounds_view()
    out = await run_one(summarize_rounds, "s4", view, msg_threshold=6)
    assert [m.metadata.get("compressed") for m in out.messages] == [
        None,
        "round_summary",
        "round_summary",
        None,
        None,
    ]
    first, second = out.messages[1], out.messages[2]
    assert first.metadata["summarized_ids"] == [m.id for m in view[1:3]]
    assert second.metadata["summarized_ids"] == [m.id for m in view[3:7]]
    assert out.offloaded[second.metadata["reload_id"]] == view[3:7]
    # Names, numbers and the decision of the round survive the summary.
    assert "Ada" in second.text() and "12000" in second.text() and "approved" in second.text()
    assert out.messages[-2:] == view[-2:]


async def test_the_oldest_history_merges_when_round_summaries_are_not_enough() -> None:
    view = counted(
        [system()]
        + [m for r in range(8) for m in (user(f"Round {r}: " + chatter(8)), assistant("ok"))]
        + [user("current question")]
    )
    out = await run_one(summarize_rounds, "s4", view, msg_threshold=4)
    assert out.under_budget
    # Eight round summaries would be too many: the oldest seven merge, the newest stays.
    assert [m.metadata.get("compressed") for m in out.messages] == [
        None,
        "history_summary",
        "round_summary",
        None,
    ]
    merged, newest = out.messages[1], out.messages[2]
    assert len(out.offloaded[merged.metadata["reload_id"]]) == 7
    assert newest.metadata["summarized_ids"] == [m.id for m in view[15:17]]


async def test_a_pinned_message_inside_a_round_stays_and_splits_it() -> None:
    view = rounds_view()
    pinned = Message(role="assistant", content="Remember: Ada", metadata={"pinned": True})
    view = counted([*view[:2], pinned, *view[2:]])
    out = await run_one(summarize_rounds, "s4", view, msg_threshold=6)
    assert pinned.id in [m.id for m in out.messages]
    at = [m.id for m in view].index(pinned.id)
    before = {m.id for m in view[:at]}
    summaries = [m for m in out.messages if "summarized_ids" in m.metadata]
    assert summaries
    for summary in summaries:
        ids = set(summary.metadata["summarized_ids"])
        assert ids <= before or not ids & before  # never merged across the pinned message


class _Asked(OfflineSummarizer):
    """The offline summarizer, noting the ids of every span it is asked to summarize."""

    def __init__(self) -> None:
        super().__init__(get_counter())
        self.spans: list[list[str]] = []

    async def summarize_sliced(
        self, messages: Sequence[Message], max_tokens: int, slicer: TimeSlicer
    ) -> str:
        self.spans.append([m.id for m in messages])
        return await super().summarize_sliced(messages, max_tokens, slicer)


async def _rounds_of(view: list[Message], summarizer: OfflineSummarizer) -> CompressionOutcome:
    config = CompressionConfig(msg_threshold=12, compress_to=1.0)
    return await compress(
        view,
        config=config,
        counter=get_counter(),
        summarizer=summarizer,
        strategies=[("s4", summarize_rounds)],
        agent="Ada",
        version=3,
    )


async def test_a_round_no_summary_could_shrink_is_not_summarized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = [user(f"Thanks, {n}.") for n in ("Bram", "Cleo", "Dario")]
    view = counted(
        [
            system(),
            user("Round one: Ada approved the budget of 12000 euros. " + chatter(6)),
            assistant("Noted. " + chatter(6)),
            short[0],
            user("Round two: " + chatter(8)),
            assistant("Recorded. " + chatter(6)),
            short[1],
            short[2],
            *(
                m
                for r in range(3)
                for m in (user(f"Round {r + 3}: " + chatter(6)), assistant("ok"))
            ),
            user("current question"),
        ]
    )
    asked = _Asked()
    out = await _rounds_of(view, asked)
    # The one-message rounds stay as they are, and no summary of them was written.
    assert {m.id for m in short} <= {m.id for m in out.messages}
    assert not any(set(span) & {m.id for m in short} for span in asked.spans)
    assert any(m.metadata.get("compressed") == "round_summary" for m in out.messages)
    # Summarizing them anyway, and dropping each summary as no smaller, ends the same.
    monkeypatch.setattr(
        "actormem.actors.compression.rounds.least_summary_tokens", lambda *a, **k: 0
    )
    every = _Asked()
    again = await _rounds_of(view, every)
    assert any(set(span) & {m.id for m in short} for span in every.spans)
    assert _shown(again.messages) == _shown(out.messages) and again.offloaded == out.offloaded


def _shown(view: list[Message]) -> list[tuple[Any, ...]]:
    """A view without its summaries' own message ids (each summary gets a new one)."""
    return [(m.role, m.content, m.metadata, m.tokens) for m in view]


@settings(max_examples=examples(200), deadline=None)
@given(
    body=st.text(max_size=60) | st.sampled_from(["", " ", "\n", ".", "x", "\n\n[", "] \n"]),
    encoding=st.sampled_from(["cl100k_base", "o200k_base"]),
    serial=st.integers(min_value=1, max_value=100_000),
)
def test_no_summary_of_a_round_is_smaller_than_its_least_tokens(
    body: str, encoding: str, serial: int
) -> None:
    counter = get_counter(encoding)
    ctx = PassContext(
        CompressionConfig(), counter, OfflineSummarizer(counter), RunUsage(), agent="Ada"
    )
    span = counted([user("Thanks, Bram."), assistant("You are welcome.")])
    made = reload_id("Ada", 7, serial)
    draft = Draft(ctx, span)
    build = summary_builder(
        ctx, draft, span, label="Earlier round, summarized", kind="k", strategy="s", reload_id=made
    )
    least = least_summary_tokens(ctx, span, label="Earlier round, summarized", reload_id=made)
    assert build(body).tokens >= least
    assert build("").tokens == least


# -- strategy 5 ----------------------------------------------------------------------------------


async def test_current_round_keeps_call_names_and_arguments_and_summarizes_results() -> None:
    units = [
        m
        for i in range(3)
        for m in tool_unit(
            "search", {"query": f"flights to Oslo {i}"}, "price 420 EUR " + chatter(10)
        )
    ]
    view = counted([system(), user("Find me a flight to Oslo."), *units, assistant("Found three.")])
    out = await run_one(compress_current_round, "s5", view, msg_threshold=3)
    assert out.messages[:2] == view[:2]
    assert len(out.messages) == 3
    text = out.messages[2].text()
    for i in range(3):
        assert "search" in text and f"flights to Oslo {i}" in text
    assert "420" in text
    assert out.offloaded[out.messages[2].metadata["reload_id"]] == view[2:]


async def test_a_pending_tool_call_is_never_compressed() -> None:
    done = [m for i in range(3) for m in tool_unit("search", {"q": i}, chatter(10))]
    call = ToolCall(id="call_pending", name="fetch", arguments="{}")
    pending = Message(role="assistant", content=None, tool_calls=(call,))
    view = counted([user("go"), *done, pending])
    out = await run_one(compress_current_round, "s5", view, msg_threshold=3)
    assert out.messages[-1] == view[-1]
    assert len(out.messages) == 3


async def test_a_call_and_its_late_result_are_summarized_together() -> None:
    call = ToolCall(id="call_late", name="fetch", arguments="{}")
    view = counted(
        [
            user("start " + chatter(10)),
            Message(role="assistant", content=None, tool_calls=(call,)),
            user("meanwhile " + chatter(60)),
            Message(role="tool", content="late " + chatter(10), tool_call_id="call_late"),
            assistant("done " + chatter(10)),
            user("next"),
        ]
    )
    out = await run_one(summarize_rounds, "s4", view, msg_threshold=3)
    assert_valid(out.messages, before=view)
    assert not set_aside(out.messages)
    assert view[1] not in out.messages and view[3] not in out.messages
    assert {view[1].id, view[3].id} <= reachable_ids(out)
    assert tokens(out.messages) < tokens(view)
