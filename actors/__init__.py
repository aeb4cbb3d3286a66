"""actormem's domain actors: agent memory, the insight pool and the compressor."""

from actors.app import MemoryRuntime, register_actors
from actors.commands import AddResult, MemoryExport, MemoryStats, PruneResult
from actors.compression import (
    CONTEXT_RELOAD_TOOL,
    CompressionConfig,
    CompressionOutcome,
    CompressRequest,
    LLMConfig,
    ReloadArgumentsError,
    compress,
    reload_tool_result,
)
from actors.config import AppConfig, MemoryConfig, SimulationConfig, load_app_config
from actors.conversation import check_openai_messages, group_units
from actors.episodes import Episode, EpisodeConfig
from actors.errors import ContextBudgetError, MemoryInputError
from actors.handle import MemoryHandle, to_message
from actors.insights import (
    Insight,
    InsightError,
    InsightSignatureError,
    sanitize_insight_text,
)
from actors.longterm import ControlMode, LongTermConfig, Recalled
from actors.memory import AgentMemory
from actors.memory_tools import MEMORY_TOOLS, ToolArgumentsError
from actors.messages import Message, Role, ToolCall
from actors.pool import PoolActor, PoolConfig
from actors.pool_commands import PoolStats, ShareResult
from actors.retention import RetentionConfig, SessionFileError

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
    "Episode",
    "EpisodeConfig",
    "Insight",
    "InsightError",
    "InsightSignatureError",
    "LLMConfig",
    "LongTermConfig",
    "MemoryConfig",
    "MemoryExport",
    "MemoryHandle",
    "MemoryInputError",
    "MemoryRuntime",
    "MemoryStats",
    "Message",
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
