"""The memory tools: one agent's memory operations as named tools with JSON input
schemas, for a tool-calling protocol (the MCP server serves these).

Each tool calls the same :class:`~actormem.actors.memory.handle.MemoryHandle`
method a Python caller would, with the arguments as given, so a tool call is
checked exactly as the handle checks it and fails with the same
:class:`~actormem.actors.errors.MemoryInputError` text. What the handle cannot see
from Python (an argument the tool does not take, a missing one, arguments that are
no JSON object) is refused here with a ``MemoryInputError`` naming it.

Served for one agent (``agent=`` given, or a session bound to one), the tools take
no ``agent`` argument: the caller cannot reach another agent's memory. Otherwise
every call names its agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.handle import MemoryHandle
from actormem.actors.memory.inputs import shown

__all__ = ("TOOLS", "MemoryTool", "MemoryTools")

_Run = Callable[[MemoryHandle, dict[str, Any]], Awaitable[Any]]

_MESSAGE: Final[dict[str, Any]] = {
    "type": "object",
    "description": "An OpenAI-style chat message.",
    "properties": {
        "role": {
            "type": "string",
            "enum": ["system", "user", "assistant", "tool", "agent_call", "agent_response"],
        },
        "content": {
            "description": "Text, or structured content (an object or a list of content parts).",
            "type": ["string", "object", "array", "null"],
        },
        "name": {"type": "string", "description": "The speaker."},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": "string"},
        "metadata": {"type": "object", "description": 'JSON tags, e.g. {"important": true}.'},
        "importance": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["role"],
}
_MESSAGES: Final[dict[str, Any]] = {"type": "array", "items": _MESSAGE, "minItems": 1}
_QUERY: Final[dict[str, Any]] = {"type": "string", "description": "What to look for."}
_K: Final[dict[str, Any]] = {"type": "integer", "minimum": 1, "description": "At most this many."}
_AGENT: Final[dict[str, Any]] = {
    "type": "string",
    "description": "The agent whose memory this call acts on.",
}


def _data(value: Any) -> Any:
    """A result as JSON-able data (Structs become objects)."""
    return msgspec.to_builtins(value)


@dataclass(frozen=True)
class MemoryTool:
    """One memory tool.

    Attributes:
        name: the tool's name.
        description: what it does, for the model.
        properties: its arguments' JSON schemas, by name.
        required: the arguments it needs.
        run: calls the handle with the checked arguments; returns the result as a
            JSON object.
        read_only: it changes nothing stored.
        destructive: it erases stored data.
        idempotent: calling it again with the same arguments changes nothing more.
    """

    name: str
    description: str
    properties: Mapping[str, Any]
    required: tuple[str, ...]
    run: _Run
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    def input_schema(self, *, agent: bool) -> dict[str, Any]:
        """The JSON schema of the arguments (with a required ``agent`` if ``agent``)."""
        properties = dict(self.properties)
        required = list(self.required)
        if agent:
            properties = {"agent": _AGENT, **properties}
            required.insert(0, "agent")
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }


async def _add(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return _data(await memory.add(args["messages"]))


async def _context(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return {"messages": await memory.context(args.get("max_tokens"), query=args.get("query"))}


async def _search(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    query = args.pop("query")
    return {"messages": _data(await memory.search(query, **args))}


async def _retrieve(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return {"memories": _data(await memory.retrieve(args["query"], args.get("k")))}


async def _record(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return {"recorded": await memory.record(args["messages"])}


async def _share(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return _data(await memory.share(**args))


async def _start_episode(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    metadata = args.get("metadata", {})
    if not isinstance(metadata, dict):
        raise MemoryInputError(f"start_episode: metadata must be an object, got {shown(metadata)}")
    return {"closed": _data(await memory.start_episode(**metadata))}


async def _recall_episodes(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return {"episodes": _data(await memory.recall_episode(**args))}


async def _summarize_episodes(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return {"summaries": await memory.summarize_episodes()}


async def _reload(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return {"messages": _data(await memory.reload(args["offload_id"]))}


async def _forget(memory: MemoryHandle, args: dict[str, Any]) -> Any:
    return {"erased": await memory.forget()}


#: Every memory tool, by name.
TOOLS: Final[dict[str, MemoryTool]] = {
    tool.name: tool
    for tool in (
        MemoryTool(
            "add_messages",
            "Add messages to the agent's memory (its working view and its original history).",
            {"messages": _MESSAGES},
            ("messages",),
            _add,
        ),
        MemoryTool(
            "get_context",
            "The agent's memory as a chat message list ready for a model call, within "
            "max_tokens: system prompt first, then core memory, received insights and the "
            "long-term memories relevant to the query as quoted data, then the newest "
            "messages with every tool call next to its result.",
            {
                "max_tokens": {"type": "integer", "minimum": 1, "description": "Token budget."},
                "query": {
                    "type": "string",
                    "description": "What to recall for (default: the newest user message).",
                },
            },
            (),
            _context,
            read_only=True,
        ),
        MemoryTool(
            "search_messages",
            "Find messages by text: case-insensitive substring (oldest first) or ranked "
            "by relevance (BM25).",
            {
                "query": _QUERY,
                "mode": {"type": "string", "enum": ["substring", "ranked"]},
                "k": _K,
                "roles": {"type": "array", "items": _MESSAGE["properties"]["role"]},
                "scope": {
                    "type": "string",
                    "enum": ["working", "history", "offloaded"],
                    "description": "working view (default), the whole original history, "
                    "or what compression offloaded.",
                },
            },
            ("query",),
            _search,
            read_only=True,
        ),
        MemoryTool(
            "retrieve_memories",
            "Long-term memories for a query, best first (by recency, importance and relevance).",
            {"query": _QUERY, "k": _K},
            ("query",),
            _retrieve,
            read_only=True,
        ),
        MemoryTool(
            "record_memories",
            "Record messages in the agent's long-term memory; returns how many new memories "
            "that made.",
            {"messages": _MESSAGES},
            ("messages",),
            _record,
        ),
        MemoryTool(
            "share_insight",
            "Share what the agent learned with the insight pool, which sends it to the "
            "agents subscribed to its topic (exact and near duplicates are dropped).",
            {
                "insight": {"type": "string", "description": "The insight, in a sentence."},
                "topic": {"type": "string", "description": "Its topic (default: general)."},
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
            },
            ("insight",),
            _share,
        ),
        MemoryTool(
            "start_episode",
            "Close the current episode (returned if it held anything) and open a new one.",
            {"metadata": {"type": "object", "description": "What the new episode is about."}},
            (),
            _start_episode,
        ),
        MemoryTool(
            "recall_episodes",
            "The past episodes most relevant to a query, best first.",
            {"query": _QUERY, "k": _K},
            ("query",),
            _recall_episodes,
            read_only=True,
        ),
        MemoryTool(
            "summarize_episodes",
            "A short summary of each closed episode.",
            {},
            (),
            _summarize_episodes,
            read_only=True,
        ),
        MemoryTool(
            "reload_offload",
            "The original messages behind an offload id (a compressed or offloaded block "
            "names its id in the context).",
            {"offload_id": {"type": "string", "description": "The offload id."}},
            ("offload_id",),
            _reload,
            read_only=True,
        ),
        MemoryTool(
            "forget_agent",
            "Erase the agent's memory as if it never existed: its history, long-term "
            "memory, episodes, offloads and what it shared. Cannot be undone.",
            {},
            (),
            _forget,
            destructive=True,
            idempotent=True,
        ),
    )
}


class MemoryTools:
    """The memory tools over a runtime's agent memories.

    Args:
        runtime: the open runtime whose memories the tools act on.
        agent: serve this agent only (the tools then take no ``agent`` argument);
            None: every call names its agent.
        timeout: seconds each call waits for the memory (the runtime's default).

    Raises:
        MemoryInputError: ``agent`` is not a valid agent name.
    """

    def __init__(
        self, runtime: MemoryRuntime, *, agent: str | None = None, timeout: float | None = None
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.timeout = timeout
        if agent is not None:
            runtime.memory(agent, timeout=timeout)  # checks the name now

    def schemas(self, *, bound: bool = False) -> list[tuple[MemoryTool, dict[str, Any]]]:
        """Every tool with its input schema, in a stable order; ``bound``: for a
        session bound to one agent (no ``agent`` argument then)."""
        named = self.agent is None and not bound
        return [(tool, tool.input_schema(agent=named)) for tool in TOOLS.values()]

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None, *, session_agent: str | None = None
    ) -> dict[str, Any]:
        """Run tool ``name`` with ``arguments``; return its result (a JSON object).

        Args:
            name: the tool.
            arguments: its arguments, as the caller sent them.
            session_agent: the agent the caller's session is bound to, if any (the
                call then takes no ``agent`` argument).

        Raises:
            MemoryInputError: no such tool, an argument it does not take or lacks,
                a session bound to another agent than the one served, or arguments
                the handle refuses (its message, unchanged).
            ActormemError: any other error of the memory (a timeout, say).
        """
        tool = TOOLS.get(name)
        if tool is None:
            raise MemoryInputError(f"no memory tool {name!r} (expected one of {sorted(TOOLS)})")
        fixed = self.agent if self.agent is not None else session_agent
        if session_agent is not None and session_agent != fixed:
            raise MemoryInputError(
                f"this server serves agent {fixed!r} only, not {session_agent!r}"
            )
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise MemoryInputError(f"{name}: arguments must be an object, got {shown(arguments)}")
        args = dict(arguments)
        schema = tool.input_schema(agent=fixed is None)
        unknown = sorted(set(args) - set(schema["properties"]))
        if unknown:
            takes = ", ".join(schema["properties"]) or "no arguments"
            raise MemoryInputError(f"{name}: unknown argument {unknown[0]!r} (it takes {takes})")
        missing = [key for key in schema["required"] if key not in args]
        if missing:
            raise MemoryInputError(f"{name}: missing argument {missing[0]!r}")
        agent = args.pop("agent") if fixed is None else fixed
        if not isinstance(agent, str):
            raise MemoryInputError(f"{name}: agent must be a string, got {shown(agent)}")
        result: dict[str, Any] = await tool.run(
            self.runtime.memory(agent, timeout=self.timeout), args
        )
        return result
