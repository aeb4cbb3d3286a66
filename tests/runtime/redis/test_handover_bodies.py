"""What an actor receives when an ask is handed over in memory: the body a stream
entry would give it (decoded from the bytes the stream would carry), never the
asker's own objects, and a body the stream would refuse is refused the same way."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from actormem.runtime.errors import MessageDecodeError
from actormem.runtime.redis import RedisConfig
from tests.runtime.redis.test_transport import worker, worker_and_client
from tests.support.actors import Add, GetState
from tests.support.handover import handing_over, redis_transport, warmed_ledger

pytestmark = pytest.mark.anyio


async def test_a_handed_over_body_shares_nothing_mutable_with_the_askers(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "echo/copies"
    async with worker(redis_client, redis_config) as rt:
        transport = await handing_over(rt, address, lambda _: "warm")
        before = transport.stats().handed_over
        inner, mapping = ["b", "c"], {"k": ["v"]}
        body = ["a", inner, mapping]
        # The echo answers with the very object it received (the reply is resolved
        # in memory, not encoded): what the actor got, the asker sees.
        received = await rt.ref(address).ask(body)
        assert transport.stats().handed_over == before + 1
    assert received == body
    assert received is not body
    assert received[1] is not inner
    assert received[2] is not mapping
    assert received[2]["k"] is not mapping["k"]
    inner.append("changed by the asker")
    assert received[1] == ["b", "c"]


async def test_a_handed_over_body_the_stream_would_refuse_is_refused_as_from_the_stream(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/refused-body"
    bad = Add(3)  # type: ignore[arg-type]  # msgspec checks field types on decode only
    async with worker_and_client(redis_client, redis_config) as (rt, client):
        warm = await warmed_ledger(rt, address)
        transport = redis_transport(rt)
        before = transport.stats()
        with pytest.raises(MessageDecodeError) as handed:
            await rt.ref(address).ask(bad)
        after = transport.stats()
        assert after.handed_over == before.handed_over  # it went through the stream
        assert after.dead_lettered == before.dead_lettered + 1
        with pytest.raises(MessageDecodeError) as streamed:  # asked from another client
            await client.ref(address).ask(bad)
        state = await rt.ref(address).ask(GetState())
    assert state.tokens == warm  # neither changed anything
    for error in (handed.value, streamed.value):
        assert "invalid body: Expected `str`, got `int` - at `$.token`" in str(error)
