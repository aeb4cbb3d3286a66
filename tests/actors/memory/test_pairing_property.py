"""Property: whatever the conversation and budget, context() and prune() never break a
tool-call pair, and stay within budget."""

from __future__ import annotations

import contextlib

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormem.actors import (
    ContextBudgetError,
    MemoryRuntime,
    Message,
    ToolCall,
    check_openai_messages,
)
from actormem.actors.conversation import group_units
from actormem.runtime import get_counter
from tests.support import examples

WORDS = st.text(alphabet="abcdefgh ijklmnop", min_size=1, max_size=60)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message(role="system", content=draw(WORDS)))
    call_no = 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "orphan", "agent"]))
        if kind == "user":
            msgs.append(Message(role="user", content=draw(WORDS)))
        elif kind == "assistant":
            msgs.append(Message(role="assistant", content=draw(WORDS)))
        elif kind == "agent":
            msgs.append(Message(role="agent_call", name="bob", content=draw(WORDS)))
            msgs.append(Message(role="agent_response", name="al", content=draw(WORDS)))
        elif kind == "orphan":
            msgs.append(Message(role="tool", tool_call_id=f"ghost{call_no}", content="?"))
            call_no += 1
        else:
            n = draw(st.integers(1, 3))
            calls = tuple(ToolCall(f"c{call_no + i}", "f", "{}") for i in range(n))
            call_no += n
            msgs.append(Message(role="assistant", tool_calls=calls))
            answered = draw(st.lists(st.sampled_from(calls), unique=True, max_size=n))
            if draw(st.booleans()):  # a message slipped in between call and results
                msgs.append(Message(role="user", content=draw(WORDS)))
            for call in answered:
                msgs.append(Message(role="tool", tool_call_id=call.id, content=draw(WORDS)))
    return msgs


def check_context(ctx: list[dict], budget: int) -> None:
    if ctx:  # empty only when nothing can be sent (checked in tests/actors/memory/test_window.py)
        assert check_openai_messages(ctx) == [], ctx
    assert get_counter().count_messages(ctx) <= budget


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(conversation=conversations(), budget=st.integers(4, 600), prune_to=st.integers(1, 600))
def test_context_and_prune_keep_pairs_and_budgets(
    conversation: list[Message], budget: int, prune_to: int
) -> None:
    async def run() -> None:
        async with MemoryRuntime() as rt:
            mem = rt.memory("p")
            await mem.add(conversation)
            try:
                check_context(await mem.context(budget), budget)
            except ContextBudgetError as exc:
                assert exc.needed is not None and exc.needed > budget
            before = await mem.get()
            result = await mem.prune(prune_to)
            after = await mem.get()
            kept = {m.id for m in after}
            head = 1 if before and before[0].role == "system" else 0
            assert result.working_tokens == sum(m.tokens for m in after)
            system_tokens = before[0].tokens if head else 0
            if system_tokens <= prune_to:
                assert result.working_tokens <= prune_to
            # A unit is kept whole or dropped whole.
            for unit in group_units(before[head:]):
                inside = [m.id in kept for m in unit.messages]
                assert all(inside) or not any(inside), unit
            with contextlib.suppress(ContextBudgetError):
                check_context(await mem.context(budget), budget)

    anyio.run(run)
