"""The tables ``actormem inspect`` prints: what :mod:`.inspection` read, for a person.

Each ``show_*`` function takes what the matching reader returned (the same data
``--json`` prints) and prints it with rich.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from actormem.runtime.redis import WorkerCounters
from actormem.runtime.redis.status import DeploymentStatus

__all__ = ("show_agent", "show_agents", "show_pool", "show_status")

#: Characters of a message shown in a table cell (``--json`` has them whole).
_CELL: Final = 120


def _table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", overflow="fold")
    return table


def show_status(out: Console, status: DeploymentStatus) -> None:
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


def show_agents(out: Console, found: dict[str, Any]) -> None:
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


def show_agent(out: Console, found: dict[str, Any]) -> None:
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


def show_pool(out: Console, found: dict[str, Any]) -> None:
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
