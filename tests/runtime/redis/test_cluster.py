"""The Redis transport on a Redis Cluster: every multi-key step stays in one slot."""

from __future__ import annotations

import msgspec
import pytest

from actormem.runtime import Runtime, RuntimeConfig
from actormem.runtime.redis import Keys, RedisConfig, connect, shard_of
from actormem.runtime.redis.transport import RedisTransport
from tests.support.actors import Add, Erase, GetState, Pass, register
from tests.support.redis import delete_prefix
from tests.support.streams import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_asks_durable_state_and_dead_letters_work_on_a_cluster(
    redis_cluster_url: str, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, url=redis_cluster_url, cluster=True)
    keys = Keys(config.prefix)
    client = connect(config)
    try:
        async with Runtime(
            RuntimeConfig(ask_timeout=20), transport=RedisTransport(None, config)
        ) as rt:
            register(rt)
            for i in range(12):
                await rt.ref(f"ledger/c{i}").tell(Add(f"t{i}"))
            states = [await rt.ref(f"ledger/c{i}").ask(GetState()) for i in range(12)]
            assert [s.tokens for s in states] == [[f"t{i}"] for i in range(12)]
            # Tells and forwards sent by handlers, kept unsent with their commits
            # under each shard's hash tag until written.
            for i in range(8):
                await rt.ref(f"ledger/r{i}").tell(Pass(f"p{i}", "ledger/sink", forward=i % 2 == 1))
            await rt.ref("ledger/r7").ask(GetState())

            async def relayed() -> bool:
                state = await rt.ref("ledger/sink").ask(GetState())
                return sorted(state.tokens) == [f"p{i}" for i in range(8)]

            await eventually(relayed, "every tell and forward applied")
            await client.xadd(keys.stream(0), {b"e": b"not msgpack"})

            async def dead() -> bool:
                return int(await client.xlen(keys.dead_letters())) == 1

            await eventually(dead, "the bad entry is dead-lettered")
            # An erasure reaches every shard stream and the dead letters, node by node.
            assert await rt.ref("ledger/c11").ask(Erase()) == 0
        assert not await client.exists(
            keys.actor_log(shard_of("ledger/c11", config.shards), "ledger/c11")
        )
        # The state is stored under each shard's hash tag, on whichever node owns it.
        for i in range(11):
            address = f"ledger/c{i}"
            log = await client.lrange(
                keys.actor_log(shard_of(address, config.shards), address), 0, -1
            )
            assert log == [f"t{i}".encode()]
    finally:
        await delete_prefix(client, config.prefix)
        await client.aclose()
