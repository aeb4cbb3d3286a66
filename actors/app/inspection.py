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
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from actormem.actors.app._deployment import (
    READ_ONLY,
    check_url,
    deployment_arguments,
    deployment_config,
    print_json,
    say,
)
from actormem.actors.memory.actor import AgentMemory, memory_factory
from actormem.actors.memory.commands import Context, Get, Stats
from actormem.actors.pool.actor import PoolActor, PoolState
from actormem.actors.pool.commands import POOL_ADDRESS
from actormem.runtime import ActorContext, Runtime
from actormem.runtime.cli import positive_int
from actormem.runtime.errors import ConfigError
from actormem.runtime.redis import WorkerCounters, open_client
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
#: Characters of a message shown in a table cell (``--json`` has them whole).
_CELL: Final = 120


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
        _show_agent(out, found)
    elif args.pool:
        _show_pool(out, found)
    elif args.agents:
        _show_agents(out, found)
    else:
        _show_status(out, found)
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


# -- showing ------------------------------------------------------------------------------


def _table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", overflow="fold")
    return table


def _show_status(out: Console, status: DeploymentStatus) -> None:
    shards = _table(
        "shards", "shard", "owner", "lease age", "stream", "pending", "lag",
        right=("shard", "lease age", "stream", "pending", "lag"),
    )  # fmt: skip
    for shard in status.shards:
        shards.add_row(
            str(shard.shard),
            Text(shard.owner or "no owner", style="" if shard.owner else "bold red"),
            f"{shard.lease_age:.1f} s" if shard.lease_age is not None else "-",
            f"{shard.length:,}",
            f"{shard.pending:,}",
            f"{shard.lag:,}" if shard.lag is not None else "?",
        )
    out.print(shards)
    numbers = ("handled", "rejected", "actor failures", "restarts", "dead letters")
    workers = _table(
        "workers", "worker", "last heartbeat", "live", "shards", *numbers, right=numbers
    )
    for worker in status.workers:
        workers.add_row(
            Text(worker.worker),
            f"{worker.heartbeat_age:.1f} s ago",
            "yes" if worker.live else Text("no", style="bold red"),
            ", ".join(map(str, worker.shards)) or "-",
            *_counts(worker.counters),
        )
    out.print(workers if status.workers else "no worker registered")
    if status.departed:
        gone = _table(
            "workers no longer registered", "worker", "last written", *numbers, right=numbers
        )
        for counters in status.departed:
            when = "stopped" if counters.stopped else "silent"
            gone.add_row(
                Text(counters.worker), f"{when}, {_ago(counters.updated_ms)}", *_counts(counters)
            )
        out.print(gone)
    print(f"dead letters: {status.dead_letters:,}")


def _counts(counters: WorkerCounters | None) -> list[str]:
    if counters is None:
        return ["?"] * 5
    values = (counters.handled, counters.rejected, counters.failures, counters.restarts)
    return [f"{n:,}" for n in (*values, counters.dead_letters)]


def _ago(ms: int) -> str:
    seconds = datetime.now(UTC).timestamp() - ms / 1000
    return f"{max(seconds, 0):.1f} s ago"


def _show_agents(out: Console, found: dict[str, Any]) -> None:
    counted = found["workers_counted"]
    print(
        f"agents: {found['agents']:,} stored, {found['active']:,} active in "
        f"{counted} live worker{'s' if counted != 1 else ''}, {found['passivated']:,} passivated"
    )
    if not found["largest"]:
        return
    numbers = ("history msgs", "history tokens", "working msgs", "working tokens", "snapshot")
    table = _table(
        f"largest {len(found['largest'])} by stored messages", "agent", "shard", *numbers,
        right=("shard", *numbers),
    )  # fmt: skip
    for row in found["largest"]:
        table.add_row(
            Text(row["agent"]),
            str(row["shard"]),
            *(
                f"{row.get(k, 0):,}"
                for k in (
                    "history_messages",
                    "history_tokens",
                    "working_messages",
                    "working_tokens",
                )
            ),
            f"{row['snapshot_bytes']:,} B",
        )
    out.print(table)


