"""Edits over Redis are exactly-once: the same command delivered twice applies once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from actormem import AppConfig, MemoryRuntime
from actormem.actors.memory.commands import SetSummary, Update
from actormem.runtime import Envelope
from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio


async def test_a_redelivered_update_and_set_summary_apply_once(
    redis_client: aioredis.Redis,
    redis_config: RedisConfig,
    make_redis_transport: Callable[[], RedisTransport],
) -> None:
    transport = make_redis_transport()
    async with MemoryRuntime(AppConfig(), transport=transport) as rt:
        alice = rt.memory("alice")
        added = await alice.add([{"role": "user", "content": f"message {i}"} for i in range(4)])
        first, second, third, _ = added.ids
        stream = Keys(redis_config.prefix).stream(shard_of("memory/alice", redis_config.shards))
        commands = [
            ("update-0001", Update(id=first, content="edited once")),
            ("summary-0001", SetSummary(text="the middle", replaces=[second, third])),
        ]
        for command_id, body in commands:
            data = transport.codec.encode_envelope(
                Envelope(recipient="memory/alice", body=body, id=command_id)
            )
            # A producer whose XADD reply was lost sends the same bytes again.
            await redis_client.xadd(stream, {b"e": data})
            await redis_client.xadd(stream, {b"e": data})

        async def both_skipped() -> bool:
            return transport.stats().duplicates == 2

        await eventually(both_skipped, "the second copy of each command is skipped")
        working = await alice.get()
        history = await alice.get(scope="history")
    assert working[0].content == "edited once"
    assert sum(1 for m in working if m.metadata.get("compressed") == "manual") == 1
    assert len(working) == 3  # the edited one, the summary, the last
    assert len([m for m in history if m.metadata.get("edit_of") == first]) == 1
