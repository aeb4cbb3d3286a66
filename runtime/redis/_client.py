"""Redis clients configured for the transport, and the error boundary.

One bounded, blocking connection pool per client (a caller waits for a free
connection instead of opening without limit); socket timeouts are the config's
``socket_timeout`` *plus* ``block_ms``, so a blocking ``XREADGROUP`` that waits
its full ``block_ms`` never trips a spurious timeout; idle connections are
health-checked before reuse. A server that may evict keys is refused: evicting a
stream or an agent's history would lose data silently.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final, TypeVar, cast

import anyio
import redis.asyncio as aioredis
import redis.exceptions as rexc
import structlog
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from runtime.errors import TransportError, TransportUnavailableError
from runtime.redis._server import EmbeddedRedis
from runtime.redis.config import RedisConfig

__all__ = (
    "blocking_twin",
    "check_server",
    "connect",
    "is_cluster",
    "open_client",
    "redis_errors",
    "retrying",
)

log = structlog.get_logger("actormem.redis")

T = TypeVar("T")

#: Seconds between PINGs on a connection taken from the pool after idling.
_HEALTH_CHECK_INTERVAL: Final = 15
#: Extra seconds granted to a blocking read on top of its BLOCK time.
_BLOCK_MARGIN: Final = 1.0


@contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py's errors raised inside the block into actormem's.

    Args:
        what: what was being done, for the message (``"XADD to am:{s3}:stream"``).

    Raises:
        TransportUnavailableError: connection refused, lost or timed out; auth failed.
        TransportError: any other error the server returned.
    """
    try:
        yield
    except (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, OSError) as exc:
        raise TransportUnavailableError(f"{what}: Redis unavailable: {exc}") from exc
    except rexc.AuthenticationError as exc:
        raise TransportUnavailableError(f"{what}: Redis refused the credentials") from exc
    except rexc.RedisError as exc:
        raise TransportError(f"{what}: Redis error: {exc}") from exc


def connect(
    config: RedisConfig, url: str | None = None, *, connections: int | None = None
) -> aioredis.Redis:
    """Make an asyncio client for ``url`` (else ``config.url``) with the config's limits.

    With ``config.cluster`` the client is a ``RedisCluster`` (the URL names any
    node). It is typed as ``Redis`` on purpose: it offers the same commands, and
    actormem sends only commands whose keys share one slot (hash tags).
    Nothing is sent until the first command; call :func:`check_server` to find out
    early whether the server is reachable and suitable.

    Args:
        config: the ``[redis]`` section.
        url: the server (``config.url`` by default).
        connections: the pool's bound (``config.pool_size`` by default; per node
            in a cluster).

    Raises:
        ValueError: no URL given and none in the config.
    """
    target = url or config.url
    if not target:
        raise ValueError("no Redis URL: pass one, or use open_client() for an embedded server")
    timeout = config.socket_timeout + config.block_ms / 1000 + _BLOCK_MARGIN
    options: dict[str, Any] = {
        "max_connections": connections or config.pool_size,
        "socket_timeout": timeout,
        "socket_connect_timeout": config.socket_timeout,
        "health_check_interval": _HEALTH_CHECK_INTERVAL,
        "password": config.password(),
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=2),
        "decode_responses": False,
    }
    if config.cluster:
        return cast(aioredis.Redis, RedisCluster.from_url(target, **options))
    pool = aioredis.BlockingConnectionPool.from_url(
        target,
        timeout=timeout,  # waiting for a free connection
        retry_on_error=[rexc.ConnectionError, rexc.TimeoutError],
        **options,
    )
    return aioredis.Redis.from_pool(pool)


def is_cluster(client: object) -> bool:
    """True when ``client`` is a Redis Cluster client (see :func:`connect`)."""
    return isinstance(client, RedisCluster)


async def check_server(client: aioredis.Redis) -> None:
    """Check that the server answers and never evicts keys.

    Raises:
        TransportUnavailableError: the server cannot be reached.
        TransportError: its ``maxmemory-policy`` is not ``noeviction``.
    """
    infos: dict[str, Any]
    with redis_errors("connecting to Redis"):
        if is_cluster(client):
            infos = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)
        else:
            infos = {"the server": await client.info("memory")}
    for node, info in infos.items():
        policy = info.get("maxmemory_policy", "noeviction")
        if isinstance(policy, bytes):
            policy = policy.decode()
        if policy != "noeviction":
            raise TransportError(
                f"Redis maxmemory-policy is {policy!r} on {node}: actormem needs "
                "'noeviction' (an evicted stream or agent history would be lost "
                "silently); run CONFIG SET maxmemory-policy noeviction"
            )


@asynccontextmanager
async def open_client(config: RedisConfig) -> AsyncIterator[aioredis.Redis]:
    """Yield a checked client for ``config.url``, or for a private embedded server.

    With ``config.url`` None, a ``redis-server`` is started on a Unix socket in a
    temp dir (AOF as ``config.aof`` says) and stopped when the block exits.

    Raises:
        TransportUnavailableError: unreachable server, or no binary to embed.
        TransportError: the server may evict keys.
    """
    if config.url:
        client = connect(config)
        try:
            await check_server(client)
            yield client
        finally:
            await client.aclose()
        return
    async with EmbeddedRedis(aof=config.aof) as server:
        client = connect(config, server.url)
        try:
            await check_server(client)
            yield client
        finally:
            await client.aclose()


#: First and longest pause between retries while Redis is unavailable.
_FIRST_BACKOFF: Final = 0.05
_MAX_BACKOFF: Final = 2.0


async def retrying(call: Callable[[], Awaitable[T]], *, what: str, retry_for: float) -> T:
    """Await ``call()`` again, with exponential backoff, while Redis is unavailable.

    ``call`` must translate redis errors itself (see :func:`redis_errors`).

    Args:
        call: makes the attempt.
        what: what is attempted, for the logs.
        retry_for: seconds to keep trying.

    Raises:
        TransportUnavailableError: still unavailable after ``retry_for`` seconds.
        TransportError: any other failure (not retried).
    """
    deadline = time.monotonic() + retry_for
    delay = _FIRST_BACKOFF
    failed = False
    while True:
        try:
            result = await call()
        except TransportUnavailableError as exc:
            if time.monotonic() + delay > deadline:
                raise
            if not failed:
                log.warning("redis_unavailable_retrying", what=what, reason=str(exc))
                failed = True
            await anyio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)
            continue
        if failed:
            log.info("redis_available_again", what=what)
        return result


def blocking_twin(client: aioredis.Redis, connections: int) -> aioredis.Redis:
    """A client to the same server with its own pool, for blocking reads.

    A cluster client is returned as it is (its pools are per node already).

    Blocking ``XREAD``/``XREADGROUP`` calls hold a connection for up to
    ``block_ms``; giving them a pool of their own keeps them from starving
    commits and sends of connections.
    """
    if is_cluster(client):
        return client
    pool = client.connection_pool
    twin = type(pool)(
        connection_class=pool.connection_class,
        max_connections=connections,
        **pool.connection_kwargs,
    )
    return aioredis.Redis.from_pool(twin)
