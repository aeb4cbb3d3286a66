"""A wire: a client's hot calls over connections kept out of its pool."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc

from actormem.runtime.redis import RedisConfig, connect
from actormem.runtime.redis._client import run_script
from actormem.runtime.redis._wire import Wire, wire

pytestmark = pytest.mark.anyio


async def test_calls_go_over_kept_connections_and_reconnect_after_a_failure(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    client = connect(redis_config)
    try:
        calls = wire(client)
        assert wire(client) is calls  # one per client
        assert await calls.execute_command("SET", f"{redis_config.prefix}:k", "v") == b"OK"
        assert await calls.execute_command("GET", f"{redis_config.prefix}:k") == b"v"
        (kept,) = client.connection_pool._in_use_connections  # taken once, kept
        name = f"{redis_config.prefix}-wire"
        await calls.execute_command("CLIENT", "SETNAME", name)
        listed = (await redis_client.execute_command("CLIENT", "LIST")).decode()
        (line,) = (line for line in listed.splitlines() if f"name={name}" in line)
        await redis_client.execute_command("CLIENT", "KILL", "ID", line.split()[0][3:])
        with pytest.raises(rexc.ConnectionError):
            await calls.execute_command("GET", f"{redis_config.prefix}:k")
        # The next call connects again, on the same kept connection.
        assert await calls.execute_command("GET", f"{redis_config.prefix}:k") == b"v"
        assert client.connection_pool._in_use_connections == {kept}
        # An error reply leaves the connection as it was.
        with pytest.raises(rexc.ResponseError):
            await calls.execute_command("INCR", f"{redis_config.prefix}:k")
        assert kept.is_connected
        await calls.aclose()
        assert not client.connection_pool._in_use_connections
    finally:
        await client.aclose()


async def test_a_script_the_server_forgot_is_loaded_again(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    client = connect(redis_config)
    try:
        calls = Wire(client, 1)
        await redis_client.script_flush()
        assert await run_script(calls, "return #ARGV", [], [1, 2, 3]) == 3
        await calls.aclose()
    finally:
        await client.aclose()


class _Watched(aioredis.Redis):
    seen: list[tuple[Any, ...]]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.seen.append(args)
        return await super().execute_command(*args, **options)


async def test_a_client_that_watches_its_calls_sees_them_all(redis_config: RedisConfig) -> None:
    client = _Watched.from_pool(connect(redis_config).connection_pool)
    client.seen = []
    try:
        calls = Wire(client, 4)
        assert await calls.execute_command("PING") is True  # redis-py's own parsing
        assert client.seen == [("PING",)]
    finally:
        await client.aclose()
