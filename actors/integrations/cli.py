"""``actormem mcp``: serve the memory tools over the Model Context Protocol."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.config import AppConfig, load_app_config
from actormem.actors.integrations import mcp
from actormem.runtime.cli import StopSignals, chosen_logging, port_number, run_loop
from actormem.runtime.errors import ConfigError

__all__ = ("add_commands",)


def add_commands(subs: Any) -> None:
    """Add ``mcp`` to the CLI's subparsers."""
    cmd = subs.add_parser(
        "mcp",
        help="serve the agents' memory tools over MCP (stdio or streamable HTTP)",
        description="Serve the memory tools (add, context, search, retrieve, record, share "
        "an insight, episodes, reload an offload, forget) to MCP clients. The config "
        "decides where the memories live: in this process, or over Redis. Needs the "
        "extra: pip install 'actormem[mcp]' (in a clone: pip install -e '.[mcp]').",
    )
    cmd.add_argument("config", nargs="?", default=None, help="a TOML config (defaults if omitted)")
    cmd.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio: one client on stdin/stdout (default); http: streamable HTTP at "
        f"http://HOST:PORT{mcp.DEFAULT_PATH}",
    )
    cmd.add_argument(
        "--host",
        default=None,
        help=f"with --transport http: the address (default {mcp.DEFAULT_HOST})",
    )
    cmd.add_argument(
        "--port",
        type=port_number,
        default=None,
        help=f"with --transport http: the port (default {mcp.DEFAULT_PORT}; 0: a free one)",
    )
    cmd.add_argument(
        "--agent",
        metavar="NAME",
        help="serve this agent's memory only (the tools take no agent argument); "
        "default: every tool call names its agent",
    )
    cmd.set_defaults(func=_mcp)


class _Listening:
    """Says where the HTTP server listens, once it does (its ``task_status``)."""

    def started(self, value: str | None = None) -> None:
        print(f"actormem: serving MCP on {value}", file=sys.stderr, flush=True)


def _load(args: argparse.Namespace) -> AppConfig:
    config = load_app_config(args.config)
    return msgspec.structs.replace(config, logging=chosen_logging(args, config.logging))


def _mcp(args: argparse.Namespace) -> int:
    mcp.check_mcp()
    if args.transport == "stdio" and (args.host is not None or args.port is not None):
        raise ConfigError("--host and --port go with --transport http")
    config = _load(args)
    stops = StopSignals(lambda: "closing the MCP server and the memory runtime...")

    async def serve() -> None:
        async with MemoryRuntime(config) as rt:
            if args.transport == "stdio":
                await mcp.serve_stdio(rt, agent=args.agent, stop=stops.requested)
                return
            await mcp.serve_http(
                rt,
                agent=args.agent,
                host=args.host or mcp.DEFAULT_HOST,
                port=mcp.DEFAULT_PORT if args.port is None else args.port,
                stop=stops.requested,
                task_status=_Listening(),
            )

    run_loop(stops.run, serve)
    return stops.exit_code
