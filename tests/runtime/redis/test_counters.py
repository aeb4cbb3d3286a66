"""The counters a worker writes to Redis, read back and summed as a reader outside
the worker does."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig
from actormem.runtime.redis._counters import (
    KEEP_LEASES,
    WorkerCounters,
    counted_workers,
    read_counters,
    read_fresh_counters,
    total,
    write_counters,
)

pytestmark = pytest.mark.anyio


async def test_counters_round_trip_and_sum(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    a = WorkerCounters("a", handled=10, failures=2, restarts=1, active_by_kind={"memory": 3})
    b = WorkerCounters("b", handled=5, dead_letters=1, stopped=True, active_by_kind={"pool": 1})
    for counters in (a, b):
        await write_counters(redis_client, keys, counters, redis_config.lease_ms)
    ttl = await redis_client.pttl(keys.worker_counters("a"))
    assert 0 < ttl <= KEEP_LEASES * redis_config.lease_ms
    # A field someone else wrote is left out; a worker with no hash is absent.
    await redis_client.hset(keys.worker_counters("a"), "handled_per_s", "fast")
    assert await counted_workers(redis_client, keys) == ["a", "b"]
    found = await read_counters(redis_client, keys, ["a", "b", "ghost"])
    assert found == {"a": a, "b": b}
    summed = total(found.values())
    assert (summed.handled, summed.failures, summed.restarts, summed.dead_letters) == (15, 2, 1, 1)
    assert summed.active_by_kind == {"memory": 3, "pool": 1}


async def test_fresh_counters_wait_for_a_write_after_the_moment_asked(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    now_ms = int(time.time() * 1000)
    old = WorkerCounters("a", handled=1, updated_ms=now_ms - 5_000)
    await write_counters(redis_client, keys, old, redis_config.lease_ms)
    # Nothing newer comes: after the timeout, the last figures written.
    stale = await read_fresh_counters(redis_client, keys, ["a"], since_ms=now_ms, timeout=0.1)
    assert stale == {"a": old}
    # A stopped worker's final figures count as fresh.
    done = WorkerCounters("a", handled=2, updated_ms=now_ms - 1, stopped=True)
    await write_counters(redis_client, keys, done, redis_config.lease_ms)
    fresh = await read_fresh_counters(redis_client, keys, ["a"], since_ms=now_ms, timeout=30)
    assert fresh == {"a": done}
