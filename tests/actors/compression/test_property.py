"""Property: any conversation, any budget: valid, nothing lost, and under budget when possible."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormem.actors.compression import (
    CompressionConfig,
)
from actormem.actors.messages import Message, ToolCall, count_tokens
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import (
    SUMMARY_FLOOR,
    assert_valid,
    compress_offline,
    counted,
    reachable_text,
)
from tests.actors.compression._build import texts as build_texts
from tests.support import examples

WORDS = (
    "Mara",
    "Olav",
    "harbour",
    "ledger",
    "4821",
    "1987-03-14",
    "decided",
    "will",
    "approve",
    "crates",
    "barley",
    "bridge",
    "Tuesday",
    "council",
    "17",
    "the",
    "a",
    "of",
    "and",
    "search",
    "fetch",
    "result",
    "page",
    "price",
    "420",
    "EUR",
    "quietly",
)
SIZES = (3, 30, 200, 800, 2500)


TEXTS = build_texts(WORDS, SIZES, 6)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    view: list[Message] = []
    calls = iter(range(10**6))
    if draw(st.booleans()):
        view.append(Message(role="system", content="You keep the town's records."))
    for _ in range(draw(st.integers(0, 10))):
        pinned = draw(st.integers(0, 12)) == 0
        role = draw(st.sampled_from(["user", "user", "agent_call"]))
        view.append(Message(role=role, content=draw(TEXTS), metadata={"pinned": pinned}))
        for _ in range(draw(st.integers(0, 5))):
            names = draw(
                st.lists(
                    st.sampled_from(["search", "fetch", "create_plan"]), min_size=1, max_size=2
                )
            )
            tool_calls = tuple(
                ToolCall(
                    id=f"c{next(calls)}", name=n, arguments=json.dumps({"q": draw(TEXTS)[:80]})
                )
                for n in names
            )
            view.append(Message(role="assistant", content=None, tool_calls=tool_calls))
            for call in tool_calls:
                result: str | dict[str, Any] = draw(TEXTS)
                if draw(st.integers(0, 5)) == 0:
                    result = {"result": result, "rows": 3}  # structured tool output
                view.append(
                    Message(role="tool", content=result, tool_call_id=call.id, name=call.name)
                )
        if draw(st.booleans()):
            role = draw(st.sampled_from(["assistant", "assistant", "agent_response"]))
            view.append(Message(role=role, content=draw(TEXTS)))
    if draw(st.integers(0, 4)) == 0:
        pending = ToolCall(id="pending", name="fetch", arguments="{}")
        view.append(Message(role="assistant", content=None, tool_calls=(pending,)))
    return counted(view)


@st.composite
def configs(draw: st.DrawFn) -> CompressionConfig:
    threshold = draw(st.sampled_from([300, 1000, 5120]))
    return CompressionConfig(
        msg_threshold=draw(st.integers(3, 40)),
        max_tokens=draw(st.integers(1_000, 30_000)),
        token_ratio=draw(st.sampled_from([0.5, 0.75, 1.0])),
        last_keep=draw(st.integers(0, 10)),
        min_consecutive_tool_messages=draw(st.integers(1, 8)),
        large_payload_threshold=threshold,
        offload_preview=draw(st.integers(20, 200)),
        compress_to=draw(st.sampled_from([0.5, 0.8, 1.0])),
    )


def protected(view: list[Message]) -> list[Message]:
    """What no strategy may touch: system, pinned, the latest user message, pending calls."""
    users = [i for i, m in enumerate(view) if m.role in ("user", "agent_call")]
    answered = {m.tool_call_id for m in view if m.role == "tool"}
    keep = []
    for i, m in enumerate(view):
        pending = any(c.id not in answered for c in m.tool_calls)
        if m.role == "system" or m.pinned or (users and i == users[-1]) or pending:
            keep.append(m)
    return keep


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(view=conversations(), config=configs())
def test_compression_is_valid_lossless_and_within_budget_when_possible(
    view: list[Message], config: CompressionConfig
) -> None:
    out = compress_offline(view, config)
    after = out.messages
    counter = get_counter()

    # Valid: nothing the input did not already have (a pending call) is wrong.
    assert_valid(after, before=view)

    # Counted, and the outcome's numbers tell the truth.
    assert all(m.tokens == count_tokens(m, counter) for m in after)
    assert out.tokens_after == sum(m.tokens for m in after)
    assert out.messages_after == len(after)
    assert out.under_budget == (not config.over_budget(len(after), out.tokens_after))
    assert out.passes <= config.max_passes

    # Protected messages come through verbatim, in order.
    kept = protected(view)
    assert [m for m in after if m in kept] == kept

    # Nothing is lost: every original text is in the view or behind a reload id.
    reachable = reachable_text(out)
    for m in view:
        assert m.text() in reachable

    # Under budget whenever the protected messages leave room for summaries.
    room_messages = len(kept) + (len(kept) + 1) <= config.msg_threshold
    room_tokens = (
        sum(m.tokens for m in kept) + (len(kept) + 1) * SUMMARY_FLOOR <= config.token_limit
    )
    if room_messages and room_tokens:
        assert out.under_budget, out.note
    if not out.under_budget:
        assert "still over budget" in out.note


def test_a_fixed_example_runs() -> None:
    # A quick sanity run outside hypothesis, so a broken strategy fails plainly.
    view = counted(
        [Message(role="user", content="hello " * 50), Message(role="assistant", content="hi")]
    )
    out = compress_offline(view, CompressionConfig(msg_threshold=1))
    assert out.messages[0] == view[0]
