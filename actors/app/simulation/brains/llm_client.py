"""The model client of a simulation's turns: any OpenAI-compatible Chat Completions API.

It wraps ``openai.AsyncOpenAI`` (imported only when a client is made) with the
brain config's bounds: at most ``max_in_flight`` requests at once over all
agents, fewer for a while after a 429 (see
:mod:`~actormem.actors.app.simulation.brains.pacing`), a timeout per request, and
retries of 429s, 5xx answers, timeouts and lost connections with capped
exponential backoff and full jitter, honouring ``Retry-After`` up to the cap:
at most ``max_retries`` for one call, and ``retry_budget`` for the whole run.
The client's own retries are off, so every retry shows in the debug log
(``llm_retry``). It counts calls, retries, tokens and time, and
:meth:`LLMClient.probe` checks that the endpoint answers at all, before a run.

With a :class:`~actormem.actors.app.simulation.brains.recording.Recorder` it writes
every answered request into a recording; with a
:class:`~actormem.actors.app.simulation.brains.recording.Replayer` it answers from
one and opens no connection (see :mod:`actormem.actors.app.simulation.brains.recording`).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
import structlog

from actormem.actors.app.simulation.brains.pacing import Pacing
from actormem.actors.app.simulation.brains.protocol import BrainError
from actormem.actors.app.simulation.brains.recording import Recorder, Replayer
from actormem.actors.compression.llm import retry_after, retry_delay, retryable_errors
from actormem.actors.config import BrainConfig
from actormem.runtime.closing import AsyncClosing
from actormem.runtime.config import redact_url

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

__all__ = ("LLMClient", "LLMUsage", "ModelWait", "model_wait")

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


def _completion(data: object) -> ChatCompletion:
    """An endpoint's JSON answer as a ``ChatCompletion``.

    A conforming answer is validated in pydantic's core, far cheaper than the
    client's own lenient build. An answer that does not conform (an endpoint that
    leaves out a field) is built leniently, as the client builds it.

    Raises:
        ValueError: the answer is not a JSON object.
    """
    from openai.types.chat import ChatCompletion
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise ValueError(f"the answer is a JSON {type(data).__name__}, not an object")
    try:
        return ChatCompletion.model_validate(data)
    except ValidationError:
        return ChatCompletion.construct(**data)


class ModelWait:
    """How long one turn waited for the model: its ``calls`` to
    :meth:`LLMClient.complete` and the ``seconds`` they took (waiting for a slot,
    the requests and the retries' waits), the answers of other agents it spoke
    to included."""

    __slots__ = ("calls", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0


_waits: ContextVar[ModelWait | None] = ContextVar("actormem_model_wait", default=None)


@contextmanager
def model_wait() -> Iterator[ModelWait]:
    """Count the model calls made within the block (in this task and the tasks it
    starts) in the :class:`ModelWait` it yields."""
    wait = ModelWait()
    token = _waits.set(wait)
    try:
        yield wait
    finally:
        _waits.reset(token)


class LLMClient(AsyncClosing):
    """Chat completions for the agents' turns, bounded and retried.

    Use it as an async context manager, or call :meth:`aclose` when done.

    Args:
        config: the brain config (base URL, model, key variable, bounds).
        usage: where to count the calls (a new one by default; a progress display
            may read it while the run goes on).
        recorder: where to record every answered request (None: nowhere).
        replayer: the recording to answer from instead of the endpoint (None: ask
            the endpoint); the config's model, if empty, is the recording's.

    Attributes:
        usage: what the calls so far cost.
        pacing: the run's in-flight bound, pause and retry budget.
    """

    def __init__(
        self,
        config: BrainConfig,
        usage: LLMUsage | None = None,
        *,
        recorder: Recorder | None = None,
        replayer: Replayer | None = None,
    ) -> None:
        import openai

        if replayer is not None and not config.model:
            config = msgspec.structs.replace(config, model=replayer.model)
        self.config = config
        self.usage = usage if usage is not None else LLMUsage()
        self.pacing = Pacing(config.max_in_flight, config.retry_budget)
        self._recorder = recorder
        self._replayer = replayer
        self._agent = ""
        self._step = -1
        self._client: openai.AsyncOpenAI | None = None
        if replayer is None:
            self._client = openai.AsyncOpenAI(
                api_key=os.environ.get(config.api_key_env) or _NO_KEY,
                base_url=config.base_url,
                timeout=openai.Timeout(config.timeout, connect=config.connect_timeout),
                max_retries=0,
            )

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The ``openai.AsyncOpenAI`` underneath, for brains that want it (its calls
        are neither bounded, retried, counted nor recorded).

        Raises:
            BrainError: the run replays a recording, which has no endpoint.
        """
        if self._client is None:
            raise BrainError(
                "a replayed run has no model endpoint: only llm.complete() answers from "
                "the recording"
            )
        return self._client

    def for_turn(self, agent: str, step: int) -> LLMClient:
        """This client as ``agent``'s turn at ``step`` uses it (the same connections,
        bounds and counts), naming them in a recording and its errors."""
        view = copy.copy(self)
        view._agent, view._step = agent, step
        return view

    def __repr__(self) -> str:
        base_url = redact_url(self.config.base_url) if self.config.base_url else None
        return f"LLMClient(model={self.config.model!r}, base_url={base_url!r})"

    async def __aenter__(self) -> LLMClient:
        return self

    async def aclose(self) -> None:
        """Close the HTTP connections and the recording (idempotent)."""
        if self._recorder is not None:
            self._recorder.close()
        if self._client is not None:
            with anyio.move_on_after(5, shield=True):
                await self._client.close()

    async def probe(self) -> None:
        """Check that the endpoint answers at all: one request for its list of
        models, within ``connect_timeout`` seconds. Any HTTP answer will do (an
        endpoint need not list its models); a replayed run makes no request.

        Raises:
            BrainError: no connection, or no answer in time (one line naming the
                URL and what failed).
        """
        if self._client is None:
            return
        import openai

        wait = self.config.connect_timeout
        try:
            with anyio.fail_after(wait * 2):
                await self._client.with_options(timeout=wait).models.list()
        except openai.APITimeoutError as exc:
            raise BrainError(self._unreachable(f"no answer within {wait:g} s")) from exc
        except TimeoutError as exc:
            raise BrainError(self._unreachable(f"no answer within {wait * 2:g} s")) from exc
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise BrainError(self._unreachable(f"{type(cause).__name__}: {cause}")) from exc
        except (openai.OpenAIError, ValueError):
            pass  # an answer, if not a list of models: the endpoint is there

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> ChatCompletion:
        """One chat completion of ``messages`` (offering ``tools``), retried as configured.

        Raises:
            BrainError: the request failed for good (after ``max_retries`` retries,
                once the run's ``retry_budget`` is spent, or at once for an answer no
                retry can change, such as 400 or 401), naming the status.
        """
        cfg = self.config
        request: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "max_tokens": cfg.max_reply_tokens,
            "temperature": cfg.temperature,
        }
        if tools:
            request["tools"] = tools
        started = time.perf_counter()
        try:
            if self._replayer is not None:
                return self._replayed(request)
            return await self._retried(request)
        finally:
            wait = _waits.get()
            if wait is not None:
                wait.calls += 1
                wait.seconds += time.perf_counter() - started

    async def _retried(self, request: dict[str, Any]) -> ChatCompletion:
        import openai

        cfg = self.config
        pacing = self.pacing
        retryable = retryable_errors()
        last: BaseException | None = None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                if not pacing.spend_retry():
                    raise BrainError(
                        self._failed(
                            f"the run's retry budget of {cfg.retry_budget} is spent (raise "
                            f"--retry-budget); last: {type(last).__name__}: {last}"
                        )
                    ) from last
                wait = retry_delay(attempt, last, cfg.backoff_base, cfg.backoff_cap)
                self.usage.retries += 1
                log.debug(
                    "llm_retry", attempt=attempt, error=type(last).__name__, wait_s=round(wait, 3)
                )
                await anyio.sleep(wait)
            async with pacing.slot() as sent_at:
                self.usage.calls += 1
                started = time.perf_counter()
                try:
                    # The client has the same timeout; this one also bounds a server
                    # that trickles bytes forever.
                    with anyio.fail_after(cfg.timeout * 1.5):
                        # Posted as it is: create() would walk the messages and the
                        # tools against its typed schemas, and build the answer in
                        # Python, on the event loop every agent shares.
                        answer = await self.client.post(
                            "/chat/completions", body=request, cast_to=object
                        )
                    response = _completion(answer)
                except retryable as exc:
                    if isinstance(exc, openai.RateLimitError):
                        hinted = retry_after(exc)
                        pause = min(cfg.backoff_cap, hinted) if hinted is not None else None
                        pacing.rate_limited(sent_at, pause)
                    last = exc
                    continue
                except openai.APIStatusError as exc:
                    detail = f"HTTP {exc.status_code}: {exc.message}"
                    raise BrainError(self._failed(detail)) from exc
                except (openai.OpenAIError, ValueError) as exc:
                    raise BrainError(self._failed(f"{type(exc).__name__}: {exc}")) from exc
                finally:
                    self.usage.seconds += time.perf_counter() - started
            pacing.answered()
            self._count(response)
            if self._recorder is not None:
                self._recorder.write(
                    request, response, agent=self._agent, step=self._step, attempts=attempt + 1
                )
            return response
        raise BrainError(
            self._failed(
                f"{cfg.max_retries + 1} attempt{'s' if cfg.max_retries else ''} "
                f"(raise --max-retries); "
                f"last: {type(last).__name__}: {last}"
            )
        ) from last

    def _replayed(self, request: dict[str, Any]) -> ChatCompletion:
        """The recorded answer to ``request``, counted as the recorded run counted it."""
        assert self._replayer is not None
        response, attempts = self._replayer.answer(request, agent=self._agent, step=self._step)
        self.usage.calls += attempts
        self.usage.retries += attempts - 1
        self._count(response)
        return response

    def _where(self) -> str:
        return redact_url(self.config.base_url) if self.config.base_url else "the default API"

    def _failed(self, detail: str) -> str:
        return f"the model {self.config.model!r} at {self._where()} failed: {detail}"[:400]

    def _unreachable(self, detail: str) -> str:
        return f"the model endpoint {self._where()} does not answer: {detail}"[:400]

    def _count(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None)
        tokens_out = getattr(usage, "completion_tokens", None)
        self.usage.tokens_in += tokens_in if isinstance(tokens_in, int) else 0
        self.usage.tokens_out += tokens_out if isinstance(tokens_out, int) else 0
