"""actormem's domain actors: agent memory, the insight pool and the compressor."""

from actormem.actors.app.wiring import MemoryRuntime, register_actors
from actormem.actors.compression import (
    CONTEXT_RELOAD_TOOL,
    CompressionConfig,
    CompressionOutcome,
    CompressRequest,
    LLMConfig,
    ReloadArgumentsError,
    compress,
    reload_tool_result,
)
from actormem.actors.config import AppConfig, MemoryConfig, SimulationConfig, load_app_config
from actormem.actors.conversation import check_openai_messages, group_units
from actormem.actors.errors import ContextBudgetError, MemoryInputError
from actormem.actors.integrations._extras import MissingExtraError
from actormem.actors.memory.actor import AgentMemory
from actormem.actors.memory.commands import AddResult, MemoryExport, MemoryStats, PruneResult
from actormem.actors.memory.handle import MemoryHandle, to_message
from actormem.actors.messages import Message, Role, ToolCall
from actormem.actors.pool.actor import PoolActor
from actormem.actors.pool.commands import PoolStats, ShareResult
from actormem.actors.pool.config import PoolConfig
from actormem.actors.pool.insights import Insight, InsightError, InsightSignatureError
from actormem.actors.pool.sanitize import sanitize_insight_text
from actormem.actors.recall.embeddings import EmbeddingError
from actormem.actors.recall.episodes import Episode, EpisodeConfig
from actormem.actors.recall.facts import FactExtractionError
from actormem.actors.recall.keyed import FoundEntry, KeyedEntry
from actormem.actors.recall.longterm import ControlMode, LongTermConfig, Recalled
from actormem.actors.recall.tools import MEMORY_TOOLS, ToolArgumentsError
from actormem.actors.retention import RetentionConfig, SessionFileError

__all__ = (
    "CONTEXT_RELOAD_TOOL",
    "MEMORY_TOOLS",
    "AddResult",
    "AgentMemory",
    "AppConfig",
    "CompressRequest",
    "CompressionConfig",
    "CompressionOutcome",
    "ContextBudgetError",
    "ControlMode",
    "EmbeddingError",
    "Episode",
    "EpisodeConfig",
    "FactExtractionError",
    "FoundEntry",
    "Insight",
    "InsightError",
    "InsightSignatureError",
    "KeyedEntry",
    "LLMConfig",
    "LongTermConfig",
    "MemoryConfig",
    "MemoryExport",
    "MemoryHandle",
    "MemoryInputError",
    "MemoryRuntime",
    "MemoryStats",
    "Message",
    "MissingExtraError",
    "PoolActor",
    "PoolConfig",
    "PoolStats",
    "PruneResult",
    "Recalled",
    "ReloadArgumentsError",
    "RetentionConfig",
    "Role",
    "SessionFileError",
    "ShareResult",
    "SimulationConfig",
    "ToolArgumentsError",
    "ToolCall",
    "check_openai_messages",
    "compress",
    "group_units",
    "load_app_config",
    "register_actors",
    "reload_tool_result",
    "sanitize_insight_text",
    "to_message",
)
