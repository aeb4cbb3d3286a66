"""Wiring: a runtime with the domain actors registered, and typed handles on them."""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
import msgspec
import structlog

from actormem.actors.compression import (
    COMPRESSOR_KIND,
    CompressionOutcome,
    CompressRequest,
    ReloadArgumentsError,
    compressor_factory,
)
from actormem.actors.config import AppConfig, load_app_config
from actormem.actors.errors import ContextBudgetError, MemoryInputError
from actormem.actors.memory import commands
from actormem.actors.memory.actor import memory_factory
from actormem.actors.memory.expiry import MEMORY_KIND, IdleSweeper
from actormem.actors.memory.handle import MemoryHandle
from actormem.actors.metrics import ActorCounts, families
from actormem.actors.pool import commands as pool_commands
from actormem.actors.pool.actor import PoolActor
from actormem.actors.pool.commands import (
    FeedTick,
    GetPoolStats,
    PoolStats,
    merged_stats,
    pool_addresses,
)
from actormem.actors.pool.insights import InsightDelivery, InsightError, InsightSignatureError
from actormem.actors.recall.tools import ToolArgumentsError
from actormem.actors.retention import SessionFileError
from actormem.runtime import ConfigError, Runtime, Transport
from actormem.runtime.config import decode_config
from actormem.runtime.errors import ActormemError, first_error
from actormem.runtime.logging import configure_logging
from actormem.runtime.wire_types import declare_error_types, declare_message_types

if TYPE_CHECKING:
    from actormem.runtime.redis.transport import RedisTransport

log = structlog.get_logger("actormem.pool")

#: How long a feed tick waits for the pool's partitions by default: a day, so that
#: a busy pool slows a tick down and never fails it.
TICK_LIMIT_S: Final = 86_400.0

__all__ = (
    "CONFIG_ENV",
    "CONFIG_JSON_ENV",
    "MemoryRuntime",
    "register_actors",
    "worker_config",
    "worker_env",
    "worker_register",
)

#: The environment variable through which worker processes find the app's config file.
CONFIG_ENV = "ACTORMEM_CONFIG"
#: The environment variable carrying a whole app config as JSON (see :func:`worker_env`).
CONFIG_JSON_ENV = "ACTORMEM_CONFIG_JSON"


def _tagged(module: Any) -> list[type[msgspec.Struct]]:
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__struct_config__.tag is not None
        and value.__module__ == module.__name__
    ]


# Everything that crosses a Redis stream: the commands (tagged Structs) and the
# errors a remote asker should get back as themselves. Declaring loads no Redis
# module; the Redis codec takes them when it is made.
declare_message_types(
    *_tagged(commands),
    *_tagged(pool_commands),
    InsightDelivery,
    CompressRequest,
    CompressionOutcome,
)
declare_error_types(
    MemoryInputError,
    ContextBudgetError,
    InsightError,
    InsightSignatureError,
    ToolArgumentsError,
    ReloadArgumentsError,
    SessionFileError,
)


def _redis_transport(transport: Transport | None) -> RedisTransport | None:
    """``transport`` if it is a Redis transport, else None.

    A Redis transport exists only once its module is imported, so the check
    imports nothing.
    """
    module = sys.modules.get("actormem.runtime.redis.transport")
    if module is not None and isinstance(transport, module.RedisTransport):
        return cast("RedisTransport", transport)
    return None


def register_actors(runtime: Runtime, config: AppConfig) -> None:
    """Register every domain actor kind on ``runtime`` (workers call this too), and
    their counts with the runtime's metrics when it serves them."""
    counts = ActorCounts()
    ttl = config.retention.ttl
    sweeper = IdleSweeper(ttl) if ttl is not None else None
    runtime.register(MEMORY_KIND, memory_factory(config, sweeper))
    if sweeper is not None:
        # From the start: the agents due on the shards this process takes over
        # (their worker died) are found though none of them was served here yet.
        runtime.on_open(sweeper.run, runtime)
    runtime.register(
        COMPRESSOR_KIND, compressor_factory(config.compression, config.memory.encoding, counts)
    )
    store = config.retention.store() if config.retention.policy == "persistent" else None
    runtime.register("pool", PoolActor.factory(config.pool, store, counts))
    if runtime.metrics is not None:
        runtime.metrics.add(functools.partial(families, counts))


def worker_env(config: AppConfig) -> dict[str, str]:
    """The environment that gives worker processes ``config``: pass it as
    ``WorkerProcesses(..., env=worker_env(config))`` with
    ``actormem.actors.app.wiring:worker_register`` so that workers started from code
    run the config built in code (its compression,
    budgets, pool...), not the defaults."""
    return {CONFIG_JSON_ENV: msgspec.json.encode(config).decode()}


def worker_config() -> AppConfig:
    """The app config of a worker process: the JSON in ``ACTORMEM_CONFIG_JSON`` (see
    :func:`worker_env`), else the file named by ``ACTORMEM_CONFIG``, else the defaults.

    Raises:
        ConfigError: the JSON or the file is not a valid app config (named).
    """
    text = os.environ.get(CONFIG_JSON_ENV)
    if text:
        try:
            data = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"{CONFIG_JSON_ENV}: not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{CONFIG_JSON_ENV}: expected a JSON object (an app config)")
        return decode_config(data, AppConfig, source=CONFIG_JSON_ENV)
    return load_app_config(os.environ.get(CONFIG_ENV) or None)


