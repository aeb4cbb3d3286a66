"""Commands are written in place, bounded by the socket timeout, as redis-py would
(its ``asyncio.wait_for`` ran every write as a task of its own on Python 3.11)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc

from actormem.runtime.redis import RedisConfig, connect

pytestmark = pytest.mark.anyio


async def test_a_command_makes_no_task_of_its_own(redis_client: aioredis.Redis) -> None:
    loop = asyncio.get_running_loop()
    made: list[Any] = []
    factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        made.append(coro)
        if factory is not None:
            return factory(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    await redis_client.ping()  # connected, health checked
    loop.set_task_factory(counting)
    try:
        for i in range(20):
            await redis_client.set(f"writes:{i}", i)
        assert await redis_client.get("writes:19") == b"19"
    finally:
        loop.set_task_factory(factory)
    assert made == []


@asynccontextmanager
async def deaf_server() -> AsyncIterator[int]:
    """A TCP server that accepts connections and never reads from them; its port."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_write_the_server_never_takes_times_out_and_drops_the_connection() -> None:
    async with deaf_server() as port:
        pool: Any = connect(RedisConfig(), f"redis://127.0.0.1:{port}").connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
        connection.socket_timeout = 0.2
        # Connected by hand: the deaf server would never answer the handshake.
        connection._reader, connection._writer = await asyncio.open_connection("127.0.0.1", port)
        assert connection.is_connected
        with pytest.raises(rexc.TimeoutError, match="Timeout writing to socket"):
            # Far more than the kernel buffers of a connection nobody reads.
            await connection.send_packed_command(b"x" * (256 << 20), check_health=False)
        assert not connection.is_connected
