"""The model client of a simulation's turns: any OpenAI-compatible Chat Completions API.

It wraps ``openai.AsyncOpenAI`` (imported only when a client is made) with the
brain config's bounds: at most ``max_in_flight`` requests at once over all
agents, a timeout per request, and retries of 429s, 5xx answers, timeouts and
lost connections with capped exponential backoff and full jitter, honouring
``Retry-After`` up to the cap. The client's own retries are off, so every retry
shows in the logs (``llm_retry``). It counts calls, retries, tokens and time.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from actormem.actors.app.simulation.brains.protocol import BrainError
from actormem.actors.compression.llm import retry_delay, retryable_errors
from actormem.actors.config import BrainConfig
from actormem.runtime._closing import AsyncClosing
from actormem.runtime.config import redact_url

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

__all__ = ("LLMClient", "LLMUsage")

log = structlog.get_logger("actormem.simulation")

#: The API key sent when the configured environment variable is unset (local
#: OpenAI-compatible servers take any).
_NO_KEY = "unset"


class LLMUsage:
    """What a run's model calls cost: counts, tokens and seconds waiting."""

    __slots__ = ("calls", "retries", "seconds", "tokens_in", "tokens_out")

    def __init__(self) -> None:
        self.calls = 0
        self.retries = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.seconds = 0.0


class LLMClient(AsyncClosing):
    """Chat completions for the agents' turns, bounded and retried.

    Use it as an async context manager, or call :meth:`aclose` when done.

    Args:
        config: the brain config (base URL, model, key variable, bounds).
        usage: where to count the calls (a new one by default; a progress display
            may read it while the run goes on).

    Attributes:
        client: the ``openai.AsyncOpenAI`` underneath, for brains that want it.
        usage: what the calls so far cost.
    """

    def __init__(self, config: BrainConfig, usage: LLMUsage | None = None) -> None:
        import openai

        self.config = config
        self.usage = usage if usage is not None else LLMUsage()
        self._limiter = anyio.CapacityLimiter(config.max_in_flight)
        self.client: openai.AsyncOpenAI = openai.AsyncOpenAI(
            api_key=os.environ.get(config.api_key_env) or _NO_KEY,
            base_url=config.base_url,
            timeout=config.timeout,
            max_retries=0,
        )

    def __repr__(self) -> str:
        base_url = redact_url(self.config.base_url) if self.config.base_url else None
        return f"LLMClient(model={self.config.model!r}, base_url={base_url!r})"

    async def __aenter__(self) -> LLMClient:
        return self

    async def aclose(self) -> None:
        """Close the HTTP connections (idempotent)."""
        with anyio.move_on_after(5, shield=True):
            await self.client.close()

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> ChatCompletion:
        """One chat completion of ``messages`` (offering ``tools``), retried as configured.

        Raises:
            BrainError: the request failed for good (after the retries, or at once for
                an answer no retry can change, such as 400 or 401), naming the status.
        """
        import openai

        cfg = self.config
        request: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "max_tokens": cfg.max_reply_tokens,
            "temperature": cfg.temperature,
        }
        if tools:
            request["tools"] = tools
        retryable = retryable_errors()
        last: BaseException | None = None
        async with self._limiter:
            for attempt in range(cfg.max_retries + 1):
                if attempt:
                    wait = retry_delay(attempt, last, cfg.backoff_base, cfg.backoff_cap)
                    self.usage.retries += 1
                    log.info(
                        "llm_retry",
                        attempt=attempt,
                        error=type(last).__name__,
                        wait_s=round(wait, 3),
                    )
                    await anyio.sleep(wait)
                self.usage.calls += 1
                started = time.perf_counter()
                try:
                    # The client has the same timeout; this one also bounds a server
                    # that trickles bytes forever.
                    with anyio.fail_after(cfg.timeout * 1.5):
                        response = await self.client.chat.completions.create(**request)
                except retryable as exc:
                    last = exc
                    continue
                except openai.APIStatusError as exc:
                    detail = f"HTTP {exc.status_code}: {exc.message}"
                    raise BrainError(self._failed(detail)) from exc
                except (openai.OpenAIError, ValueError) as exc:
                    raise BrainError(self._failed(f"{type(exc).__name__}: {exc}")) from exc
                finally:
                    self.usage.seconds += time.perf_counter() - started
                self._count(response)
                return response  # type: ignore[no-any-return]
        raise BrainError(
            self._failed(f"{cfg.max_retries + 1} attempts; last: {type(last).__name__}: {last}")
        ) from last

    def _failed(self, detail: str) -> str:
        where = redact_url(self.config.base_url) if self.config.base_url else "the default API"
        return f"the model {self.config.model!r} at {where} failed: {detail}"[:400]

    def _count(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None)
        tokens_out = getattr(usage, "completion_tokens", None)
        self.usage.tokens_in += tokens_in if isinstance(tokens_in, int) else 0
        self.usage.tokens_out += tokens_out if isinstance(tokens_out, int) else 0