def worker_register(runtime: Runtime) -> None:
    """``actormem.actors.app.wiring:worker_register``: what a worker process registers, with the app
    config of :func:`worker_config`."""
    register_actors(runtime, worker_config())


def transport_for(config: AppConfig, *, worker: bool = True) -> Transport | None:
    """The transport the config asks for (None: the in-process default)."""
    if config.runtime.transport == "redis":
        from actormem.runtime.redis.transport import RedisTransport

        return RedisTransport(config.redis.url, config.redis, worker=worker)
    return None


class MemoryRuntime(Runtime):
    """A :class:`runtime.Runtime` with the agent memory actors registered.

    Logging: the runtime writes nothing to stdout or stderr unless logging is
    configured. It is configured by the application (its own ``structlog.configure()``
    or stdlib handlers on the ``actormem`` logger), or by ``config`` when its
    ``logging`` is set, that is when the TOML file has a ``[logging]`` table or the
    code passes ``AppConfig(logging=LoggingConfig(...))``: then constructing the
    runtime calls :func:`actormem.runtime.logging.configure_logging` with that
    format and level, for the whole process (events on stderr). ``logging`` unset
    (the default) leaves the process's logging as it is.

    Args:
        config: the whole app config (defaults if omitted); with ``[metrics] port``
            set the runtime serves Prometheus metrics there while it is open, unless
            it is a client of workers (a ``RedisTransport`` with ``worker=False``).
        transport: how envelopes travel; by default the config's
            ``runtime.transport`` (in-process, or Redis streams with this process
            as a worker; an embedded Redis when ``[redis] url`` is unset).
        namespace: over Redis, keep every key of this runtime under
            ``<prefix>:<namespace>`` (see :meth:`RedisConfig.namespaced`), so
            runtimes of different namespaces on one server never see each other's
            agents, messages or workers; the same namespace later finds its data
            again. Workers serving it need the same (``[redis] prefix =
            "<prefix>:<namespace>"``). Ignored by the in-process transport.

    Raises:
        ValueError: ``namespace`` is not a valid name, or is given together with
            a ``transport`` (build that one from ``config.redis.namespaced(...)``).

    Example::

        async with MemoryRuntime() as rt:
            alice = rt.memory("alice")
            await alice.add({"role": "user", "content": "hi"})
    """

    def __init__(
        self,
        config: AppConfig | None = None,
        *,
        transport: Transport | None = None,
        namespace: str | None = None,
    ):
        config = config or AppConfig()
        if namespace is not None:
            if transport is not None:
                raise ValueError(
                    "namespace applies to the transport the runtime makes: pass a transport "
                    "built from config.redis.namespaced(namespace) instead"
                )
            config = msgspec.structs.replace(config, redis=config.redis.namespaced(namespace))
        self.app_config = config
        #: The namespace this runtime's keys live in (None: the config's prefix as is).
        self.namespace = namespace
        if self.app_config.logging is not None:
            configure_logging(self.app_config.logging.format, self.app_config.logging.level)
        transport = transport or transport_for(self.app_config)
        # A client of workers hosts no agents; the deployment's config names the
        # workers' port, which a client on a worker's host would find taken.
        redis = _redis_transport(transport)
        client = redis is not None and not redis.worker
        super().__init__(
            self.app_config.runtime,
            transport=transport,
            metrics=None if client else self.app_config.metrics,
        )
        register_actors(self, self.app_config)
        pool = self.app_config.pool
        if pool.delivery == "feed" and pool.feed.interval > 0 and not client:
            self.on_open(self._tick_feeds_every, pool.feed.interval)

    async def tick_feeds(self, timeout: float = TICK_LIMIT_S) -> int:
        """Deliver every subscriber's ranked feed now (``[pool] delivery = "feed"``);
        return how many insights went out (0 with a broadcast).

        A tick waits behind what each partition has to do first (the copies of a
        step's shares, say): a busy pool slows it down, up to ``timeout`` seconds.

        Raises:
            AskTimeoutError: a partition did not answer within ``timeout``.
        """
        sent: list[int] = []

        async def tick(address: str) -> None:
            sent.append(await self.ask(address, FeedTick(), timeout))

        try:
            async with anyio.create_task_group() as tg:
                for address in pool_addresses(self.app_config.pool.partitions):
                    tg.start_soon(tick, address)
        except BaseExceptionGroup as group:
            raise first_error(group) from None  # one error, not a group of them
        return sum(sent)

    async def pool_stats(self) -> PoolStats:
        """The insight pool's counters, over all its partitions."""
        parts = [
            await self.ask(a, GetPoolStats())
            for a in pool_addresses(self.app_config.pool.partitions)
        ]
        return merged_stats(parts)

    async def _tick_feeds_every(self, interval: float) -> None:
        while True:
            await anyio.sleep(interval)
            try:
                await self.tick_feeds()
            except ActormemError as exc:  # the next tick tries again
                log.warning("feed_tick_failed", reason=str(exc))

    def memory(self, agent: str, *, timeout: float | None = None) -> MemoryHandle:
        """Return the handle on ``agent``'s memory (its actor starts on first use)."""
        return MemoryHandle(self, agent, timeout)
