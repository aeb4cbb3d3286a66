"""``actormem inspect``: a running deployment as its Redis holds it, read-only.

``inspect CONFIG`` shows the shards (owner, lease age, backlog), the workers (last
heartbeat, shards, and the counters each writes: handled, rejected, actor failures,
restarts, dead letters) and the number of dead letters. ``--agents`` counts the
agents whose memory is stored, how many are active in a worker, and lists the
largest; ``--agent NAME`` shows one agent's memory; ``--pool`` the insight pool.

One agent's memory and the pool are read the way a worker restores them on
activation (the stored snapshot and log, decoded by the actor's own code) into a
copy in this process: the actor in the deployment is not activated, and nothing
is written back. ``--json`` prints the same as JSON, for scripts.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
from rich.console import Console

from actormem.actors.app._deployment import (
    READ_ONLY,
    check_url,
    deployment_arguments,
    deployment_config,
    print_json,
    say,
)
from actormem.actors.app.inspection_tables import show_agent, show_agents, show_pool, show_status
from actormem.actors.memory.actor import AgentMemory, memory_factory
from actormem.actors.memory.commands import Context, Get, Stats
from actormem.actors.pool.actor import PoolActor, PoolState
from actormem.actors.pool.commands import POOL_ADDRESS
from actormem.runtime import ActorContext, Runtime
from actormem.runtime.cli import positive_int
from actormem.runtime.errors import ConfigError
from actormem.runtime.redis import open_client
from actormem.runtime.redis.status import (
    DeploymentStatus,
    StoredActor,
    read_status,
    read_stored_actors,
    read_stored_state,
)

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from actormem.actors.config import AppConfig

__all__ = ("add_inspect", "stored_memory")

#: The agents ``--agents`` lists by default (the largest).
DEFAULT_TOP: Final = 10
#: The recent messages ``--agent`` shows by default.
DEFAULT_RECENT: Final = 10
EXIT_UNKNOWN: Final = 1
_MEMORY: Final = "memory"
#: What a stored state that cannot be decoded raises.
_UNREADABLE: Final = (msgspec.MsgspecError, ValueError, TypeError, KeyError)
#: The widest a table printed to a pipe or a file may be.
_PIPED_WIDTH: Final = 200


def add_inspect(subs: Any) -> None:
    """Add ``inspect`` to the CLI's subparsers."""
    inspect = subs.add_parser(
        "inspect",
        help="show a running deployment: shards, workers, agents, the pool (read-only)",
        description="Show a running deployment. By default: each shard's owner, lease "
        "age, stream length, pending and lag (entries not yet delivered); each "
        "registered worker's last heartbeat, shards and counters (handled, rejected, "
        "actor failures, restarts, dead letters); the number of dead letters. "
        "--agents, --agent NAME and --pool show the agents' memories and the insight "
        "pool instead, read from their stored state without activating them. "
        f"{READ_ONLY}",
    )
    deployment_arguments(inspect)
    what = inspect.add_mutually_exclusive_group()
    what.add_argument(
        "--agents",
        action="store_true",
        help="the agents whose memory is stored: how many, how many active in a worker, "
        "and the largest by stored messages",
    )
    what.add_argument(
        "--agent",
        metavar="NAME",
        help="one agent's memory: its sizes, recent messages, the context as it would "
        "be sent, long-term entries and episodes",
    )
    what.add_argument(
        "--pool",
        action="store_true",
        help="the insight pool: topics, insights, subscribers and delivery cursors",
    )
    inspect.add_argument(
        "--top",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"with --agents: list the N largest (default: {DEFAULT_TOP})",
    )
    inspect.add_argument(
        "--recent",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"with --agent: show its last N messages (default: {DEFAULT_RECENT})",
    )
    inspect.add_argument(
        "--max-tokens",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --agent: the context's token budget (default: the config's [memory] max_tokens)",
    )
    inspect.set_defaults(func=_inspect)


def _inspect(args: argparse.Namespace) -> int:
    for option, dest, view in (
        ("--top", "top", "agents"),
        ("--recent", "recent", "agent"),
        ("--max-tokens", "max_tokens", "agent"),
    ):
        if getattr(args, dest) is not None and getattr(args, view) in (None, False):
            raise ConfigError(f"{option} goes with --{view}")
    config = deployment_config(args)

    async def main() -> tuple[int, Any]:
        await check_url(config.redis)
        async with open_client(config.redis) as client:
            if args.agent is not None:
                return await _agent(client, config, args)
            if args.pool:
                return await _pool(client, config)
            if args.agents:
                return 0, await _agents(client, config, args.top or DEFAULT_TOP)
            return 0, await read_status(client, config.redis)

    code, found = anyio.run(main)
    if code:
        say(found)
        return code
    if args.json:
        print_json(dataclasses.asdict(found) if isinstance(found, DeploymentStatus) else found)
        return 0
    # Piped or redirected, a table is as wide as its content (a terminal folds it).
    out = Console(soft_wrap=False, width=None if sys.stdout.isatty() else _PIPED_WIDTH)
    if args.agent is not None:
        show_agent(out, found)
    elif args.pool:
        show_pool(out, found)
    elif args.agents:
        show_agents(out, found)
    else:
        show_status(out, found)
    return 0


