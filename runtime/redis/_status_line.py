"""A worker's periodic status line: one ``worker_status`` log event per interval.

It says how the worker is doing since the previous line (commands handled per
second, handler failures, dead letters), how far behind its shards are (``lag``:
entries not yet read; ``pending``: read and not yet acknowledged), and what it
holds now (shards, active actors, mail waiting).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio
import structlog

from actormem.runtime.errors import ActormemError
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis.keys import CONSUMER_GROUP

if TYPE_CHECKING:
    from actormem.runtime._runtime import Runtime
    from actormem.runtime.redis.transport import RedisTransport

__all__ = ("log_status",)

log = structlog.get_logger("actormem.worker")


async def log_status(rt: Runtime, transport: RedisTransport, interval: float) -> None:
    """Log ``worker_status`` every ``interval`` seconds until cancelled."""
    before = rt.stats()
    dead_before = transport.stats().dead_lettered
    since = time.monotonic()
    while True:
        await anyio.sleep(interval)
        now, stats, ours = time.monotonic(), rt.stats(), transport.stats()
        lag: int | None = None
        pending: int | None = None
        try:
            lag, pending = await backlog(transport)
        except ActormemError as exc:  # Redis away: the line still comes, without the backlog
            log.debug("worker_status_backlog_unread", reason=str(exc))
        handled = stats.processed - before.processed
        log.info(
            "worker_status",
            worker=transport.id,
            handled=handled,
            handled_per_s=round(handled / max(now - since, 1e-9), 1),
            failures=stats.failures - before.failures,
            dead_lettered=ours.dead_lettered - dead_before,
            lag=lag,
            pending=pending,
            shards=len(ours.owned_shards),
            active_actors=stats.active,
            mailbox_depth=stats.mailbox_depth,
        )
        before, dead_before, since = stats, ours.dead_lettered, now


async def backlog(transport: RedisTransport) -> tuple[int, int]:
    """Entries of the worker's shards not yet read (lag), and read but not yet
    acknowledged (pending), as the shards' consumer groups report them (XINFO
    GROUPS: in a worker's ACL).

    Raises:
        TransportError: Redis is away or refused.
    """
    streams = [transport.keys.stream(shard) for shard in transport.owned_shards()]
    if not streams:
        return 0, 0
    with redis_errors("reading the shards' backlog"):
        async with transport.client.pipeline(transaction=False) as pipe:
            for stream in streams:
                pipe.xinfo_groups(stream)
            # A stream nobody wrote to yet has no group: nothing waits in it.
            replies = await pipe.execute(raise_on_error=False)
    lag = pending = 0
    names = (CONSUMER_GROUP, CONSUMER_GROUP.encode())
    for groups in replies:
        for group in groups if isinstance(groups, list) else ():
            if group.get("name") in names:
                lag += int(group.get("lag") or 0)
                pending += int(group.get("pending") or 0)
    return lag, pending
