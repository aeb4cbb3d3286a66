"""A misbehaving LLM endpoint under a running memory: nothing lost, service resumes.

The loopback OpenAI stub answers 429, 500, hangs and garbage for a while; the
memories keep compressing with the offline summarizer meanwhile, the circuit
breaker stops the calls, the original history keeps every message (the history
checker) and everything compressed stays reloadable. Once the stub recovers,
LLM summaries come back without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest
from structlog.testing import capture_logs

from actormem.actors import AppConfig, MemoryRuntime, Message, check_openai_messages
from actormem.actors.compression import CompressionConfig, LLMConfig
from tests.faults.report import Recorder
from tests.support.history import History, observe_memory
from tests.support.openai_server import OpenAIStub

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

KEY_ENV = "ACTORMEM_FAULTS_LLM_KEY"
#: Seconds the breaker stays open before a trial call.
BREAKER_RESET = 1.0


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    monkeypatch.setenv(KEY_ENV, "test-key")
    with OpenAIStub() as server:
        yield server


def app(stub: OpenAIStub) -> AppConfig:
    llm = LLMConfig(
        base_url=stub.base_url,
        api_key_env=KEY_ENV,
        model="stub-model",
        timeout=0.5,
        max_retries=1,
        backoff_base=0.01,
        backoff_cap=0.05,
        breaker_failures=2,
        breaker_reset=BREAKER_RESET,
    )
    compression = CompressionConfig(
        msg_threshold=20, max_tokens=1200, last_keep=6, summarizer="openai", llm=llm
    )
    return AppConfig(compression=compression)


def turn(agent: str, i: int) -> list[Message]:
    return [
        Message(role="user", name="bob", content=f"{agent} question {i}: how is the mill today?"),
        Message(role="assistant", content=f"{agent} answer {i}: the wheel turned {i} times."),
    ]


async def talk(rt: MemoryRuntime, history: History, agent: str, i: int) -> None:
    """One turn, then wait until the compression it may have started is done."""
    memory = rt.memory(agent)
    await memory.add([history.message(agent, m) for m in turn(agent, i)])
    with anyio.fail_after(20):
        while (await memory.stats()).compressing:  # noqa: ASYNC110 (polling the actor)
            await anyio.sleep(0.01)


def llm_summaries(view: list[Message]) -> int:
    return sum("LLM SUMMARY" in m.text() for m in view)


async def test_a_failing_llm_falls_back_trips_the_breaker_and_service_resumes(
    stub: OpenAIStub, fault_report: Recorder
) -> None:
    history = History()
    agents = ["ana", "ben"]
    stub.script("429", "500", "hang", "garbage")
    stub.mode = "500"
    with capture_logs() as logs:
        async with MemoryRuntime(app(stub)) as rt:
            for i in range(30):
                for agent in agents:
                    await talk(rt, history, agent, i)
            failing_requests = stub.requests
            assert failing_requests > 0
            fallbacks = [e["reason"] for e in logs if e["event"] == "summarizer_fallback"]
            # Compression went on offline, and the breaker spared the endpoint.
            assert "circuit_open" in fallbacks
            assert any(e["event"] == "summarizer_circuit_open" for e in logs)
            assert failing_requests < len(fallbacks)
            for agent in agents:
                stats = await rt.memory(agent).stats()
                assert stats.compressions >= 1
                assert llm_summaries(await rt.memory(agent).get()) == 0

            # The endpoint recovers: LLM summaries come back, with no restart.
            stub.mode = "normal"
            back = time.monotonic()
            await anyio.sleep(BREAKER_RESET)  # the breaker's trial call is then allowed
            recovered: dict[str, int] = {}
            for i in range(30, 90):
                for agent in agents:
                    await talk(rt, history, agent, i)
                    recovered[agent] = llm_summaries(await rt.memory(agent).get())
                if all(recovered.values()):
                    break
            assert all(recovered.values()), recovered
            resumed = time.monotonic() - back
            assert stub.requests > failing_requests

            # Nothing was lost: every message is in the original history, once, in
            # order; what compression took out of the view can be reloaded.
            verdict = history.check(await observe_memory(rt, agents))
            fault_report.row(
                "LLM endpoint answers 429, 500, hangs, garbage; then recovers",
                f"2 agents compressing, {failing_requests} failed calls",
                verdict,
                recovery_s=resumed,
            )
            assert verdict.ok, str(verdict)
            for agent in agents:
                memory = rt.memory(agent)
                view = await memory.get()
                assert check_openai_messages([m.to_openai() for m in view]) == []
                reload_ids = {m.metadata["reload_id"] for m in view if "reload_id" in m.metadata}
                for reload_id in reload_ids:
                    assert await memory.reload(reload_id)
