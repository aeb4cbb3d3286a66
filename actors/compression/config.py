"""Configuration of the compressor: AutoContextMemory's parameters plus ours.

Two frozen sections, loaded from the ``[compression]`` table of an app config:
:class:`CompressionConfig` (when to compress and how hard) and :class:`LLMConfig`
(the optional OpenAI-compatible summarizer). The LLM's API key is never a config
value: the config names the environment variable it is read from, so no file,
repr or log ever holds the key.
"""

from __future__ import annotations

import os
from typing import Final, Literal

import msgspec

from actormem.runtime.config import ConfigSection

__all__ = (
    "DEFAULT_LARGE_PAYLOAD_THRESHOLD",
    "DEFAULT_LAST_KEEP",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MIN_CONSECUTIVE_TOOL_MESSAGES",
    "DEFAULT_MSG_THRESHOLD",
    "DEFAULT_OFFLOAD_PREVIEW",
    "DEFAULT_TOKEN_RATIO",
    "PLAN_NOTE_TOOLS",
    "CompressionConfig",
    "LLMConfig",
)

# AutoContextMemory's defaults (AutoContextConfig), same names and units.
DEFAULT_MSG_THRESHOLD: Final = 100
DEFAULT_MAX_TOKENS: Final = 128 * 1024
DEFAULT_TOKEN_RATIO: Final = 0.75
DEFAULT_LAST_KEEP: Final = 50
DEFAULT_MIN_CONSECUTIVE_TOOL_MESSAGES: Final = 6
DEFAULT_LARGE_PAYLOAD_THRESHOLD: Final = 5 * 1024
DEFAULT_OFFLOAD_PREVIEW: Final = 200

DEFAULT_MAX_PASSES: Final = 10
DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_CONCURRENCY: Final = 2
DEFAULT_SUMMARY_RATIO: Final = 0.3
DEFAULT_SUMMARY_MIN_TOKENS: Final = 48
DEFAULT_SUMMARY_MAX_TOKENS: Final = 512
DEFAULT_SUMMARY_CONCURRENCY: Final = 4
DEFAULT_COMPRESS_TO: Final = 0.8

#: The tools of AgentScope's plan notebook; their runs are compressed to one line.
PLAN_NOTE_TOOLS: Final = (
    "create_plan",
    "revise_current_plan",
    "update_subtask_state",
    "finish_subtask",
    "view_subtasks",
    "get_subtask_count",
    "finish_plan",
    "view_historical_plans",
    "recover_historical_plan",
)


class LLMConfig(ConfigSection, frozen=True):
    """The OpenAI-compatible summarizer (used when ``summarizer = "openai"``).

    Attributes:
        base_url: the API's base URL (None: the openai package's default, which
            also honours ``OPENAI_BASE_URL``).
        api_key_env: the environment variable holding the API key; the key itself
            is read at start-up and never stored in the config.
        model: the chat model that writes summaries.
        timeout: seconds one request may take.
        max_retries: retries after a 429, a 5xx, a timeout or a lost connection
            (the openai client's own retries are off; we back off ourselves).
        backoff_base: seconds before the first retry; doubled each retry, with jitter.
        backoff_cap: the longest wait between retries (also caps ``Retry-After``).
        max_tokens_per_run: prompt plus completion tokens one compression may spend;
            past it the rest of the run is summarized offline.
        max_cost_per_run: dollars one compression may spend (None: no cap); needs
            the two prices below.
        input_price_per_1k: dollars per 1000 prompt tokens.
        output_price_per_1k: dollars per 1000 completion tokens.
        breaker_failures: consecutive failed summaries that open the circuit
            breaker (summaries then go offline without calling the API).
        breaker_reset: seconds the breaker stays open before one trial call.
    """

    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    model: str = "gpt-4o-mini"
    timeout: float = 30.0
    max_retries: int = 2
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    max_tokens_per_run: int = 32_000
    max_cost_per_run: float | None = None
    input_price_per_1k: float = 0.0
    output_price_per_1k: float = 0.0
    breaker_failures: int = 3
    breaker_reset: float = 60.0

    def __post_init__(self) -> None:
        self._above(0, "timeout", "backoff_base", "backoff_cap", "breaker_reset")
        self._at_least(0, "max_retries", "breaker_failures")
        if self.max_tokens_per_run < 1:
            raise ValueError(f"llm.max_tokens_per_run must be >= 1, got {self.max_tokens_per_run}")
        if self.max_cost_per_run is not None and self.max_cost_per_run < 0:
            raise ValueError(f"llm.max_cost_per_run must be >= 0, got {self.max_cost_per_run}")
        if not self.api_key_env:
            raise ValueError("llm.api_key_env must name an environment variable")

    def api_key(self) -> str | None:
        """Return the API key from the environment variable ``api_key_env`` (None if unset)."""
        return os.environ.get(self.api_key_env) or None


