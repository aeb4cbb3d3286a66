"""Reading a stream's entries from an XREAD reply, as the server sent it or as redis-py
parsed it (a read over the wire, or one that went through the client)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis._loops import entry_field, streams_read
from actormem.runtime.redis._wire import wire

pytestmark = pytest.mark.anyio


async def test_an_entrys_field_is_found_in_a_raw_and_in_a_parsed_reply(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    stream = f"{redis_config.prefix}:{{r:t}}:replies"
    await redis_client.xadd(stream, {b"r": b"one"})
    await redis_client.xadd(stream, {b"x": b"other", b"r": b"two"})  # another field first
    await redis_client.xadd(stream, {b"x": b"none"})
    raw = await wire(redis_client).execute_command("XREAD", "COUNT", 10, "STREAMS", stream, "0-0")
    parsed = await redis_client.xread({stream: "0-0"}, count=10)
    for reply in (raw, parsed):
        read = [
            (entry, entry_field(fields, b"r")) for e in streams_read(reply) for entry, fields in e
        ]
        assert [value for _, value in read] == [b"one", b"two", None]
        assert all(isinstance(entry, bytes) for entry, _ in read)


def test_no_reply_reads_no_entries() -> None:
    assert list(streams_read(None)) == []
    assert list(streams_read([])) == []
