"""The OpenAI-compatible LLM summarizer, with retries, caps, a circuit breaker and offline fallback.

It calls ``chat.completions.create`` through ``openai.AsyncOpenAI`` on any
compatible endpoint (``base_url``). The client's own retries are off: we retry
429s, 5xx answers, timeouts and lost connections ourselves, with capped
exponential backoff and full jitter (honouring ``Retry-After`` up to the cap), so
the total time of one summary stays bounded and visible in our logs.

It never raises and never loses content: when the key is missing, the per-run
token or cost cap would be exceeded, the breaker is open, or the request fails
for good or answers garbage, the span is summarized by the offline summarizer
instead and ``summarizer_fallback`` is logged with the reason.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import structlog

from actormem.actors.compression.config import LLMConfig
from actormem.actors.compression.offload import render_transcript
from actormem.actors.compression.summarizers import OfflineSummarizer, Purpose, RunUsage
from actormem.actors.messages import Message
from actormem.runtime.closing import AsyncClosing
from actormem.runtime.config import redact_url
from actormem.runtime.tokens import TokenCounter

if TYPE_CHECKING:
    import openai

__all__ = (
    "CircuitBreaker",
    "LLMSummarizer",
    "SummaryFailedError",
    "retry_after",
    "retry_delay",
    "retryable_errors",
)

log = structlog.get_logger("actormem.compression")

_INSTRUCTIONS: Final[dict[str, str]] = {
    "tool_run": "a run of tool calls and their results",
    "round": "one round of a conversation (a request and what followed it)",
    "history": "the earlier part of a conversation, partly summarized already",
    "current_round": "the tool results and notes of the task in progress",
}
_SYSTEM: Final = (
    "You compress an AI agent's memory. Summarize {what} so the agent can carry on "
    "without the original. Keep every name, number, date, identifier and decision "
    "exactly as written; drop pleasantries and repetition. Write plain sentences, at "
    "most {tokens} tokens, with no preamble."
)
#: Tokens a chat request costs besides its two messages' text.
_REQUEST_OVERHEAD: Final = 12


def retryable_errors() -> tuple[type[BaseException], ...]:
    """The errors worth another attempt (``openai`` is imported only when a summarizer
    calls an API: it takes longer to import than the rest of actormem together)."""
    import openai

    return (
        openai.RateLimitError,
        openai.InternalServerError,
        openai.APITimeoutError,
        openai.APIConnectionError,
        TimeoutError,
    )


class SummaryFailedError(Exception):
    """One LLM summary failed for good; ``reason`` is a short code for the logs."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class CircuitBreaker:
    """Stops calling a failing API for a while (closed, open, then one trial call).

    Args:
        failures: consecutive failures that open the breaker (0: never opens).
        reset_after: seconds it stays open before a trial call may go through.
    """

    __slots__ = ("_failures", "_opened_at", "failures", "reset_after")

    def __init__(self, failures: int, reset_after: float) -> None:
        self.failures = failures
        self.reset_after = reset_after
        self._failures = 0
        self._opened_at: float | None = None

    @property
    def is_open(self) -> bool:
        """True while calls should not be made."""
        if self._opened_at is None:
            return False
        # Once reset_after has passed the breaker is half-open: the next call is the trial.
        return time.monotonic() - self._opened_at < self.reset_after

    def record_success(self) -> None:
        """A call succeeded: close the breaker."""
        self._failures = 0
        self._opened_at = None

    def record_failure(self) -> None:
        """A call failed for good: count it, and open the breaker at the limit."""
        self._failures += 1
        if self.failures and self._failures >= self.failures:
            if self._opened_at is None or not self.is_open:
                log.warning("summarizer_circuit_open", failures=self._failures)
            self._opened_at = time.monotonic()