class CompressionConfig(ConfigSection, frozen=True):
    """When the working view is compressed, and how.

    The memory actor asks for compression when the view holds more than
    ``msg_threshold`` messages or more than ``max_tokens * token_ratio`` tokens
    (it is then *over budget*). Compression goes on until neither
    ``compress_to`` times those limits is exceeded, or nothing is left to
    compress: the headroom keeps it from running again on the very next message.

    Attributes:
        enabled: False turns compression off (the view then only grows).
        msg_threshold: messages the working view may hold.
        max_tokens: the model's context size, in tokens.
        token_ratio: the share of ``max_tokens`` the working view may use.
        last_keep: strategy 2 leaves the last this many messages alone.
        min_consecutive_tool_messages: strategy 1 compresses runs of tool messages
            longer than this.
        large_payload_threshold: characters above which a message is offloaded
            (strategies 2 and 3).
        offload_preview: characters of an offloaded message kept in the view.
        plan_note_tools: tool names compressed to one line (the plan notebook's).
        pinned_tools: tool names whose calls and results are never compressed.
        max_passes: strategy passes (proposed changes) one compression may run.
        timeout: seconds one compression may take, counted from when its
            compressor starts it (time queued for a busy compressor is not
            counted); the view as it stood after the last finished pass is
            returned when time is up.
        concurrency: compressor actors in the pool; 0 for automatic: one per
            Redis shard, on the shard of the memories it serves, or six in one
            process (see :func:`~actormem.actors.compression.compressor_address`).
            It also bounds the LLM requests in flight (times
            ``summary_concurrency``), so automatic over many shards means many.
        summarizer: ``offline`` (extractive, the default) or ``openai``.
        summary_ratio: a summary aims at this share of the tokens it replaces.
        summary_min_tokens: the smallest summary aimed at.
        summary_max_tokens: the largest summary written.
        summary_concurrency: summaries one compression writes at once (LLM
            requests in flight per compressor).
        compress_to: the share of both limits a compression aims at (1.0: just
            under budget, as AutoContextMemory; lower: fewer compressions).
        llm: the OpenAI-compatible summarizer's settings.
    """

    enabled: bool = True
    msg_threshold: int = DEFAULT_MSG_THRESHOLD
    max_tokens: int = DEFAULT_MAX_TOKENS
    token_ratio: float = DEFAULT_TOKEN_RATIO
    last_keep: int = DEFAULT_LAST_KEEP
    min_consecutive_tool_messages: int = DEFAULT_MIN_CONSECUTIVE_TOOL_MESSAGES
    large_payload_threshold: int = DEFAULT_LARGE_PAYLOAD_THRESHOLD
    offload_preview: int = DEFAULT_OFFLOAD_PREVIEW
    plan_note_tools: tuple[str, ...] = PLAN_NOTE_TOOLS
    pinned_tools: tuple[str, ...] = ()
    max_passes: int = DEFAULT_MAX_PASSES
    timeout: float = DEFAULT_TIMEOUT
    concurrency: int = DEFAULT_CONCURRENCY
    summarizer: Literal["offline", "openai"] = "offline"
    summary_ratio: float = DEFAULT_SUMMARY_RATIO
    summary_min_tokens: int = DEFAULT_SUMMARY_MIN_TOKENS
    summary_max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS
    summary_concurrency: int = DEFAULT_SUMMARY_CONCURRENCY
    compress_to: float = DEFAULT_COMPRESS_TO
    llm: LLMConfig = msgspec.field(default_factory=LLMConfig)

    def __post_init__(self) -> None:
        self._at_least(1, "msg_threshold", "max_tokens", "max_passes", "summary_concurrency")
        self._at_least(
            0, "last_keep", "min_consecutive_tool_messages", "offload_preview", "concurrency"
        )
        if not 0.0 < self.token_ratio <= 1.0:
            raise ValueError(f"token_ratio must be within (0, 1], got {self.token_ratio}")
        if not 0.0 < self.compress_to <= 1.0:
            raise ValueError(f"compress_to must be within (0, 1], got {self.compress_to}")
        if not 0.0 < self.summary_ratio < 1.0:
            raise ValueError(f"summary_ratio must be within (0, 1), got {self.summary_ratio}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {self.timeout}")
        if self.large_payload_threshold <= self.offload_preview:
            # An offloaded message must end up smaller than the threshold, or
            # strategy 3 would find it large again.
            raise ValueError(
                f"large_payload_threshold ({self.large_payload_threshold}) must be greater "
                f"than offload_preview ({self.offload_preview})"
            )
        if not 1 <= self.summary_min_tokens <= self.summary_max_tokens:
            raise ValueError(
                "summary_min_tokens must be >= 1 and <= summary_max_tokens, got "
                f"{self.summary_min_tokens} and {self.summary_max_tokens}"
            )

    @property
    def token_limit(self) -> int:
        """The tokens the working view may hold: ``max_tokens * token_ratio``."""
        return int(self.max_tokens * self.token_ratio)

    def over_budget(self, count: int, tokens: int) -> bool:
        """True when a view of ``count`` messages and ``tokens`` tokens needs compressing."""
        return count > self.msg_threshold or tokens > self.token_limit

    @property
    def target_messages(self) -> int:
        """The messages a compression aims to leave: ``msg_threshold * compress_to``."""
        return max(1, int(self.msg_threshold * self.compress_to))

    @property
    def target_tokens(self) -> int:
        """The tokens a compression aims to leave: ``token_limit * compress_to``."""
        return max(1, int(self.token_limit * self.compress_to))

    def over_target(self, count: int, tokens: int) -> bool:
        """True while a compression should go on (see ``compress_to``)."""
        return count > self.target_messages or tokens > self.target_tokens
