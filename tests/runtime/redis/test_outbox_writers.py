"""The outbox writes each batch once, however many callers flush it at once."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis._client import connect
from actormem.runtime.redis._outbox import Outbox

pytestmark = pytest.mark.anyio


async def test_a_second_writer_waits_for_the_batch_in_flight(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # The outbox loop writes a batch while a closing transport flushes what is
    # queued: the batch leaves the queue only once written, so the flush wrote it
    # again and the recipient got the same command twice.
    client = connect(redis_config)
    outbox = Outbox(lambda: client, 100, 1_000)
    stream = f"{redis_config.prefix}:outbox-writers"
    outbox.put_nowait((stream, b"a command", float("inf")))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.write_all)
            tg.start_soon(outbox.write_all)
    finally:
        await client.aclose()
    assert await redis_client.xlen(stream) == 1
    assert len(outbox) == 0