def retry_after(exc: BaseException) -> float | None:
    """The seconds an error's answer asked to wait (its ``Retry-After``; None: none)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        return float(headers.get("retry-after", ""))
    except ValueError:
        return None


def retry_delay(attempt: int, error: BaseException | None, base: float, cap: float) -> float:
    """Seconds to wait before retry ``attempt`` (from 1) after ``error``: its
    ``Retry-After`` up to ``cap``, else capped exponential backoff with full jitter
    (which spreads the retries of many callers hitting one 429)."""
    hinted = retry_after(error) if error is not None else None
    if hinted is not None:
        return min(cap, max(0.0, hinted))
    return random.uniform(0, min(cap, base * 2 ** (attempt - 1)))


class LLMSummarizer(AsyncClosing):
    """Summaries written by an OpenAI-compatible chat model, offline when that fails.

    Use it as an async context manager, or call :meth:`aclose` when done.

    Args:
        config: the LLM section of the compression config.
        counter: counts prompt tokens against the per-run cap.
        fallback: the offline summarizer used when the LLM cannot be.
        breaker: shared by the compressors of a pool (one of its own by default).
    """

    name = "openai"

    def __init__(
        self,
        config: LLMConfig,
        counter: TokenCounter,
        *,
        fallback: OfflineSummarizer | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.config = config
        self._counter = counter
        self._fallback = fallback or OfflineSummarizer(counter)
        self.breaker = breaker or CircuitBreaker(config.breaker_failures, config.breaker_reset)
        self._client: openai.AsyncOpenAI | None = None
        api_key = config.api_key()
        self._missing_key = api_key is None
        if api_key is not None:
            import openai

            self._client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=config.base_url,
                timeout=config.timeout,
                max_retries=0,
            )
        else:
            log.warning("summarizer_no_api_key", env=config.api_key_env)

    def __repr__(self) -> str:
        base_url = redact_url(self.config.base_url) if self.config.base_url else None
        return f"LLMSummarizer(model={self.config.model!r}, base_url={base_url!r})"

    async def __aenter__(self) -> LLMSummarizer:
        return self

    async def aclose(self) -> None:
        """Close the HTTP connections (idempotent)."""
        client, self._client = self._client, None
        if client is not None:
            with anyio.move_on_after(5, shield=True):
                await client.close()

    async def summarize(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        purpose: Purpose,
        usage: RunUsage,
    ) -> str:
        """Return the LLM's summary of ``messages``, or the offline one if the LLM fails."""
        try:
            text = await self._summarize(messages, max_tokens, purpose, usage)
        except SummaryFailedError as exc:
            usage.fallbacks += 1
            # Once per reason and run as a warning: a run of fifty spans against a
            # dead endpoint is one problem, not fifty.
            first = exc.reason not in usage.fallback_reasons
            usage.fallback_reasons.add(exc.reason)
            (log.warning if first else log.debug)(
                "summarizer_fallback",
                reason=exc.reason,
                detail=exc.detail,
                model=self.config.model,
                messages=len(messages),
            )
            return await self._fallback.summarize(
                messages, max_tokens=max_tokens, purpose=purpose, usage=usage
            )
        usage.summaries += 1
        return text

    async def _summarize(
        self, messages: Sequence[Message], max_tokens: int, purpose: Purpose, usage: RunUsage
    ) -> str:
        cfg = self.config
        client = self._client
        if client is None:
            reason = "no_api_key" if self._missing_key else "closed"
            raise SummaryFailedError(reason, f"no client (key from ${cfg.api_key_env})")
        if self.breaker.is_open:
            raise SummaryFailedError("circuit_open", "recent requests kept failing")
        prompt, prompt_tokens = self._prompt(messages, max_tokens, purpose)
        # Requests of one run may be in flight together: each reserves its worst case
        # first, so that together they can never pass the caps.
        needed = prompt_tokens + max_tokens
        if usage.llm_tokens + usage.reserved_tokens + needed > cfg.max_tokens_per_run:
            raise SummaryFailedError(
                "token_cap",
                f"{usage.llm_tokens + usage.reserved_tokens} spent or reserved + {needed} "
                f"needed > {cfg.max_tokens_per_run} per run",
            )
        worst_cost = self._cost(prompt_tokens, max_tokens)
        committed = usage.cost + usage.reserved_cost
        if cfg.max_cost_per_run is not None and committed + worst_cost > cfg.max_cost_per_run:
            raise SummaryFailedError(
                "cost_cap", f"${committed + worst_cost:.4f} would pass ${cfg.max_cost_per_run}"
            )
        usage.reserved_tokens += needed
        usage.reserved_cost += worst_cost
        try:
            return await self._request(client, prompt, prompt_tokens, max_tokens, usage)
        finally:
            usage.reserved_tokens -= needed
            usage.reserved_cost -= worst_cost

    async def _request(
        self,
        client: openai.AsyncOpenAI,
        prompt: list[dict[str, str]],
        prompt_tokens: int,
        max_tokens: int,
        usage: RunUsage,
    ) -> str:
        """Send the request, retrying what is worth retrying; SummaryFailedError if it fails."""
        import openai

        cfg = self.config
        retryable = retryable_errors()
        request: dict[str, Any] = {
            "model": cfg.model,
            "messages": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        last: BaseException | None = None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                await anyio.sleep(self._backoff(attempt, last))
            usage.llm_calls += 1
            try:
                # The client has the same timeout; this one also bounds a server
                # that trickles bytes forever.
                with anyio.fail_after(cfg.timeout * 1.5):
                    response = await client.chat.completions.create(**request)
            except retryable as exc:
                last = exc
                log.info("summarizer_retry", attempt=attempt + 1, error=type(exc).__name__)
                continue
            except openai.APIStatusError as exc:
                self.breaker.record_failure()
                raise SummaryFailedError(f"http_{exc.status_code}", str(exc)[:200]) from exc
            except (openai.OpenAIError, ValueError) as exc:
                # An answer that is not JSON, or not a chat completion.
                self.breaker.record_failure()
                raise SummaryFailedError("garbage", f"{type(exc).__name__}: {exc}"[:200]) from exc
            text = self._text_of(response)
            spent_in, spent_out = self._usage_of(response, prompt_tokens, text)
            usage.llm_tokens += spent_in + spent_out
            usage.cost += self._cost(spent_in, spent_out)
            self.breaker.record_success()
            return self._counter.truncate(text, max_tokens)
        self.breaker.record_failure()
        detail = f"{cfg.max_retries + 1} attempts; last: {type(last).__name__}: {last}"
        reason = "timeout" if isinstance(last, openai.APITimeoutError | TimeoutError) else "retries"
        raise SummaryFailedError(reason, detail[:200])

    def _prompt(
        self, messages: Sequence[Message], max_tokens: int, purpose: Purpose
    ) -> tuple[list[dict[str, str]], int]:
        system = _SYSTEM.format(what=_INSTRUCTIONS[purpose], tokens=max_tokens)
        transcript = render_transcript(messages)
        tokens = (
            self._counter.count_text(system)
            + self._counter.count_text(transcript)
            + _REQUEST_OVERHEAD
        )
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": transcript}]
        return prompt, tokens

    def request_tokens(self, messages: Sequence[Message], max_tokens: int, purpose: Purpose) -> int:
        """The most tokens one summary request may cost: its prompt plus ``max_tokens``."""
        return self._prompt(messages, max_tokens, purpose)[1] + max_tokens

    def _text_of(self, response: Any) -> str:
        """The summary text, or SummaryFailedError if the answer has the wrong shape."""
        try:
            text = response.choices[0].message.content
        except (AttributeError, IndexError, KeyError, TypeError) as exc:
            self.breaker.record_failure()
            raise SummaryFailedError("garbage", f"not a chat completion: {exc}") from exc
        if not isinstance(text, str) or not text.strip():
            self.breaker.record_failure()
            raise SummaryFailedError("garbage", "the completion has no text")
        return text.strip()

    def _usage_of(self, response: Any, prompt_tokens: int, text: str) -> tuple[int, int]:
        reported = getattr(response, "usage", None)
        spent_in = getattr(reported, "prompt_tokens", None)
        spent_out = getattr(reported, "completion_tokens", None)
        if not isinstance(spent_in, int) or not isinstance(spent_out, int):
            return prompt_tokens, self._counter.count_text(text)
        return spent_in, spent_out

    def _cost(self, tokens_in: int, tokens_out: int) -> float:
        cfg = self.config
        return (tokens_in * cfg.input_price_per_1k + tokens_out * cfg.output_price_per_1k) / 1000

    def _backoff(self, attempt: int, error: BaseException | None) -> float:
        return retry_delay(attempt, error, self.config.backoff_base, self.config.backoff_cap)
