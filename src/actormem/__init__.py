"""actormem: an asynchronous, actor-based memory runtime for multi-agent LLM systems.

The public surface in one place: the memory runtime and its handles, messages,
configs and every error a caller can catch. The actor machinery is
``actormem.runtime``; the domain (agent memory, insight pool, compressor, recall,
the application) is ``actormem.actors``; the load tests are ``actormem.benchmarks``.

    import anyio
    from actormem import MemoryRuntime

    async def main() -> None:
        async with MemoryRuntime() as rt:
            alice = rt.memory("alice")
            await alice.add({"role": "user", "content": "hello"})
            print(await alice.context(max_tokens=1024))

    anyio.run(main)
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from actormem.actors import (
    CONTEXT_RELOAD_TOOL,
    MEMORY_TOOLS,
    AddResult,
    AgentMemory,
    AppConfig,
    CompressionConfig,
    CompressionOutcome,
    CompressRequest,
    ContextBudgetError,
    ControlMode,
    EmbeddingError,
    Episode,
    EpisodeConfig,
    FactExtractionError,
    FoundEntry,
    Insight,
    InsightError,
    InsightSignatureError,
    KeyedEntry,
    LLMConfig,
    LongTermConfig,
    MemoryConfig,
    MemoryExport,
    MemoryHandle,
    MemoryInputError,
    MemoryRuntime,
    MemoryStats,
    Message,
    MissingExtraError,
    PoolActor,
    PoolConfig,
    PoolStats,
    PruneResult,
    Recalled,
    ReloadArgumentsError,
    RetentionConfig,
    Role,
    SessionFileError,
    ShareResult,
    SimulationConfig,
    ToolArgumentsError,
    ToolCall,
    check_openai_messages,
    compress,
    group_units,
    load_app_config,
    register_actors,
    reload_tool_result,
    sanitize_insight_text,
    to_message,
)
from actormem.runtime import (
    Actor,
    ActorContext,
    ActorError,
    ActorFactory,
    ActormemError,
    ActorNotFoundError,
    ActorRef,
    ActorStoppedError,
    AskTimeoutError,
    Command,
    ConfigError,
    Envelope,
    HandlerError,
    InvalidAddressError,
    LocalTransport,
    LoggingConfig,
    MailboxFullError,
    MessageDecodeError,
    MessageTooLargeError,
    NoOwnerError,
    Reply,
    Runtime,
    RuntimeClosedError,
    RuntimeConfig,
    RuntimeStats,
    SupervisionConfig,
    TokenCounter,
    TooManyAsksError,
    Transport,
    TransportError,
    TransportHost,
    TransportUnavailableError,
    get_counter,
    load_toml,
    new_id,
    split_address,
)

if TYPE_CHECKING:
    from actormem.actors.app.simulation.brains.protocol import BrainError

#: Names whose modules load much more than they hold, imported on first use.
_LAZY = {"BrainError": "actormem.actors.app.simulation.brains.protocol"}

try:
    __version__ = version("actormem")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = (
    "CONTEXT_RELOAD_TOOL",
    "MEMORY_TOOLS",
    "Actor",
    "ActorContext",
    "ActorError",
    "ActorFactory",
    "ActorNotFoundError",
    "ActorRef",
    "ActorStoppedError",
    "ActormemError",
    "AddResult",
    "AgentMemory",
    "AppConfig",
    "AskTimeoutError",
    "BrainError",
    "Command",
    "CompressRequest",
    "CompressionConfig",
    "CompressionOutcome",
    "ConfigError",
    "ContextBudgetError",
    "ControlMode",
    "EmbeddingError",
    "Envelope",
    "Episode",
    "EpisodeConfig",
    "FactExtractionError",
    "FoundEntry",
    "HandlerError",
    "Insight",
    "InsightError",
    "InsightSignatureError",
    "InvalidAddressError",
    "KeyedEntry",
    "LLMConfig",
    "LocalTransport",
    "LoggingConfig",
    "LongTermConfig",
    "MailboxFullError",
    "MemoryConfig",
    "MemoryExport",
    "MemoryHandle",
    "MemoryInputError",
    "MemoryRuntime",
    "MemoryStats",
    "Message",
    "MessageDecodeError",
    "MessageTooLargeError",
    "MissingExtraError",
    "NoOwnerError",
    "PoolActor",
    "PoolConfig",
    "PoolStats",
    "PruneResult",
    "Recalled",
    "ReloadArgumentsError",
    "Reply",
    "RetentionConfig",
    "Role",
    "Runtime",
    "RuntimeClosedError",
    "RuntimeConfig",
    "RuntimeStats",
    "SessionFileError",
    "ShareResult",
    "SimulationConfig",
    "SupervisionConfig",
    "TokenCounter",
    "TooManyAsksError",
    "ToolArgumentsError",
    "ToolCall",
    "Transport",
    "TransportError",
    "TransportHost",
    "TransportUnavailableError",
    "__version__",
    "check_openai_messages",
    "compress",
    "get_counter",
    "group_units",
    "load_app_config",
    "load_toml",
    "new_id",
    "register_actors",
    "reload_tool_result",
    "sanitize_insight_text",
    "split_address",
    "to_message",
)


# Type checkers see the lazy names through the TYPE_CHECKING import above; a
# module __getattr__ they saw would make every misspelt name resolve.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Import a name of :data:`_LAZY` from its module when it is first used."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})
