"""context(max_tokens): never empty when anything fits, within every budget, whole when
the budget is the view's own cost; and when nothing fits, the error says what would."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormem.actors import (
    AppConfig,
    ContextBudgetError,
    MemoryHandle,
    MemoryInputError,
    MemoryRuntime,
    Message,
    check_openai_messages,
)
from actormem.actors.conversation import group_units, leading_system_count
from actormem.runtime import Transport, get_counter
from tests.actors.memory.test_pairing_property import WORDS, conversations
from tests.support import examples as support_examples

pytestmark = pytest.mark.anyio

_names = itertools.count()


@st.composite
def views(draw: st.DrawFn) -> list[Message]:
    """Conversations with tool calls (answered, late, dangling, orphan results), some
    messages important enough for core memory, and system messages anywhere."""
    out: list[Message] = []
    for m in draw(conversations()):
        if m.role == "user" and draw(st.booleans()):
            m = msgspec.structs.replace(m, importance=1.0)
        out.append(m)
        if m.role != "system" and draw(st.integers(0, 9)) == 0:
            out.append(Message(role="system", content=draw(WORDS)))
    return out


class Expected:
    """What context() must do for a stored view, worked out from its units."""

    def __init__(self, stored: list[Message]) -> None:
        head = leading_system_count(stored)
        self.system = [m.to_openai() for m in stored[:head]]
        units = [u for u in group_units(stored[head:]) if u.complete]
        self.whole = self.system + [m.to_openai() for u in units for m in u.messages]
        self.newest = [m.to_openai() for m in units[-1].messages] if units else []
        counter = get_counter()
        self.needed = counter.count_messages(self.system + self.newest)
        self.cost = counter.count_messages(self.whole)


def check(ctx: list[dict[str, Any]], budget: int, expected: Expected) -> None:
    assert get_counter().count_messages(ctx) <= budget
    if not expected.whole:
        assert all(m["role"] == "system" for m in ctx)  # a recall block at most
        return
    assert check_openai_messages(ctx) == [], ctx
    assert ctx[: len(expected.system)] == expected.system
    if expected.newest:
        assert ctx[-len(expected.newest) :] == expected.newest


async def check_budgets(
    mem: MemoryHandle, budgets: list[int] | None, recalls: bool = False
) -> None:
    """Check context() on the stored view at ``budgets`` (None: every budget from one
    below the smallest valid context to a little above the whole view); ``recalls``:
    the agent holds insights, so the view at its own cost need not come back whole."""
    expected = Expected(await mem.get())
    with pytest.raises(ContextBudgetError) as caught:
        await mem.context(expected.needed - 1)
    assert caught.value.needed == expected.needed
    if not recalls:
        assert await mem.context(expected.cost) == expected.whole
    if budgets is None:
        budgets = list(range(expected.needed, expected.cost + 3))
    for budget in budgets:
        if budget < expected.needed:
            with pytest.raises(MemoryInputError):  # ContextBudgetError from 1 up
                await mem.context(budget)
        else:
            check(await mem.context(budget), budget, expected)


def property_settings(examples: int) -> settings:
    return settings(
        max_examples=support_examples(examples),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


@property_settings(60)
@given(view=views(), insights=st.integers(0, 3))
def test_every_budget_from_the_newest_unit_up_gives_a_valid_context(
    view: list[Message], insights: int
) -> None:
    async def run() -> None:
        async with MemoryRuntime() as rt:
            mem = rt.memory("w")
            if insights:
                await mem.subscribe("news")
                for i in range(insights):
                    await rt.memory("peer").share(f"insight {i}: " + "news " * 20, "news")
            await mem.add(view)
            await check_budgets(mem, None, recalls=bool(insights))

    anyio.run(run)


@property_settings(12)
@given(view=views(), budgets=st.lists(st.integers(0, 800), min_size=1, max_size=8))
async def test_context_rules_hold_over_redis(
    make_redis_transport: Callable[[], Transport], view: list[Message], budgets: list[int]
) -> None:
    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        mem = rt.memory(f"w{next(_names)}")
        await mem.add(view)
        await check_budgets(mem, budgets)


async def test_one_message_fits_a_budget_just_above_it(memory_rt: MemoryRuntime) -> None:
    mem = memory_rt.memory("solo")
    await mem.add(Message(role="user", content="word " * 37))
    (message,) = await mem.get()
    needed = get_counter().count_messages([message.to_openai()])
    assert needed == message.tokens + 3
    for budget in (needed, needed + 7, needed + 40):
        assert await mem.context(budget) == [message.to_openai()]
    with pytest.raises(ContextBudgetError, match=f"needs {needed} tokens") as caught:
        await mem.context(needed - 1)
    assert caught.value.needed == needed  # over Redis too: rebuilt from the message
    with pytest.raises(MemoryInputError, match="max_tokens"):
        await mem.context(0)


async def test_the_recall_block_takes_only_room_the_newest_message_leaves(
    memory_rt: MemoryRuntime,
) -> None:
    alice, bob = memory_rt.memory("alice"), memory_rt.memory("bob")
    await bob.subscribe("harbour")
    await alice.share("The ferry leaves at 7:40 from pier 3.", "harbour", 0.8)
    await bob.add({"role": "user", "content": "When does the ferry leave? " * 10})
    question = (await bob.get())[-1].to_openai()
    needed = get_counter().count_messages([question])
    assert await bob.context(needed) == [question]
    roomy = await bob.context(needed + 400)
    assert roomy[-1] == question
    # Another agent's insight is quoted in a user message, never a system one.
    assert roomy[0]["role"] == "user" and "7:40" in roomy[0]["content"]
    assert roomy[0]["content"].startswith("<shared_insights>")
    assert get_counter().count_messages(roomy) <= needed + 400


async def test_a_later_system_message_stays_in_its_place(memory_rt: MemoryRuntime) -> None:
    mem = memory_rt.memory("s")
    convo = [
        Message(role="system", content="You are Alice."),
        Message(role="user", content="hi"),
        Message(role="system", content="The user is now Bob."),
        Message(role="user", content="who am I?"),
    ]
    await mem.add(convo)
    ctx = await mem.context()
    assert ctx == [m.to_openai() for m in convo]
    assert check_openai_messages(ctx) == []
    # The system prompt is pinned; a later system message is cut like any other.
    last = get_counter().count_messages([convo[0].to_openai(), convo[-1].to_openai()])
    assert await mem.context(last) == [convo[0].to_openai(), convo[-1].to_openai()]


def test_the_validator_refuses_an_empty_list() -> None:
    assert check_openai_messages([]) == ["no messages"]
    assert check_openai_messages([{"role": "user", "content": "hi"}]) == []
