"""A Model Context Protocol server of the memory tools (the optional extra ``mcp``).

``actormem mcp CONFIG`` runs it; from code, open a :class:`MemoryRuntime` and call
:func:`serve_stdio` or :func:`serve_http`, or mount :func:`mcp_server`'s server
yourself. The tools are :data:`~actormem.actors.integrations.memory_tools.TOOLS`:
each result is a JSON object (the call's ``structuredContent``, and its text);
a refused call (bad input, a timeout, any error of the memory) comes back as a
tool error (``isError``) whose text names what was wrong, and the server goes on.

The ``mcp`` package is imported only when a server is built, so this module
imports without it; building one without it raises :class:`MissingExtraError`.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.integrations._extras import MissingExtraError, require
from actormem.actors.integrations.memory_tools import MemoryTools
from actormem.runtime.errors import ActormemError, ConfigError

if TYPE_CHECKING:
    import mcp.types
    from mcp.server import Server, ServerRequestContext

__all__ = (
    "DEFAULT_HOST",
    "DEFAULT_PATH",
    "DEFAULT_PORT",
    "MissingExtraError",
    "check_mcp",
    "mcp_server",
    "serve_http",
    "serve_stdio",
)

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000
DEFAULT_PATH: Final = "/mcp"
#: Seconds open HTTP streams get to finish once the server is stopping.
_SHUTDOWN_GRACE: Final = 2

log = structlog.get_logger("actormem.mcp")


def check_mcp() -> None:
    """Check that the ``mcp`` package is installed.

    Raises:
        MissingExtraError: it is not (or not version 2); the message says how to
            install the extra.
    """
    require("mcp.server.lowlevel", "mcp", "the MCP server", major=("mcp", 2))


def mcp_server(
    runtime: MemoryRuntime,
    *,
    agent: str | None = None,
    timeout: float | None = None,
    name: str = "actormem",
) -> Server[Any]:
    """An MCP server (``mcp.server.Server``) of the memory tools over ``runtime``.

    Over HTTP a client may bind its session to one agent with the URL's
    ``?agent=NAME`` (``http://host:port/mcp?agent=alice``): its tools then take no
    ``agent`` argument, as with ``agent`` here.

    Args:
        runtime: an open memory runtime, kept open while the server serves.
        agent: serve this agent's memory only (the tools take no ``agent``
            argument); None: every tool call names its agent, unless its session
            is bound to one.
        timeout: seconds a tool call waits for the memory (the runtime's default).
        name: the server's name in the MCP handshake.

    Raises:
        MissingExtraError: the ``mcp`` package is not installed.
        MemoryInputError: ``agent`` is not a valid agent name.
    """
    check_mcp()
    import mcp.types as types
    from mcp.server import Server

    tools = MemoryTools(runtime, agent=agent, timeout=timeout)
    # What a session bound to one agent lists (no agent argument), and the others.
    listed = {
        bound: types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=schema,
                    annotations=types.ToolAnnotations(
                        read_only_hint=tool.read_only,
                        destructive_hint=tool.destructive,
                        idempotent_hint=tool.idempotent or tool.read_only,
                        open_world_hint=False,
                    ),
                )
                for tool, schema in tools.schemas(bound=bound)
            ]
        )
        for bound in (False, True)
    }

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp.types.PaginatedRequestParams | None
    ) -> mcp.types.ListToolsResult:
        return listed[_session_agent(ctx) is not None]

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp.types.CallToolRequestParams
    ) -> mcp.types.CallToolResult:
        try:
            result = await tools.call(
                params.name, params.arguments, session_agent=_session_agent(ctx)
            )
        except ActormemError as exc:
            log.debug("mcp_tool_refused", tool=params.name, error=str(exc))
            return _error(types, f"{type(exc).__name__}: {exc}")
        except Exception:
            log.exception("mcp_tool_failed", tool=params.name)
            return _error(types, f"{params.name}: internal error (the server logged it)")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=msgspec.json.encode(result).decode())],
            structured_content=result,
        )

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


def _session_agent(ctx: ServerRequestContext[Any]) -> str | None:
    """The agent an HTTP session is bound to: its URL's ``?agent=NAME``."""
    query = getattr(ctx.request, "query_params", None)
    if query is None:
        return None
    agent: str | None = query.get("agent")
    return agent


def _error(types: Any, text: str) -> mcp.types.CallToolResult:
    result: mcp.types.CallToolResult = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=True
    )
    return result


async def serve_stdio(
    runtime: MemoryRuntime,
    *,
    agent: str | None = None,
    timeout: float | None = None,
    stop: anyio.Event | None = None,
) -> None:
    """Serve the memory tools over this process's stdin and stdout until the client
    closes stdin or ``stop`` is set (one MCP session).

    Raises:
        MissingExtraError: the ``mcp`` package is not installed.
    """
    server = mcp_server(runtime, agent=agent, timeout=timeout)
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write), anyio.create_task_group() as tg:
        if stop is not None:
            tg.start_soon(_cancel_on, stop, tg.cancel_scope)
        await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()


async def _cancel_on(stop: anyio.Event, scope: anyio.CancelScope) -> None:
    await stop.wait()
    scope.cancel()


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port).

    Raises:
        ConfigError: the address cannot be listened on (named, with the reason).
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ConfigError(f"cannot listen on {host}:{port}: {reason}") from exc


async def serve_http(
    runtime: MemoryRuntime,
    *,
    agent: str | None = None,
    timeout: float | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    path: str = DEFAULT_PATH,
    stop: anyio.Event | None = None,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the memory tools over streamable HTTP at ``http://host:port/path`` until
    ``stop`` is set (or the call is cancelled). Each client has its own MCP session.

    With ``task_status`` (``await tg.start(serve_http, ...)``) the URL is reported
    once the socket listens (``port=0`` picks a free port).

    Raises:
        MissingExtraError: the ``mcp`` package is not installed.
        ConfigError: ``host``:``port`` cannot be listened on.
    """
    server = mcp_server(runtime, agent=agent, timeout=timeout)
    import uvicorn

    class _Quiet(uvicorn.Server):
        # The caller handles SIGINT/SIGTERM (it sets ``stop``); uvicorn's own
        # handlers would replace them and re-raise the signal on exit.
        def capture_signals(self) -> contextlib.nullcontext[None]:  # type: ignore[override]
            return contextlib.nullcontext()

    app = server.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=_SHUTDOWN_GRACE,
    )
    sock = _listen(host, port)
    with sock:
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        http = _Quiet(config)
        async with anyio.create_task_group() as tg:
            if stop is not None:
                tg.start_soon(_exit_on, stop, http)
            task_status.started(f"http://{shown}:{bound}{path}")
            await http.serve(sockets=[sock])
            tg.cancel_scope.cancel()


async def _exit_on(stop: anyio.Event, http: Any) -> None:
    await stop.wait()
    http.should_exit = True
