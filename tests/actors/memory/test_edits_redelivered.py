"""Edits and erasures over Redis are exactly-once: the same command delivered twice
applies once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from actormem import AppConfig, MemoryRuntime
from actormem.actors.memory.commands import Forget, SetSummary, Update
from actormem.runtime import Envelope
from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio


class Producer:
    """A runtime on the test's Redis, and raw XADDs of commands for alice as a
    producer sends them (the same bytes again when its XADD reply was lost)."""

    def __init__(
        self,
        client: aioredis.Redis,
        config: RedisConfig,
        rt: MemoryRuntime,
        logs: list[MutableMapping[str, Any]],
    ) -> None:
        self.client, self.rt, self.logs = client, rt, logs
        self.transport = cast(RedisTransport, rt.transport)
        self.stream = Keys(config.prefix).stream(shard_of("memory/alice", config.shards))

    async def xadd(self, body: object, id: str) -> None:
        data = self.transport.codec.encode_envelope(
            Envelope(recipient="memory/alice", body=body, id=id)
        )
        await self.client.xadd(self.stream, {b"e": data})

    async def skipped(self, *ids: str) -> None:
        """Wait until the second copy of each command in ``ids`` was skipped, once.

        By these commands' ids: the transport's count of duplicates also counts the
        copies of this runtime's own asks, sent again when a reply is slow."""

        async def each_once() -> bool:
            skipped = [
                e["msg_id"]
                for e in self.logs
                if e["event"] == "duplicate_skipped" and e["msg_id"] in ids
            ]
            return sorted(skipped) == sorted(ids)

        await eventually(each_once, f"the second copies of {', '.join(ids)} are skipped")


@pytest.fixture
async def producer(
    redis_client: aioredis.Redis,
    redis_config: RedisConfig,
    make_redis_transport: Callable[[], RedisTransport],
) -> AsyncIterator[Producer]:
    with capture_logs() as logs:
        async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
            yield Producer(redis_client, redis_config, rt, logs)


async def test_a_redelivered_update_and_set_summary_apply_once(producer: Producer) -> None:
    alice = producer.rt.memory("alice")
    added = await alice.add([{"role": "user", "content": f"message {i}"} for i in range(4)])
    first, second, third, _ = added.ids
    commands = [
        ("update-0001", Update(id=first, content="edited once")),
        ("summary-0001", SetSummary(text="the middle", replaces=[second, third])),
    ]
    for command_id, body in commands:
        await producer.xadd(body, command_id)
        await producer.xadd(body, command_id)
    await producer.skipped(*(command_id for command_id, _ in commands))
    working = await alice.get()
    history = await alice.get(scope="history")
    assert working[0].content == "edited once"
    assert sum(1 for m in working if m.metadata.get("compressed") == "manual") == 1
    assert len(working) == 3  # the edited one, the summary, the last
    assert len([m for m in history if m.metadata.get("edit_of") == first]) == 1


async def test_a_forget_delivered_twice_erases_once(producer: Producer) -> None:
    alice = producer.rt.memory("alice")
    await alice.add({"role": "user", "content": "before"})
    await producer.xadd(Forget(), "forget-0001")
    await alice.add({"role": "user", "content": "after"})
    await producer.xadd(Forget(), "forget-0001")  # again, after a later add
    await producer.skipped("forget-0001")
    assert [m.content for m in await alice.get(scope="history")] == ["after"]
