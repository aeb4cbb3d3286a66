"""The application's config: the runtime's sections plus the domain actors' sections.

``configs/default.toml`` lists every key with its default; a simulation config
such as ``configs/town.toml`` sets only what differs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final, Literal

import msgspec

from actormem.actors.compression.config import CompressionConfig
from actormem.actors.pool.config import PoolConfig
from actormem.actors.recall.episodes import EpisodeConfig
from actormem.actors.recall.longterm import LongTermConfig
from actormem.actors.retention import RetentionConfig
from actormem.runtime.config import (
    ConfigSection,
    LoggingConfig,
    MetricsConfig,
    RuntimeConfig,
    load_toml,
)
from actormem.runtime.errors import ConfigError
from actormem.runtime.redis_config import RedisConfig, check_namespace
from actormem.runtime.tokens import DEFAULT_ENCODING, ENCODINGS, encoding_for_model

__all__ = (
    "AppConfig",
    "BrainConfig",
    "BrainKind",
    "MemoryConfig",
    "SimulationConfig",
    "load_app_config",
)

DEFAULT_MAX_TOKENS: Final = 131_072
DEFAULT_IMPORTANT_THRESHOLD: Final = 0.7
DEFAULT_MAX_MESSAGE_CHARS: Final = 1_000_000
DEFAULT_MAX_BATCH: Final = 10_000
_CALLABLE: Final = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class MemoryConfig(ConfigSection, frozen=True):
    """Each agent's memory actor.

    Attributes:
        max_tokens: the context budget ``context()`` uses when given none.
        important_threshold: ``important()`` returns messages at or above it.
        max_message_chars: a message whose content, name, tool calls, urls and
            metadata together are longer is refused.
        max_batch: most messages one ``add`` may carry.
        model: the OpenAI model the context is for; it picks the encoding
            (see :func:`~actormem.runtime.tokens.encoding_for_model`).
        encoding: the tiktoken encoding tokens are counted with; unset: the
            model's, else ``cl100k_base``. Read after construction, it is always
            the encoding in use (so ``msgspec.structs.replace`` of the model
            passes ``encoding=None`` too).
        verify_token_counts: recount the token counts an ``add`` carries (made by
            the sender in the memory's encoding) and refuse the add when one is
            wrong; off, the counts of the deployment's own clients are taken as
            sent.
    """

    max_tokens: int = DEFAULT_MAX_TOKENS
    important_threshold: float = DEFAULT_IMPORTANT_THRESHOLD
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    max_batch: int = DEFAULT_MAX_BATCH
    model: str | None = None
    encoding: str | None = None
    verify_token_counts: bool = False

    def __post_init__(self) -> None:
        self._resolve_encoding()
        if self.max_tokens < 16:
            raise ValueError(f"max_tokens must be >= 16, got {self.max_tokens}")
        if not 0.0 <= self.important_threshold <= 1.0:
            raise ValueError(
                f"important_threshold must be within 0..1, got {self.important_threshold}"
            )
        self._at_least(1, "max_message_chars", "max_batch")

    def _resolve_encoding(self) -> None:
        if self.encoding is not None and self.encoding not in ENCODINGS:
            raise ValueError(
                f"encoding must be one of {', '.join(ENCODINGS)}, got {self.encoding!r}"
            )
        resolved = self.encoding or DEFAULT_ENCODING
        if self.model is not None:
            try:
                resolved = encoding_for_model(self.model)
            except ConfigError as exc:
                if self.encoding is None:
                    raise ValueError(str(exc)) from None
                resolved = self.encoding  # a model we do not know counts as told
            if self.encoding not in (None, resolved):
                raise ValueError(
                    f"encoding {self.encoding!r} does not match model {self.model!r}, "
                    f"which counts with {resolved!r}: leave encoding unset"
                )
        msgspec.structs.force_setattr(self, "encoding", resolved)


BrainKind = Literal["scripted", "llm", "python"]


class BrainConfig(ConfigSection, frozen=True):
    """What drives each agent's steps (``[simulation.brain]``).

    Attributes:
        kind: ``scripted`` (the built-in, seeded and offline), ``llm`` (a chat model
            behind any OpenAI-compatible endpoint) or ``python`` (``callable``).
        callable: ``module:callable``, the user's brain (kind ``python``): an
            ``async def step(turn)`` function, or a class built with each agent's
            :class:`~actormem.actors.app.simulation.AgentInfo` whose instances have an
            async ``step(turn)`` (and optionally ``respond(turn, caller, said)``).
        base_url: the OpenAI-compatible API's base URL (kind ``llm``; any kind gets
            an LLM client on its turns when it is set).
        model: the chat model.
        api_key_env: the environment variable holding the API key (read at start;
            unset: the client sends a placeholder, which local servers accept).
        max_in_flight: model requests in flight at once, over all agents (a 429
            halves the bound for a while; answers raise it back by one at a time).
        timeout: seconds one model request may take.
        connect_timeout: seconds to connect to the endpoint; also bounds the check
            that it answers, made before the first step.
        max_retries: retries of one model call after a 429, a 5xx, a timeout or a
            lost connection (``--max-retries``).
        retry_budget: retries the whole run may spend over all its model calls
            (``--retry-budget``); the run fails once they are spent.
        backoff_base: seconds before the first retry, doubled each retry, with jitter.
        backoff_cap: the longest wait between retries (also caps ``Retry-After``).
        max_tool_rounds: model calls one step may make while the model keeps
            calling tools.
        temperature: the sampling temperature sent with each request.
        max_reply_tokens: the most tokens one model reply may take.
        record: a directory to record every model request and its answer in
            (``--record DIR``; relative to the working directory; ``""``: none).
        replay: a recording to answer the model requests from, with no network
            (``--replay DIR``; no base URL or API key needed; ``""``: none).
    """

    kind: BrainKind = "scripted"
    callable: str = ""
    base_url: str | None = None
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    max_in_flight: int = 8
    timeout: float = 60.0
    max_retries: int = 8
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    max_tool_rounds: int = 3
    temperature: float = 0.7
    max_reply_tokens: int = 256
    record: str = ""
    replay: str = ""
    connect_timeout: float = 5.0
    retry_budget: int = 1000

    def __post_init__(self) -> None:
        self._at_least(1, "max_in_flight", "max_tool_rounds", "max_reply_tokens")
        self._at_least(0, "max_retries", "retry_budget")
        self._above(0, "timeout", "connect_timeout", "backoff_base", "backoff_cap")
        self._within(0.0, 2.0, "temperature")
        if not self.api_key_env:
            raise ValueError("api_key_env must name an environment variable")
        if self.record and self.replay:
            raise ValueError("record and replay cannot both be set: a run records or replays")
        if self.callable and not _CALLABLE.fullmatch(self.callable):
            raise ValueError(
                f"callable must be module:callable (my_agents:step), got {self.callable!r}"
            )


class SimulationConfig(ConfigSection, frozen=True):
    """The offline multi-agent simulation (``actormem simulate``).

    Attributes:
        agents: how many agents talk.
        steps: how many rounds they talk for.
        seed: the seed of the scripted brain; the same seed gives the same run.
        facts_per_agent: planted facts each agent is told early on.
        fact_steps: planted facts are told within the first ``fact_steps`` steps.
        tool_call_rate: the share of turns in which an agent calls a tool.
        context_tokens: the budget of each agent's ``context()`` at the end.
        concurrency: agents acting at once in a step.
        share_facts: planted facts each agent shares with the pool once the
            facts have been told (topic: the fact's place).
        gossip_rate: the share of turns in which an agent passes on an insight
            it received (the pool drops these as duplicates).
        run_id: the run's id, which namespaces its keys on Redis (``""``: a new
            id for every run; an earlier run's id resumes that run, its memories
            and all).
        max_workers: the most worker processes ``--workers`` may ask for
            (0: four per CPU core).
        brain: what drives the agents' steps (:class:`BrainConfig`).
        scenario: the scenario file the run plays (its people, relations, planted
            facts and goal questions; see
            :mod:`actormem.actors.app.simulation.scenario`), relative to the config
            file when loaded from one; ``""``: the built-in town.
        runs_dir: where ``actormem simulate`` writes each run's directory,
            ``<runs_dir>/<run id>/`` (relative to the working directory; ``""``: none).
    """

    agents: int = 50
    steps: int = 40
    seed: int = 7
    facts_per_agent: int = 3
    fact_steps: int = 5
    tool_call_rate: float = 0.3
    context_tokens: int = 4_096
    concurrency: int = 50
    share_facts: int = 2
    gossip_rate: float = 0.1
    run_id: str = ""
    max_workers: int = 0
    brain: BrainConfig = msgspec.field(default_factory=BrainConfig)
    scenario: str = ""
    runs_dir: str = "runs"

    def __post_init__(self) -> None:
        self._at_least(1, "agents", "steps", "facts_per_agent", "fact_steps", "concurrency")
        if self.run_id:
            check_namespace(self.run_id, "run_id")
        for key in ("share_facts", "max_workers"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}")
        self._within(0.0, 1.0, "tool_call_rate", "gossip_rate")
        if self.context_tokens < 64:
            raise ValueError(f"context_tokens must be >= 64, got {self.context_tokens}")


class AppConfig(ConfigSection, frozen=True):
    """Everything one TOML config file holds."""

    runtime: RuntimeConfig = msgspec.field(default_factory=RuntimeConfig)
    logging: LoggingConfig | None = None
    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)
    redis: RedisConfig = msgspec.field(default_factory=RedisConfig)
    memory: MemoryConfig = msgspec.field(default_factory=MemoryConfig)
    compression: CompressionConfig = msgspec.field(default_factory=CompressionConfig)
    pool: PoolConfig = msgspec.field(default_factory=PoolConfig)
    longterm: LongTermConfig = msgspec.field(default_factory=LongTermConfig)
    episodes: EpisodeConfig = msgspec.field(default_factory=EpisodeConfig)
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    simulation: SimulationConfig = msgspec.field(default_factory=SimulationConfig)


def load_app_config(path: str | Path | None) -> AppConfig:
    """Load an app config file (all defaults when ``path`` is None); a relative
    ``simulation.scenario`` becomes the absolute path of that file beside it.

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    if path is None:
        return AppConfig()
    config = load_toml(path, AppConfig)
    scenario = config.simulation.scenario
    if scenario and not Path(scenario).is_absolute():
        # A config names its scenario as it sits beside it, wherever it is run from.
        where = os.path.abspath(Path(path).parent / scenario)
        config = msgspec.structs.replace(
            config, simulation=msgspec.structs.replace(config.simulation, scenario=where)
        )
    return config
