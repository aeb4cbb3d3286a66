"""Rounds: the calls of several tasks made in one turn go in one round trip."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc

from actormem.runtime.redis import RedisConfig, _rounds, _wire, connect
from tests.runtime.redis.test_wire import _Watched

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _rounds_of(config: RedisConfig) -> AsyncIterator[_rounds.Rounds]:
    """The rounds of a client of its own, closed after."""
    client = connect(config)
    try:
        yield _rounds.rounds(client)
        await _wire.wire(client).aclose()
    finally:
        await client.aclose()


async def test_announced_calls_made_in_one_turn_go_in_one_round_trip_each_with_its_own_reply(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    key = f"{redis_config.prefix}:k"
    await redis_client.set(key, "v")
    client = connect(redis_config)
    try:
        rounds = _rounds.rounds(client)
        replies: dict[str, Any] = {}

        async def call(name: str, *args: Any) -> None:
            rounds.arrived()
            try:
                replies[name] = await rounds.execute_command(*args)
            except rexc.ResponseError as exc:
                replies[name] = exc

        for _ in range(3):
            rounds.announce()
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "get", "GET", key)
            tg.start_soon(call, "incr", "INCR", key)  # an error reply: its call's only
            tg.start_soon(call, "append", "APPEND", key, "w")
        assert replies["get"] == b"v"
        assert isinstance(replies["incr"], rexc.ResponseError)
        assert replies["append"] == 2
        # One connection carried the three calls at once (one each would take three).
        assert len(client.connection_pool._in_use_connections) == 1
        await _wire.wire(client).aclose()
    finally:
        await client.aclose()


async def test_cancelling_the_caller_that_sends_a_round_fails_no_other_call(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    key = f"{redis_config.prefix}:k"
    async with _rounds_of(redis_config) as rounds:
        scopes: list[anyio.CancelScope] = []
        got: list[Any] = []

        async def first() -> None:
            rounds.arrived()
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await rounds.execute_command("SET", key, "first")

        async def second() -> None:
            rounds.arrived()
            scopes[0].cancel()  # while the round its call joins is still open
            got.append(await rounds.execute_command("INCRBY", f"{key}:n", 5))

        rounds.announce()
        rounds.announce()
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(second)
        assert got == [5]
        # The cancelled caller's call went with the round (it may run, as any call
        # cancelled while its reply is awaited; here it did).
        assert await redis_client.get(key) == b"first"


async def test_a_round_waits_one_turn_at_most_for_an_announced_task_that_makes_no_call(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    key = f"{redis_config.prefix}:k"
    async with _rounds_of(redis_config) as rounds:
        got: list[Any] = []

        async def caller() -> None:
            rounds.arrived()
            got.append(await rounds.execute_command("INCRBY", key, 2))

        async def idle() -> None:
            rounds.arrived()  # woken, and found nothing to call

        rounds.announce()
        rounds.announce()
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(caller)
                tg.start_soon(idle)
        assert got == [2]
        # Nothing is announced any more: a call goes at once, on its own.
        assert await rounds.execute_command("INCRBY", key, 3) == 5


async def test_the_calls_of_a_client_that_watches_its_calls_go_one_by_one_through_it(
    redis_config: RedisConfig,
) -> None:
    client = _Watched.from_pool(connect(redis_config).connection_pool)
    client.seen = []
    try:
        assert await _rounds.rounds(client).execute_command("PING") is True
        assert client.seen == [("PING",)]
    finally:
        await client.aclose()
