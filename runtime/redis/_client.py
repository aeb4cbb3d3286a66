"""Redis clients configured for the transport, and the error boundary.

One bounded, blocking connection pool per client (a caller waits for a free
connection instead of opening without limit); socket timeouts are the config's
``socket_timeout`` *plus* ``block_ms``, so a blocking ``XREADGROUP`` that waits
its full ``block_ms`` never trips a spurious timeout; idle connections are
health-checked before reuse. A server that may evict keys is refused: evicting a
stream or an actor's log would lose data silently.

Access: the config's ACL ``username`` and the password from its ``password_env``
variable are sent on every new connection; with ``tls`` (or a ``rediss://`` url)
connections are TLS, checked against the config's CA, with its client
certificate if any. A failure to get in (wrong credentials, no password, a TLS
handshake refused, an ACL denial) becomes one line that names the cause.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import cache
from typing import Any, Final, cast

import hiredis
import redis.asyncio as aioredis
import redis.exceptions as rexc
import structlog
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from actormem.runtime.config import redact_url
from actormem.runtime.errors import TransportError, TransportUnavailableError
from actormem.runtime.redis._server import EmbeddedRedis
from actormem.runtime.redis._wire import Wire
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import Keys

__all__ = (
    "blocking_twin",
    "check_server",
    "connect",
    "eval_pipelined",
    "is_cluster",
    "open_client",
    "redis_errors",
    "run_script",
    "script_sha",
)

log = structlog.get_logger("actormem.redis")

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
    except rexc.AuthenticationError as exc:  # a ConnectionError: caught first
        raise TransportUnavailableError(f"{what}: Redis refused the credentials: {exc}") from exc
    except (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, OSError) as exc:
        raise TransportUnavailableError(f"{what}: Redis unavailable: {_reason(exc)}") from exc
    except rexc.NoPermissionError as exc:
        raise TransportError(f"{what}: Redis denied it to this ACL user: {exc}") from exc
    except rexc.RedisError as exc:
        raise TransportError(f"{what}: Redis error: {exc}") from exc


def _tls_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind ``exc`` (redis-py wraps it in a ConnectionError), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _reason(exc: BaseException) -> str:
    """Why a connection failed, in words (a TLS failure says so)."""
    tls = _tls_error(exc)
    if tls is None:
        return str(exc)
    detail = getattr(tls, "verify_message", None) or tls.reason or str(tls)
    return f"TLS handshake failed: {detail}"


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
    if config.use_tls:
        if target.startswith("unix:"):
            raise ValueError(
                f"redis.tls needs a redis:// or rediss:// url, not {redact_url(target)}"
            )
        # The scheme is what makes redis-py's pools and cluster client use TLS.
        target = "rediss:" + target.partition(":")[2]
    timeout = config.socket_timeout + config.block_ms / 1000 + _BLOCK_MARGIN
    options: dict[str, Any] = {
        "max_connections": connections or config.pool_size,
        "socket_timeout": timeout,
        "socket_connect_timeout": config.socket_timeout,
        "health_check_interval": _HEALTH_CHECK_INTERVAL,
        "username": config.username,
        "password": config.password(),
        **config.tls_options(),
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
    pool.connection_class = _hiredis_packing(pool.connection_class)
    return aioredis.Redis.from_pool(pool)


class _HiredisPacking:
    """Packs commands with hiredis (C) rather than redis-py's asyncio Python loop,
    which cost a fifth of a worker's time (an XADD per command, long EVALSHAs), and
    bounds each write in place rather than as a task of its own."""

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        """redis-py's own, but for the timeout: it writes through ``asyncio.wait_for``,
        which on Python 3.11 runs the write as a new task, so every command costs a
        task and two more turns of the event loop (a busy loop's turn takes
        milliseconds). ``asyncio.timeout`` bounds the same write where it runs, with
        the same errors and the same disconnect on failure, and only when the write
        could not go to the socket at once (only then may it wait)."""
        conn: Any = self
        if not conn.socket_timeout:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        if not conn.is_connected:
            # (redis-py < 6 has no connect_check_health; its connect checks nothing.)
            connect = getattr(conn, "connect_check_health", None)
            await (connect(check_health=False) if connect is not None else conn.connect())
        if check_health:
            await conn.check_health()
        if isinstance(command, str):
            command = command.encode()
        if isinstance(command, bytes):
            command = [command]
        writer = conn._writer
        try:
            writer.writelines(command)
            if writer.transport.get_write_buffer_size():
                # Part of it waits in the buffer: the drain may wait for the socket.
                async with asyncio.timeout(conn.socket_timeout):
                    await writer.drain()
            else:
                # All of it went to the socket at once (the usual case): the drain
                # only raises what the connection met, and cannot wait, so the timer
                # a timeout would start and cancel again is spared.
                await writer.drain()
        except TimeoutError:
            await conn.disconnect(nowait=True)
            raise rexc.TimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            await conn.disconnect(nowait=True)
            number, message = ("UNKNOWN", exc.args[0]) if len(exc.args) == 1 else exc.args[:2]
            raise rexc.ConnectionError(
                f"Error {number} while writing to socket. {message}."
            ) from exc
        except BaseException:
            # A write cut off halfway leaves the connection unusable.
            await conn.disconnect(nowait=True)
            raise

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if (isinstance(first, bytes) and b" " not in first) or (
            isinstance(first, str) and " " not in first
        ):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # an argument hiredis does not take: redis-py says what is wrong
        return super().pack_command(*args)  # type: ignore[misc, no-any-return]


_PACKING: dict[type, type] = {}


def _hiredis_packing(cls: type[Any]) -> type[Any]:
    """``cls`` (a redis-py asyncio connection class) packing with hiredis, once per class."""
    if issubclass(cls, _HiredisPacking):
        return cls
    fast = _PACKING.get(cls)
    if fast is None:
        fast = _PACKING[cls] = type(f"Hiredis{cls.__name__}", (_HiredisPacking, cls), {})
    return fast


def is_cluster(client: object) -> bool:
    """True when ``client`` is a Redis Cluster client (see :func:`connect`)."""
    return isinstance(client, RedisCluster)


async def check_server(client: aioredis.Redis, config: RedisConfig | None = None) -> None:
    """Check that the server lets this client in, answers, and never evicts keys.

    The eviction policy is read with ``INFO memory``; an ACL user denied ``INFO``
    gets a warning (``eviction_policy_unchecked``) instead of the check.

    Args:
        client: a client from :func:`connect`.
        config: the config it was made from; with it, a failure to get in says
            which setting to look at (the user, ``password_env``, the TLS files).

    With ``config``, a key under its prefix is touched too, so an ACL user who
    may not use that prefix is stopped here, in one line.

    Raises:
        TransportUnavailableError: the server cannot be reached, or refuses the
            credentials or the TLS handshake.
        TransportError: its ``maxmemory-policy`` is not ``noeviction``, or the
            ACL user may not touch keys under the prefix.
    """
    try:
        with redis_errors("connecting to Redis"):
            infos = await _memory_infos(client)
            if config is not None:
                await _probe_prefix(client, config)
    except TransportError as exc:
        cause = exc.__cause__
        if config is None or not isinstance(cause, rexc.RedisError):
            raise
        raise type(exc)(f"connecting to Redis: {_access_problem(cause, config)}") from cause
    for node, info in infos.items():
        policy = info.get("maxmemory_policy", "noeviction")
        if isinstance(policy, bytes):
            policy = policy.decode()
        if policy != "noeviction":
            raise TransportError(
                f"Redis maxmemory-policy is {policy!r} on {node}: actormem needs "
                "'noeviction' (an evicted stream or actor log would be lost "
                "silently); run CONFIG SET maxmemory-policy noeviction"
            )


async def _memory_infos(client: aioredis.Redis) -> dict[str, Any]:
    """``INFO memory`` of every primary, by node; empty if the ACL denies INFO."""
    try:
        if is_cluster(client):
            infos: dict[str, Any] = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)
            return infos
        return {"the server": await client.info("memory")}
    except rexc.NoPermissionError as exc:
        # NOPERM means the login worked: only INFO is not allowed to this user.
        log.warning("eviction_policy_unchecked", reason=str(exc))
        return {}


async def _probe_prefix(client: aioredis.Redis, config: RedisConfig) -> None:
    """Touch a key under the prefix, so an ACL that forbids it fails here, once,
    and not in every background loop later."""
    await client.exists(Keys(config.prefix).workers())


def _access_problem(exc: rexc.RedisError, config: RedisConfig) -> str:
    """A failed first contact in words, with the setting most likely to blame."""
    if isinstance(exc, rexc.NoPermissionError):
        return (
            f"the ACL user {config.user()!r} may not use keys under the prefix "
            f"{config.prefix!r} (redis.prefix; the server said: {exc})"
        )
    if isinstance(exc, rexc.AuthenticationError):
        if "username-password" not in str(exc) and config.password() is None:
            return (
                "Redis requires a password and none was given: set the environment "
                f"variable {config.password_env} (redis.password_env)"
            )
        return (
            f"Redis refused the credentials for user {config.user()!r}: a wrong "
            f"password in {config.password_env}, or an unknown or disabled user ({exc})"
        )
    tls = _tls_error(exc)
    if tls is not None:
        return f"{_reason(exc)}: {_tls_hint(tls, config)}"
    if isinstance(exc, rexc.ConnectionError) and "reset by peer" in str(exc):
        # TLS 1.3 may finish the client's side of the handshake before the server
        # rejects the client's certificate: then the rejection is a reset.
        if not config.use_tls:
            hint = "a TLS-only server resets plain connections: set redis.tls = true"
        else:
            hint = _client_certificate_hint(config)
        return f"Redis unavailable: {exc} (if it is up: {hint})"
    if isinstance(exc, rexc.TimeoutError) and config.use_tls:
        return f"Redis unavailable: {exc} (if it is up: does that port speak TLS?)"
    return f"Redis unavailable: {_reason(exc)}"


def _tls_hint(error: ssl.SSLError, config: RedisConfig) -> str:
    """Which TLS setting a failed handshake points at."""
    reason = (error.reason or "").upper()
    if isinstance(error, ssl.SSLCertVerificationError):
        if "mismatch" in str(error).lower():
            return "the certificate does not name the url's host (see redis.tls_check_hostname)"
        if config.tls_ca_file is None:
            return "set redis.tls_ca_file to the CA that signed the server's certificate"
        return f"the server's certificate is not signed by the CA in {config.tls_ca_file}"
    if "CERTIFICATE_REQUIRED" in reason:
        return _NO_CLIENT_CERTIFICATE
    return _client_certificate_hint(config)


_NO_CLIENT_CERTIFICATE: Final = (
    "the server wants a client certificate (tls-auth-clients): set "
    "redis.tls_cert_file and redis.tls_key_file"
)


def _client_certificate_hint(config: RedisConfig) -> str:
    """What to do about a server that rejects this client's certificate (or its lack)."""
    if config.tls_cert_file is None:
        return _NO_CLIENT_CERTIFICATE
    return f"the server does not accept the client certificate {config.tls_cert_file}"


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
            await check_server(client, config)
            yield client
        finally:
            await client.aclose()
        return
    async with EmbeddedRedis(aof=config.aof) as server:
        client = connect(config, server.url)
        try:
            await check_server(client, config)
            yield client
        finally:
            await client.aclose()


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
    blocking = aioredis.Redis.from_pool(twin)
    # Its XREADGROUP replies stay as the server sent them: redis-py would turn every
    # entry's fields into a dict, a cost paid per command read (see _intake).
    blocking.set_response_callback("XREADGROUP", _unparsed)
    return blocking


