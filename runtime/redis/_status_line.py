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
from actormem.runtime.redis.status import read_status

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
            status = await read_status(transport.client, transport.config)
        except ActormemError as exc:  # Redis away: the line still comes, without the backlog
            log.debug("worker_status_backlog_unread", reason=str(exc))
        else:
            mine = [s for s in status.shards if s.owner == transport.id]
            pending = sum(s.pending for s in mine)
            lag = sum(s.lag or 0 for s in mine)
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
