"""The LLM summarizer against a loopback OpenAI-compatible server: success, retries, fallbacks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from actormem.actors.compression import (
    CircuitBreaker,
    CompressionConfig,
    LLMConfig,
    LLMSummarizer,
    RunUsage,
    compress,
    make_summarizer,
)
from actormem.actors.messages import Message
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import assert_valid, assistant, chatter, counted, system, user
from tests.support.openai_server import OpenAIStub, serve_keyed

pytestmark = pytest.mark.anyio

KEY_ENV = "ACTORMEM_TEST_LLM_KEY"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    yield from serve_keyed(monkeypatch, KEY_ENV)


def llm_config(stub: OpenAIStub, **kw: Any) -> LLMConfig:
    fields: dict[str, Any] = {
        "base_url": stub.base_url,
        "api_key_env": KEY_ENV,
        "model": "stub-model",
        "timeout": 2.0,
        "max_retries": 2,
        "backoff_base": 0.01,
        "backoff_cap": 0.05,
    }
    fields.update(kw)
    return LLMConfig(**fields)


SPAN = [user("Mara was born on 1987-03-14. " + chatter(5)), assistant("Noted, Mara.")]


async def summarize(summarizer: LLMSummarizer, usage: RunUsage | None = None) -> str:
    return await summarizer.summarize(
        SPAN, max_tokens=60, purpose="round", usage=usage or RunUsage()
    )


def fallbacks(logs: list[dict[str, Any]]) -> list[str]:
    return [e["reason"] for e in logs if e["event"] == "summarizer_fallback"]


async def test_a_normal_answer_is_the_summary(stub: OpenAIStub) -> None:
    usage = RunUsage()
    async with LLMSummarizer(llm_config(stub), get_counter()) as summarizer:
        text = await summarize(summarizer, usage)
    assert text.startswith("LLM SUMMARY: ")
    assert stub.requests == 1 and not usage.fell_back and usage.llm_tokens == 120
    body = stub.bodies[0]
    assert body["model"] == "stub-model" and body["max_tokens"] == 60
    assert "name, number, date" in body["messages"][0]["content"]
    assert "1987-03-14" in body["messages"][1]["content"]


@pytest.mark.parametrize("failures", [("429",), ("500",), ("429", "500")])
async def test_rate_limits_and_server_errors_are_retried(
    stub: OpenAIStub, failures: tuple[Any, ...]
) -> None:
    stub.script(*failures)
    usage = RunUsage()
    async with LLMSummarizer(llm_config(stub), get_counter()) as summarizer:
        text = await summarize(summarizer, usage)
    assert text.startswith("LLM SUMMARY: ") and not usage.fell_back
    assert stub.requests == len(failures) + 1 == usage.llm_calls


async def test_exhausted_retries_fall_back_offline(stub: OpenAIStub) -> None:
    stub.mode = "500"
    usage = RunUsage()
    with capture_logs() as logs:
        async with LLMSummarizer(llm_config(stub, max_retries=1), get_counter()) as summarizer:
            text = await summarize(summarizer, usage)
    assert "1987-03-14" in text and "LLM SUMMARY" not in text
    assert usage.fell_back and stub.requests == 2
    assert fallbacks(logs) == ["retries"]


async def test_a_hanging_server_times_out_and_falls_back(stub: OpenAIStub) -> None:
    stub.mode = "hang"
    usage = RunUsage()
    with capture_logs() as logs:
        config = llm_config(stub, timeout=0.3, max_retries=0)
        async with LLMSummarizer(config, get_counter()) as summarizer:
            text = await summarize(summarizer, usage)
    assert "Mara" in text and usage.fell_back
    assert fallbacks(logs) == ["timeout"]


@pytest.mark.parametrize("mode", ["garbage", "wrong_shape"])
async def test_garbage_answers_fall_back_without_retrying(stub: OpenAIStub, mode: Any) -> None:
    stub.mode = mode
    usage = RunUsage()
    with capture_logs() as logs:
        async with LLMSummarizer(llm_config(stub), get_counter()) as summarizer:
            text = await summarize(summarizer, usage)
    assert "1987-03-14" in text and usage.fell_back
    assert stub.requests == 1
    assert fallbacks(logs) == ["garbage"]


async def test_the_circuit_breaker_stops_calling_a_failing_server(stub: OpenAIStub) -> None:
    stub.mode = "garbage"
    config = llm_config(stub, breaker_failures=2, breaker_reset=600)
    with capture_logs() as logs:
        async with LLMSummarizer(config, get_counter()) as summarizer:
            for _ in range(5):
                await summarize(summarizer)
    assert stub.requests == 2
    assert fallbacks(logs) == ["garbage", "garbage", "circuit_open", "circuit_open", "circuit_open"]
    assert any(e["event"] == "summarizer_circuit_open" for e in logs)


async def test_the_per_run_token_cap_is_never_passed(stub: OpenAIStub) -> None:
    probe = LLMSummarizer(llm_config(stub), get_counter())
    needed = probe.request_tokens(SPAN, 60, "round")
    await probe.aclose()
    usage = RunUsage()
    with capture_logs() as logs:
        # Room for one request; the stub reports 120 tokens spent, so a second
        # request could pass the cap and is not sent.
        config = llm_config(stub, max_tokens_per_run=needed + 100)
        async with LLMSummarizer(config, get_counter()) as summarizer:
            await summarize(summarizer, usage)
            await summarize(summarizer, usage)
    assert stub.requests == 1 and usage.llm_tokens == 120
    assert fallbacks(logs) == ["token_cap"]


async def test_the_cost_cap_is_never_passed(stub: OpenAIStub) -> None:
    probe = LLMSummarizer(llm_config(stub), get_counter())
    needed = probe.request_tokens(SPAN, 60, "round")
    await probe.aclose()
    price = 0.01  # dollars per 1000 tokens, in and out
    usage = RunUsage()
    config = llm_config(
        stub,
        max_cost_per_run=(needed + 100) * price / 1000,
        input_price_per_1k=price,
        output_price_per_1k=price,
    )
    async with LLMSummarizer(config, get_counter()) as summarizer:
        await summarize(summarizer, usage)
        await summarize(summarizer, usage)
    assert stub.requests == 1 and usage.fell_back
    assert usage.cost == pytest.approx(120 * price / 1000)


async def test_without_an_api_key_nothing_is_sent(
    stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    with capture_logs() as logs:
        async with LLMSummarizer(llm_config(stub), get_counter()) as summarizer:
            text = await summarize(summarizer)
    assert "Mara" in text and stub.requests == 0
    assert fallbacks(logs) == ["no_api_key"]
    assert "test-key" not in repr(summarizer)


async def test_compress_with_the_llm_summarizer(stub: OpenAIStub) -> None:
    view: list[Message] = [system()]
    for r in range(6):
        view += [user(f"round {r}: " + chatter(10)), assistant("ok " + chatter(10))]
    view = counted([*view, user("go on")])
    config = CompressionConfig(
        msg_threshold=8, compress_to=1.0, summarizer="openai", llm=llm_config(stub)
    )
    summarizer = make_summarizer(config, get_counter())
    try:
        out = await compress(view, config=config, counter=get_counter(), summarizer=summarizer)
    finally:
        await summarizer.aclose()
    assert out.under_budget and out.summarizer == "openai" and not out.fell_back
    assert out.strategies == ["summarize_rounds"]
    assert sum("LLM SUMMARY" in m.text() for m in out.messages) == 6 == stub.requests
    assert_valid(out.messages)


async def test_compress_falls_back_when_the_llm_fails(stub: OpenAIStub) -> None:
    stub.mode = "500"
    view: list[Message] = [system()]
    for r in range(6):
        view += [user(f"round {r}: code {r}{r}{r}. " + chatter(10)), assistant("ok")]
    view = counted([*view, user("go on")])
    llm = llm_config(stub, max_retries=0, breaker_failures=0)
    config = CompressionConfig(msg_threshold=8, compress_to=1.0, summarizer="openai", llm=llm)
    async with LLMSummarizer(config.llm, get_counter()) as summarizer:
        out = await compress(view, config=config, counter=get_counter(), summarizer=summarizer)
    assert out.under_budget and out.fell_back
    assert "6 summaries written offline (retries)" in out.note
    text = "\n".join(m.text() for m in out.messages)
    assert all(f"{r}{r}{r}" in text for r in range(6))


async def test_concurrent_summaries_of_one_run_share_the_token_cap(stub: OpenAIStub) -> None:
    view: list[Message] = [system()]
    for r in range(6):
        view += [user(f"round {r}: " + chatter(10)), assistant("ok " + chatter(10))]
    view = counted([*view, user("go on")])
    probe = LLMSummarizer(llm_config(stub), get_counter())
    target = max(48, int(sum(m.tokens for m in view[1:3]) * 0.3))  # as strategy 4 aims
    needed = probe.request_tokens(view[1:3], target, "round")
    await probe.aclose()
    llm = llm_config(stub, max_tokens_per_run=2 * needed + 10)
    config = CompressionConfig(msg_threshold=8, compress_to=1.0, summarizer="openai", llm=llm)
    async with LLMSummarizer(config.llm, get_counter()) as summarizer:
        out = await compress(view, config=config, counter=get_counter(), summarizer=summarizer)
    # Six rounds were summarized at once; only two fit the cap, the rest went offline.
    assert stub.requests == 2 and out.fell_back and out.under_budget
    assert sum("LLM SUMMARY" in m.text() for m in out.messages) == 2


def test_the_breaker_opens_after_failures_and_closes_after_a_good_trial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("actormem.actors.compression.llm.time.monotonic", lambda: now[0])
    breaker = CircuitBreaker(failures=2, reset_after=30)
    breaker.record_failure()
    assert not breaker.is_open
    breaker.record_failure()
    assert breaker.is_open
    now[0] += 31  # half-open: one trial may go
    assert not breaker.is_open
    breaker.record_failure()  # the trial failed: open again
    assert breaker.is_open
    now[0] += 31
    breaker.record_success()
    assert not breaker.is_open
    breaker.record_failure()  # counting starts over after a success
    assert not breaker.is_open