def _unparsed(response: Any, **_options: Any) -> Any:
    return response


@cache
def script_sha(script: str) -> str:
    """The SHA1 Redis names ``script`` by (EVALSHA)."""
    return hashlib.sha1(script.encode()).hexdigest()


async def run_script(
    client: aioredis.Redis | Wire, script: str, keys: list[Any], args: list[Any]
) -> Any:
    """Run ``script`` once, by EVALSHA (loading it if the server does not have it).

    Leaner than redis-py's ``Script`` objects, which copy every argument twice and
    test the client against a ``Protocol`` class (slow) on each call: a group commit
    carries thousands of arguments.

    Raises:
        redis.exceptions.RedisError: the call failed.
    """
    sha = script_sha(script)
    one: Any = client
    try:
        return await one.execute_command("EVALSHA", sha, len(keys), *keys, *args)
    except rexc.NoScriptError:
        await client.script_load(script)
        return await one.execute_command("EVALSHA", sha, len(keys), *keys, *args)


async def eval_pipelined(
    client: aioredis.Redis | Wire,
    script: str,
    calls: list[tuple[list[Any], list[Any]]],
    then: list[tuple[Any, ...]] | None = None,
) -> list[Any]:
    """Run ``script`` once per ``(keys, args)`` of ``calls``, all in one pipeline (one
    round trip per node), with the commands ``then`` after them in the same pipeline;
    the results in order, then the replies to ``then`` as the server sent them (an
    error reply as its exception, not raised).

    By EVALSHA, as every script of the transport (its ACL rules allow ``evalsha`` and
    ``script|load``, not ``eval``). Calls the server did not run for want of the
    script (a restarted server forgot it) are run again once it is loaded (the
    commands ``then`` are not: their caller reads their replies). Through a
    :class:`~actormem.runtime.redis._wire.Wire` the calls skip redis-py's pipeline
    (its pool, retry and parsing), and are not retried when the connection fails.

    Raises:
        redis.exceptions.RedisError: a call of ``script`` failed, or the connection
            did (the others, and the commands ``then``, may have run).
    """
    sha = script_sha(script)
    if len(calls) == 1 and not then:
        # One call needs no pipeline (redis-py's costs a task to give its connection back).
        return [await run_script(client, script, *calls[0])]

    async def run(indices: list[int], after: list[tuple[Any, ...]]) -> list[Any]:
        commands = [
            ("EVALSHA", sha, len(keys), *keys, *args)
            for keys, args in map(calls.__getitem__, indices)
        ]
        commands += after
        if isinstance(client, Wire):
            return await client.pipeline(commands)
        async with client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))

    results = await run(list(range(len(calls))), then or [])
    ran = results[: len(calls)]
    missing = [i for i, result in enumerate(ran) if isinstance(result, rexc.NoScriptError)]
    if missing:
        await client.script_load(script)
        for i, result in zip(missing, await run(missing, []), strict=True):
            results[i] = result
    for result in results[: len(calls)]:  # (those run again included)
        if isinstance(result, Exception):
            raise result
    return results
