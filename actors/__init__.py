"""actormem's domain actors: agent memory (and, next, the insight pool and compressor)."""

from actors.app import MemoryRuntime, register_actors
from actors.commands import AddResult, MemoryExport, MemoryStats, PruneResult
from actors.config import AppConfig, MemoryConfig, SimulationConfig, load_app_config
from actors.conversation import check_openai_messages, group_units
from actors.errors import ContextBudgetError, MemoryInputError
from actors.handle import MemoryHandle, to_message
from actors.memory import AgentMemory
from actors.messages import Message, Role, ToolCall

__all__ = (
    "AddResult",
    "AgentMemory",
    "AppConfig",
    "ContextBudgetError",
    "MemoryConfig",
    "MemoryExport",
    "MemoryHandle",
    "MemoryInputError",
    "MemoryRuntime",
    "MemoryStats",
    "Message",
    "PruneResult",
    "Role",
    "SimulationConfig",
    "ToolCall",
    "check_openai_messages",
    "group_units",
    "load_app_config",
    "register_actors",
    "to_message",
)