def _show_agent(out: Console, found: dict[str, Any]) -> None:
    stats = found["stats"]
    sizes = _table(f"memory of {found['agent']}", "what", "value", right=("value",))
    for key, value in stats.items():
        shown = ("yes" if value else "no") if isinstance(value, bool) else f"{value:,}"
        sizes.add_row(key.replace("_", " "), shown)
    out.print(sizes)
    recent = _table(
        f"last {len(found['recent'])} messages (working view)",
        "time (UTC)",
        "role",
        "name",
        "tokens",
        "content",
        right=("tokens",),
    )
    for m in found["recent"]:
        recent.add_row(
            _time(m.get("timestamp")),
            m.get("role", ""),
            Text(m.get("name") or ""),
            f"{m.get('tokens', 0):,}",
            Text(_short(m.get("content"))),
        )
    out.print(recent)
    context = _table(
        f"context as it would be sent ({len(found['context'])} messages)",
        "#",
        "role",
        "content",
        right=("#",),
    )
    for i, m in enumerate(found["context"]):
        context.add_row(str(i), m.get("role", ""), Text(_short(m.get("content"))))
    out.print(context)
    entries = found["longterm"]
    shown = entries[-len(found["recent"]) :] if found["recent"] else entries
    longterm = _table(
        f"long-term entries (the newest {len(shown)} of {len(entries)})",
        "created (UTC)",
        "importance",
        "speaker",
        "text",
        right=("importance",),
    )
    for e in shown:
        longterm.add_row(
            _time(e["created"]),
            f"{e['importance']:.2f}",
            Text(e["speaker"]),
            Text(_short(e["text"])),
        )
    out.print(longterm if found["longterm"] else "long-term entries: none")
    episodes = _table(
        f"episodes ({len(found['episodes'])})",
        "#",
        "started (UTC)",
        "ended (UTC)",
        "messages",
        "metadata",
        right=("#", "messages"),
    )
    for e in found["episodes"]:
        episodes.add_row(
            str(e["number"]),
            _time(e["started"]),
            _time(e["ended"]) if e["ended"] is not None else "open",
            str(e["messages"]),
            Text(_short(e["metadata"])),
        )
    out.print(episodes if found["episodes"] else "episodes: none")


def _show_pool(out: Console, found: dict[str, Any]) -> None:
    if not found["stored"]:
        print("the pool has stored nothing yet (no insight shared, no subscription)")
        return
    print(
        f"pool: {found['insights']:,} insights, {len(found['subscribers']):,} subscribers, "
        f"{found['delivery_number']:,} deliveries numbered"
    )
    topics = _table("topics", "topic", "insights", right=("insights",))
    for t in found["topics"]:
        topics.add_row(Text(t["topic"]), f"{t['insights']:,}")
    out.print(topics)
    shown = found["recent_insights"]
    insights = _table(f"newest {len(shown)} insights", "created (UTC)", "source", "topic", "text")
    for i in shown:
        insights.add_row(
            _time(i["created"]),
            Text(i["source"]),
            Text(i["topic"]),
            Text(_short(i["text"]) if not i.get("erased") else "(erased)"),
        )
    out.print(insights)
    subs = _table("subscribers", "agent", "topics")
    for s in found["subscribers"]:
        named = ", ".join(s["topics"])
        if s["all_topics"]:
            named = "*" + (f" except {', '.join(s['excluded'])}" if s["excluded"] else "")
        subs.add_row(Text(s["agent"]), Text(named or "-"))
    out.print(subs)
    cursors = _table(
        "delivery cursors",
        "agent",
        "last delivered",
        "acked through",
        "unconfirmed",
        right=("last delivered", "acked through", "unconfirmed"),
    )
    for c in found["cursors"]:
        cursors.add_row(Text(c["agent"]), f"{c['last']:,}", f"{c['acked']:,}", f"{c['pending']:,}")
    out.print(cursors)


def _time(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"