# -- reading ------------------------------------------------------------------------------


def stored_memory(
    config: AppConfig, agent: str, snapshot: bytes | None, log: list[bytes]
) -> AgentMemory:
    """A copy of ``agent``'s memory made from its stored state, as a worker makes one on
    activation, in a runtime that is never opened: reading it sends and stores nothing.

    Its ``retention.ttl`` is off, so reading an agent that was idle too long does not
    forget it in the copy (the deployment's own memory expires it as configured).
    """
    retention = msgspec.structs.replace(config.retention, ttl=None)
    factory = memory_factory(msgspec.structs.replace(config, retention=retention))
    memory = factory(ActorContext(Runtime(), f"{_MEMORY}/{agent}"))
    memory.durable_restore(snapshot, log)
    return memory


def stored_pool(config: AppConfig, snapshot: bytes | None, log: list[bytes]) -> PoolState:
    """The pool's state as a worker restores it on activation (its snapshot, then its
    journal's entries), in a runtime that is never opened.

    Raises:
        msgspec.MsgspecError: the stored state cannot be decoded.
    """
    pool = PoolActor(ActorContext(Runtime(), POOL_ADDRESS), config.pool)
    pool.durable_restore(snapshot, log)
    return pool.export_state()


async def _agents(client: aioredis.Redis, config: AppConfig, top: int) -> dict[str, Any]:
    stored = await read_stored_actors(client, config.redis, _MEMORY)
    status = await read_status(client, config.redis)
    live = [w.counters for w in status.workers if w.live and w.counters is not None]
    active = sum(c.active_by_kind.get(_MEMORY, 0) for c in live)
    largest = sorted(stored, key=lambda a: (-a.log_entries, -a.snapshot_bytes, a.address))[:top]
    rows = []
    for actor in largest:
        agent = actor.address.partition("/")[2]
        state = await read_stored_state(client, config.redis, actor.address)
        try:
            stats = await stored_memory(config, agent, *state).receive(Stats()) if state else None
        except _UNREADABLE:
            stats = None  # its sizes unknown; the stored sizes still show
        rows.append(_agent_row(agent, actor, stats))
    return {
        "agents": len(stored),
        "active": active,
        "passivated": max(len(stored) - active, 0),
        "workers_counted": len(live),
        "largest": rows,
    }


def _agent_row(agent: str, actor: StoredActor, stats: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "agent": agent,
        "shard": actor.shard,
        "log_entries": actor.log_entries,
        "snapshot_bytes": actor.snapshot_bytes,
    }
    if stats is not None:
        row.update(
            history_messages=stats.history_size,
            history_tokens=stats.history_tokens,
            working_messages=stats.size,
            working_tokens=stats.working_tokens,
        )
    return row


async def _agent(
    client: aioredis.Redis, config: AppConfig, args: argparse.Namespace
) -> tuple[int, Any]:
    agent = args.agent
    state = await read_stored_state(client, config.redis, f"{_MEMORY}/{agent}")
    if state is None:
        return EXIT_UNKNOWN, (
            f"actormem: no agent {agent!r}: nothing is stored for memory/{agent} under the "
            f"prefix {config.redis.prefix!r} (see 'actormem inspect --agents')"
        )
    try:
        memory = stored_memory(config, agent, *state)
    except _UNREADABLE as exc:
        return EXIT_UNKNOWN, f"actormem: the stored state of memory/{agent} cannot be read: {exc}"
    stats = await memory.receive(Stats())
    recent = await memory.receive(Get(recent_n=args.recent or DEFAULT_RECENT))
    context = await memory.receive(Context(max_tokens=args.max_tokens))
    recall = memory.recall
    return 0, {
        "agent": agent,
        "stats": msgspec.to_builtins(stats),
        "recent": msgspec.to_builtins(recent),
        "context": context,
        "longterm": msgspec.to_builtins(recall.longterm.entries()),
        "episodes": [
            {
                "id": e.id,
                "number": e.number,
                "metadata": e.metadata,
                "started": e.started,
                "ended": e.ended,
                "messages": len(e.messages),
            }
            for e in recall.episodes.episodes()
        ],
    }


async def _pool(client: aioredis.Redis, config: AppConfig) -> tuple[int, Any]:
    state = await read_stored_state(client, config.redis, POOL_ADDRESS)
    pool = PoolState()
    if state is not None:
        try:
            pool = stored_pool(config, *state)
        except msgspec.MsgspecError as exc:
            return (
                EXIT_UNKNOWN,
                f"actormem: the stored state of {POOL_ADDRESS} cannot be read: {exc}",
            )
    topics = Counter(i.topic for i in pool.insights)
    return 0, {
        "stored": state is not None,
        "insights": len(pool.insights),
        "topics": [{"topic": t, "insights": n} for t, n in sorted(topics.items())],
        "recent_insights": msgspec.to_builtins(pool.insights[-DEFAULT_RECENT:]),
        "subscribers": msgspec.to_builtins(pool.subscriptions),
        "cursors": [
            {"agent": c.agent, "last": c.last, "acked": c.acked, "pending": len(c.pending)}
            for c in pool.cursors
        ],
        "delivery_number": pool.delivery_number,
    }
