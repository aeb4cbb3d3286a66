"""Helpers shared by the Redis tests and the process-fault tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager

import anyio
import redis.asyncio as aioredis

from actormem.runtime import Runtime, RuntimeConfig
from actormem.runtime.redis import Keys, RedisConfig, connect, shard_of
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses


async def eventually(check: Callable[[], Awaitable[bool]], what: str, limit: float = 40.0) -> None:
    """Poll ``check`` until it holds: a bound on waiting, never a timing assertion.

    Raises:
        AssertionError: ``check`` did not hold within ``limit`` seconds.
    """
    with anyio.move_on_after(limit):
        while not await check():  # noqa: ASYNC110 (polling Redis from outside)
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"never happened: {what}")


@asynccontextmanager
async def client_runtime(config: RedisConfig) -> AsyncIterator[Runtime]:
    """A runtime that only sends and asks (the simulation's driver, say)."""
    transport = RedisTransport(None, config, worker=False)
    async with Runtime(RuntimeConfig(ask_timeout=30.0), transport=transport) as rt:
        yield rt


async def stored_tokens(
    client: aioredis.Redis, config: RedisConfig, agents: Iterable[str]
) -> dict[str, list[str]]:
    """Each ledger's stored log (the tokens it applied, oldest first), read straight
    from Redis: what survives any worker's death."""
    keys = Keys(config.prefix)
    agents = list(agents)
    async with client.pipeline(transaction=False) as pipe:
        for address in agents:
            pipe.lrange(keys.actor_log(shard_of(address, config.shards), address), 0, -1)
        logs = await pipe.execute()
    return {a: [t.decode() for t in log] for a, log in zip(agents, logs, strict=True)}


async def lease_holders(config: RedisConfig) -> dict[int, str]:
    """The worker id holding each leased shard."""
    client = connect(config)
    keys = Keys(config.prefix)
    try:
        values = [await client.get(keys.lease(s)) for s in range(config.shards)]
    finally:
        await client.aclose()
    return {s: v.decode().partition(":")[2] for s, v in enumerate(values) if v}


def owners(workers: WorkerProcesses) -> Callable[[], Awaitable[set[str]]]:
    """A check reading which workers hold shard leases."""

    async def read() -> set[str]:
        return set((await lease_holders(workers.redis)).values())

    return read


async def every_worker_owns_shards(workers: WorkerProcesses) -> None:
    """Wait until every worker of ``workers`` holds some shard lease."""

    async def shared() -> bool:
        return await owners(workers)() == set(workers.ids)

    await eventually(shared, "every worker owns some shards")
