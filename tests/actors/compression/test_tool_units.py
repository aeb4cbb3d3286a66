"""Calls without results and orphan results: set aside from what is sent, never a block."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from actormem.actors.compression import CompressionOutcome, OfflineSummarizer, compress
from actormem.actors.compression._layout import sendable, set_aside
from actormem.actors.messages import Message, ToolCall
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import (
    assert_valid,
    assistant,
    chatter,
    counted,
    reachable_text,
    system,
    town_small,
    user,
)

pytestmark = pytest.mark.anyio


async def run_town_small(view: list[Message]) -> CompressionOutcome:
    counter = get_counter()
    return await compress(
        view, config=town_small(), counter=counter, summarizer=OfflineSummarizer(counter)
    )


def chat(n: int, first: str = "user") -> list[Message]:
    other = "assistant" if first == "user" else "user"
    return [
        Message(role=first if i % 2 == 0 else other, content=f"line {i}: " + chatter(3))
        for i in range(n)
    ]


def call(call_id: str, name: str = "fetch", arguments: str = "{}") -> Message:
    return Message(role="assistant", content=None, tool_calls=(ToolCall(call_id, name, arguments),))


def result(call_id: str, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name="fetch")


@pytest.mark.parametrize("first", ["user", "assistant"])
async def test_an_unanswered_call_followed_by_many_messages_does_not_stop_compression(
    first: str,
) -> None:
    view = counted([system(), user("go"), call("lost"), *chat(120, first)])
    with capture_logs() as logs:
        out = await run_town_small(view)
    assert out.under_budget, out.note
    assert out.tokens_saved > 0
    assert_valid(out.messages, before=view)
    assert not [e for e in logs if e["log_level"] in ("warning", "error")]
    for m in view:
        assert m.text() in reachable_text(out)


async def test_a_call_waiting_in_the_current_round_stays_verbatim() -> None:
    view = counted(
        [system(), *chat(60), user("now fetch it"), call("waiting"), *chat(4, "assistant")]
    )
    out = await run_town_small(view)
    assert out.under_budget, out.note
    assert view[62] in out.messages  # its result may still come
    later = counted([result("waiting", "the answer")])
    assert not set_aside([*out.messages, *later])


async def test_an_abandoned_call_is_compressed_and_a_late_answer_becomes_an_orphan() -> None:
    view = counted([system(), user("first"), call("abandoned"), *chat(60)])
    out = await run_town_small(view)
    assert view[2] not in out.messages
    assert any(view[2].id in m.metadata.get("summarized_ids", []) for m in out.messages)
    late = counted([result("abandoned", "too late")])
    # The answer cannot be sent without its call: it is set aside, not an invalid context.
    assert set_aside([*out.messages, *late]) == ["orphan tool result 'abandoned'"]
    assert late[0] not in sendable([*out.messages, *late])


async def test_a_large_orphan_result_is_offloaded() -> None:
    orphan = result("unknown", "orphan payload " + chatter(40))
    view = counted([system(), user("hello"), orphan, *chat(40, "assistant")])
    assert len(orphan.text()) > town_small().large_payload_threshold
    out = await run_town_small(view)
    assert out.under_budget, out.note
    assert orphan not in out.messages
    assert orphan.text() in reachable_text(out)


async def test_a_duplicate_result_is_compressed_like_any_message() -> None:
    view = counted(
        [
            system(),
            user("look it up"),
            call("c1"),
            result("c1", "first answer"),
            result("c1", "second answer " + chatter(30)),
            assistant("noted"),
            *chat(40),
        ]
    )
    out = await run_town_small(view)
    assert out.under_budget, out.note
    assert_valid(out.messages, before=view)
    assert "orphan tool result 'c1'" not in set_aside(out.messages)


def test_what_is_sent_pairs_late_results_and_sets_orphans_aside() -> None:
    view = counted([user("a"), result("x", "orphan"), call("c"), user("b"), result("c", "late")])
    assert [m.role for m in sendable(view)] == ["user", "assistant", "tool", "user"]
    assert set_aside(view) == ["orphan tool result 'x'"]


async def test_a_pinned_result_keeps_its_call() -> None:
    pinned = Message(
        role="tool", content="keep me", tool_call_id="p1", name="fetch", metadata={"pinned": True}
    )
    view = counted(
        [system(), user("first " + chatter(20)), call("p1"), *chat(8), pinned, *chat(40)]
    )
    out = await run_town_small(view)
    kept = {m.id for m in out.messages}
    assert view[2].id in kept and pinned.id in kept
    assert_valid(out.messages, before=view)


async def test_calls_each_answered_after_the_next_one_are_compressed_together() -> None:
    chain = [call("k0")]
    for k in range(1, 30):
        chain += [call(f"k{k}"), result(f"k{k - 1}", f"row {k - 1}: " + chatter(2))]
    view = counted([system(), user("run them all"), *chain, result("k29", "last"), *chat(6)])
    out = await run_town_small(view)
    assert out.under_budget, out.note
    assert_valid(out.messages, before=view)
    assert not set_aside(out.messages)
    for m in view:
        assert m.text() in reachable_text(out)
