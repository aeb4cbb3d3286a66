"""Run ids: every simulation run has one, and over Redis it namespaces the run's keys.

A run's keys live under ``<prefix>:<run id>`` (:meth:`RedisConfig.namespaced`), so
runs on one configured Redis never see each other's agents or messages, and a
later run given the same id finds its memories again (it resumes). Clearing a run
(``--fresh``) deletes the keys under its namespace alone, by SCAN.
"""

from __future__ import annotations

import secrets
import time

import msgspec

from actormem.actors.config import AppConfig
from actormem.runtime.redis import clear_prefix, count_prefix

__all__ = ("for_run", "new_run_id", "open_run")


def new_run_id() -> str:
    """A new run id: when it started (UTC) and a random part, ``20261125-173850-3fa2c1``."""
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def for_run(config: AppConfig, run_id: str) -> AppConfig:
    """``config`` for the run ``run_id``: its ``simulation.run_id`` set, its Redis
    keys in the run's namespace, and no feed ticks by the clock (the run ticks the
    feeds once per step). Apply it once: a second time nests the namespace.

    Raises:
        ValueError: ``run_id`` is not a valid namespace name.
    """
    simulation = msgspec.structs.replace(config.simulation, run_id=run_id)
    feed = msgspec.structs.replace(config.pool.feed, interval=0.0)
    return msgspec.structs.replace(
        config,
        simulation=simulation,
        redis=config.redis.namespaced(run_id),
        pool=msgspec.structs.replace(config.pool, feed=feed),
    )


async def open_run(config: AppConfig, *, fresh: bool) -> str | None:
    """Look at what a run (``config`` from :func:`for_run`) holds on its configured
    Redis, clearing it first if ``fresh``; return one line saying what was found or
    cleared, or None when the namespace was empty (or there is no configured Redis).

    Raises:
        TransportUnavailableError: Redis cannot be reached.
        TransportError: Redis refused the SCAN or the UNLINK.
    """
    redis = config.redis
    if config.runtime.transport != "redis" or not redis.url:
        return None
    where = f"{redis.prefix}:*"
    run = config.simulation.run_id
    if fresh:
        cleared = await clear_prefix(redis)
        return f"run {run}: cleared {cleared:,} keys under {where} (--fresh)" if cleared else None
    found = await count_prefix(redis)
    if not found:
        return None
    return (
        f"run {run} resumes: {found:,} keys of it are already under {where} "
        "(--fresh clears them first)"
    )
