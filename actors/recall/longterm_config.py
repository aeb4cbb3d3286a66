"""The ``[longterm]`` config section and the control modes of long-term memory
(:mod:`actormem.actors.recall.longterm`)."""

from __future__ import annotations

import enum
import math
from typing import Final

from actormem.runtime.config import ConfigSection

__all__ = ("ControlMode", "LongTermConfig")

DEFAULT_DECAY: Final = 0.995
DEFAULT_DECAY_UNIT: Final = 3600.0
DEFAULT_TOP_K: Final = 5
DEFAULT_MAX_ENTRIES: Final = 10_000
DEFAULT_MAX_ENTRY_CHARS: Final = 2_000
DEFAULT_BLOCK_TOKENS: Final = 800
DEFAULT_SPECIFIC_SHARE: Final = 0.05


class ControlMode(enum.StrEnum):
    """Who drives long-term memory (AgentScope's ``LongTermMemoryMode``)."""

    STATIC_CONTROL = "static_control"
    """The framework: retrieve before each ``context()``, record after each reply."""
    AGENT_CONTROL = "agent_control"
    """The agent, through the ``record_to_memory`` / ``retrieve_from_memory`` tools."""
    BOTH = "both"
    """Both at once."""

    @property
    def static(self) -> bool:
        """True when the framework retrieves and records on its own."""
        return self is not ControlMode.AGENT_CONTROL

    @property
    def agent(self) -> bool:
        """True when the agent gets the memory tools."""
        return self is not ControlMode.STATIC_CONTROL


class LongTermConfig(ConfigSection, frozen=True):
    """Long-term memory.

    Attributes:
        mode: static_control, agent_control or both.
        recency_weight, importance_weight, relevance_weight: the weights of the
            three normalised components in a memory's score (>= 0, not all 0).
        recency_decay: how much recency keeps per ``recency_unit_seconds`` since a
            memory was last recalled (Generative Agents: 0.995 per hour).
        recency_unit_seconds: the decay's time unit.
        default_importance: importance of a recorded message that has none, when
            ``estimate_importance`` is off.
        estimate_importance: a message or text recorded without an importance
            gets one estimated from its text
            (:func:`actormem.actors.text.importance.estimate_importance`).
        top_k: memories a static-control retrieval injects.
        block_tokens: the most tokens that block may cost.
        max_entries: memories kept; past it the least important, then the
            oldest, is forgotten.
        max_entry_chars: the longest text kept per memory.
        record_roles: roles of the messages :meth:`LongTermMemory.record` keeps.
        require_relevance: with a query that has words, lexical retrieval returns
            only memories it reaches (sharing a word with it, or next to one that does).
        specific_share: a query is specific when one of its words is held by at
            most this share of the memories; its memories are then ranked by
            relevance, recency and importance weighing a tenth as much (0: never).
        touch_on_retrieve: a recalled memory becomes recent again (as in
            Generative Agents).
        embedding_base_url: an OpenAI-compatible endpoint ("" = BM25 only).
        embedding_model: its embedding model.
        embedding_api_key_env: environment variable holding its key.
        embedding_timeout: seconds per embeddings request.
        embedding_retry_after: seconds of lexical relevance alone after an
            embeddings failure.
        facts_base_url: an OpenAI-compatible chat endpoint ``record()`` extracts
            atomic facts through ("" = memories are the messages themselves).
        facts_model: its chat model.
        facts_api_key_env: environment variable holding its key.
        facts_timeout: seconds per extraction request.
        facts_retry_after: seconds of recording messages as they are after an
            extraction failure.
    """

    mode: ControlMode = ControlMode.STATIC_CONTROL
    recency_weight: float = 1.0
    importance_weight: float = 1.0
    relevance_weight: float = 1.0
    recency_decay: float = DEFAULT_DECAY
    recency_unit_seconds: float = DEFAULT_DECAY_UNIT
    default_importance: float = 0.5
    estimate_importance: bool = True
    top_k: int = DEFAULT_TOP_K
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    max_entries: int = DEFAULT_MAX_ENTRIES
    max_entry_chars: int = DEFAULT_MAX_ENTRY_CHARS
    record_roles: tuple[str, ...] = ("user", "assistant", "agent_call", "agent_response")
    require_relevance: bool = True
    specific_share: float = DEFAULT_SPECIFIC_SHARE
    touch_on_retrieve: bool = True
    embedding_base_url: str = ""
    embedding_model: str = "text-embedding-3-small"
    embedding_api_key_env: str = "OPENAI_API_KEY"
    embedding_timeout: float = 10.0
    embedding_retry_after: float = 60.0
    facts_base_url: str = ""
    facts_model: str = "gpt-4o-mini"
    facts_api_key_env: str = "OPENAI_API_KEY"
    facts_timeout: float = 30.0
    facts_retry_after: float = 60.0

    def __post_init__(self) -> None:
        weights = (self.recency_weight, self.importance_weight, self.relevance_weight)
        if any(w < 0 or not math.isfinite(w) for w in weights) or not any(weights):
            raise ValueError(f"weights must be >= 0 and not all 0, got {weights}")
        if not 0.0 < self.recency_decay <= 1.0:
            raise ValueError(f"recency_decay must be within (0, 1], got {self.recency_decay}")
        if not 0.0 <= self.specific_share <= 1.0:
            raise ValueError(f"specific_share must be within 0..1, got {self.specific_share}")
        if not 0.0 <= self.default_importance <= 1.0:
            raise ValueError(
                f"default_importance must be within 0..1, got {self.default_importance}"
            )
        self._at_least(1, "top_k", "block_tokens", "max_entries", "max_entry_chars")
        self._above(0, "recency_unit_seconds", "embedding_timeout", "facts_timeout")
