"""The history checker catches each kind of fault, and reports none on a clean run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from actormem.actors import AppConfig, MemoryRuntime, Message
from actormem.runtime import Transport
from actormem.runtime.redis import RedisConfig
from tests.support.history import (
    Applied,
    History,
    check,
    digest,
    observe_memory,
    observe_stored_memory,
)

pytestmark = pytest.mark.faults


def sent_three() -> History:
    history = History()
    for n in range(3):
        history.sent(f"a{n}", "alice", f"payload a{n}")
    history.sent("b0", "bob", "payload b0")
    return history


def clean() -> dict[str, list[Applied]]:
    return {
        "alice": [Applied(f"a{n}", digest(f"payload a{n}")) for n in range(3)],
        "bob": [Applied("b0", digest("payload b0"))],
    }


def test_a_clean_run_has_no_faults() -> None:
    verdict = sent_three().check(clean())
    assert verdict.ok, str(verdict)
    assert (verdict.sent, verdict.applied) == (4, 4)


def test_a_lost_command_is_reported() -> None:
    final = clean()
    del final["alice"][1]
    verdict = sent_three().check(final)
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (1, 0, 0)
    assert verdict.examples["lost"] == ("a1 for alice",)
    assert not verdict.ok


def test_an_agent_missing_from_the_final_state_lost_everything() -> None:
    final = clean()
    del final["bob"]
    assert sent_three().check(final).lost == 1


def test_a_command_applied_twice_is_reported_and_is_no_order_violation() -> None:
    final = clean()
    final["alice"].append(final["alice"][0])
    verdict = sent_three().check(final)
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (0, 1, 0)
    assert "a0 applied 2 times" in verdict.examples["duplicated"][0]


def test_a_command_applied_on_two_agents_is_duplicated_and_misrouted() -> None:
    final = clean()
    final["bob"].append(Applied("a2", digest("payload a2")))
    verdict = sent_three().check(final)
    assert (verdict.duplicated, verdict.misrouted) == (1, 1)


def test_commands_of_one_producer_out_of_order_are_reported() -> None:
    final = clean()
    final["alice"] = [final["alice"][i] for i in (0, 2, 1)]
    verdict = sent_three().check(final)
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (0, 0, 1)
    assert verdict.examples["reordered"] == ("a1 applied after a2 on alice",)


def test_producers_interleaving_is_not_an_order_violation() -> None:
    history = History()
    history.sent("p1", "alice", "x", producer="p")
    history.sent("q1", "alice", "y", producer="q")
    history.sent("p2", "alice", "z", producer="p")
    # q's command landed last: allowed, p's two are still in p's order.
    final = {"alice": [Applied("p1"), Applied("p2"), Applied("q1")]}
    assert history.check(final).ok
    swapped = {"alice": [Applied("p2"), Applied("q1"), Applied("p1")]}
    assert history.check(swapped).reordered == 1


def test_a_changed_payload_and_a_command_never_sent_are_reported() -> None:
    final = clean()
    final["alice"][0] = Applied("a0", digest("tampered"))
    final["bob"].append(Applied("forged"))
    verdict = sent_three().check(final)
    assert (verdict.corrupted, verdict.unknown, verdict.lost) == (1, 1, 0)
    assert not verdict.ok


def test_ids_are_unique_and_a_surely_failed_send_can_be_forgotten() -> None:
    history = sent_three()
    with pytest.raises(ValueError, match="recorded twice"):
        history.sent("a0", "alice", "again")
    history.forget("b0")
    final = clean()
    del final["bob"]
    assert history.check(final).ok


def test_the_verdict_reads_as_counts_and_examples() -> None:
    final = clean()
    del final["alice"][0]
    text = str(check(sent_three().records(), final))
    assert text.splitlines()[0] == (
        "4 sent, 3 applied: lost 1, duplicated 0, reordered 0, misrouted 0, corrupted 0, unknown 0"
    )
    assert "lost: a0 for alice" in text


@pytest.fixture
async def rt(make_transport: Callable[[], Transport]) -> AsyncIterator[MemoryRuntime]:
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as runtime:
        yield runtime


@pytest.mark.anyio
async def test_a_real_run_checks_clean_through_the_api_and_in_redis(
    rt: MemoryRuntime, redis_config: RedisConfig
) -> None:
    history = History()
    agents = [f"agent{i}" for i in range(4)]
    for step in range(10):
        for agent in agents:
            message = Message(role="user", name="tester", content=f"{agent} step {step}")
            await rt.memory(agent).add(history.message(agent, message))
    # Compression rewrites the working view only: the history still holds everything.
    await rt.memory("agent0").prune(20)
    verdict = history.check(await observe_memory(rt, agents))
    assert verdict.ok, str(verdict)
    assert verdict.applied == 40
    if rt.transport.name == "redis":
        # The durable state in Redis, read without any worker's help, agrees.
        client = rt.transport.client  # type: ignore[attr-defined]
        stored = await observe_stored_memory(
            client, redis_config.prefix, redis_config.shards, agents
        )
        stored_verdict = history.check(stored)
        assert stored_verdict.ok, str(stored_verdict)
        assert stored_verdict.applied == 40
