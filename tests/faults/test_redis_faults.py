"""Redis faults that are quick to show: lost replies, cancellations, a small pool, eviction.

Every run that sends commands ends with the history checker: nothing lost,
nothing applied twice, nothing out of order.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc
import structlog
from redis.asyncio.client import Pipeline

from actors import AppConfig, MemoryRuntime, Message
from runtime import Runtime, RuntimeConfig, TransportError
from runtime.redis import EmbeddedRedis, RedisConfig, connect
from runtime.transports.redis import RedisTransport
from tests.faults.checker import Applied, History, observe_memory
from tests.redis.actors import Add, GetState
from tests.redis.test_transport import worker as runtime

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]


async def ledgers(rt: Runtime, agents: list[str]) -> dict[str, list[Applied]]:
    """Each ledger's applied tokens (its durable log), oldest first."""
    return {
        agent: [Applied(token) for token in (await rt.ref(agent).ask(GetState())).tokens]
        for agent in agents
    }


# -- lost replies to XADD ------------------------------------------------------------


class LossyPipeline(Pipeline):
    """A pipeline whose reply is lost, now and then, *after* Redis applied it."""

    faults: list[int]  # shared: [batches seen, replies lost, lose every n-th, most lost]

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        xadd = any(args[0] == "XADD" and b":stream" in _key(args) for args, _ in self.command_stack)
        result = await super().execute(raise_on_error)
        if xadd:
            self.faults[0] += 1
            seen, lost, every, most = self.faults
            if seen % every == 0 and lost < most:
                self.faults[1] += 1
                raise rexc.ConnectionError("simulated: the connection dropped before the reply")
        return result


def _key(args: tuple[Any, ...]) -> bytes:
    key = args[1] if len(args) > 1 else b""
    return key.encode() if isinstance(key, str) else bytes(key)


class LossyRedis(aioredis.Redis):
    """A client whose outbox XADDs sometimes lose their reply (see :class:`LossyPipeline`)."""

    faults: list[int]

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = LossyPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.faults = self.faults
        return pipe


async def test_xadds_whose_reply_was_lost_are_retried_without_duplicate_effects(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    lossy = LossyRedis.from_pool(connect(redis_config).connection_pool)
    lossy.faults = [0, 0, 2, 6]  # every second batch, six times
    history = History()
    agents = [f"ledger/lost{i}" for i in range(6)]
    try:
        async with (
            runtime(redis_client, redis_config) as worker,
            runtime(lossy, redis_config, worker=False) as client,
        ):
            for wave in range(8):
                for n in range(25):
                    agent = agents[n % len(agents)]
                    token = f"w{wave}-{n}"
                    history.sent(token, agent, token)
                    await client.ref(agent).tell(Add(token))
                await client.transport.flush()  # type: ignore[attr-defined]
            final = await ledgers(client, agents)
            duplicates = worker.transport.stats().duplicates  # type: ignore[attr-defined]
    finally:
        await lossy.aclose()
    assert lossy.faults[1] == 6, "the fault was injected"
    assert duplicates > 0, "the lost batches really were written twice"
    verdict = history.check(final)
    assert verdict.ok, str(verdict)
    assert verdict.applied == 200


# -- cancellations -------------------------------------------------------------------


async def test_cancelled_asks_under_load_never_get_another_requests_reply(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    config = redis_config.replace(pool_size=4)
    rng = random.Random(7)
    wrong: list[str] = []
    answered = uncancelled = 0
    async with runtime(redis_client, config), runtime(config.url or "", config, worker=False) as rt:

        async def one(i: int) -> None:
            nonlocal answered, uncancelled
            payload = f"request-{i}"
            with anyio.CancelScope() as scope:
                if rng.random() < 0.5:
                    # Cancelled somewhere between sending and the reply's arrival.
                    scope.deadline = anyio.current_time() + rng.uniform(0, 0.05)
                else:
                    uncancelled += 1
                reply = await rt.ref(f"echo/e{i % 16}").ask(payload)
                answered += 1
                if reply != payload:
                    wrong.append(f"{payload} got {reply!r}")

        async with anyio.create_task_group() as tg:
            for i in range(400):
                tg.start_soon(one, i)
        # Afterwards every ask is answered by its own reply.
        for i in range(50):
            assert await rt.ref(f"echo/e{i % 16}").ask(f"after-{i}") == f"after-{i}"
    assert wrong == []
    assert answered >= uncancelled > 100


async def test_cancelled_redis_calls_never_hand_a_reply_to_the_wrong_caller(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    config = redis_config.replace(pool_size=4)
    rng = random.Random(11)
    keys = [f"{config.prefix}:cancel:{i}" for i in range(64)]
    for key in keys:
        await redis_client.set(key, f"value of {key}".encode())
    wrong: list[str] = []
    cancelled = 0
    async with runtime(config.url or "", config, worker=False) as rt:
        client: Any = rt.transport.client  # type: ignore[attr-defined]

        async def get(key: str, cancel: bool) -> None:
            nonlocal cancelled
            with anyio.CancelScope() as scope:
                if cancel:
                    scope.deadline = anyio.current_time() + rng.uniform(0, 0.01)
                value = await client.get(key)
                if value != f"value of {key}".encode():
                    wrong.append(f"{key} got {value!r}")
            cancelled += scope.cancelled_caught

        for _ in range(5):
            async with anyio.create_task_group() as tg:
                for n in range(300):
                    tg.start_soon(get, keys[n % len(keys)], rng.random() < 0.5)
        # The connections the cancelled calls used are back in the pool: still in step.
        for key in keys:
            await get(key, cancel=False)
    assert wrong == []
    assert cancelled > 0  # 750 calls of a few ms each, queued for four connections


# -- a small connection pool ---------------------------------------------------------


async def test_many_actors_on_a_pool_of_four_connections_never_run_out(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    config = redis_config.replace(pool_size=4)
    app = AppConfig(runtime=RuntimeConfig(ask_timeout=30.0))
    history = History()
    agents = [f"a{i}" for i in range(60)]
    with structlog.testing.capture_logs() as logs:
        async with (
            MemoryRuntime(app, transport=RedisTransport(config.url, config)),
            MemoryRuntime(app, transport=RedisTransport(config.url, config, worker=False)) as rt,
        ):

            async def talk(agent: str) -> None:
                for n in range(3):
                    message = Message(role="user", content=f"{agent} says {n}")
                    await rt.memory(agent).add(history.message(agent, message, producer=agent))

            async with anyio.create_task_group() as tg:
                for agent in agents:
                    tg.start_soon(talk, agent)
            verdict = history.check(await observe_memory(rt, agents))
    assert verdict.ok, str(verdict)
    assert verdict.applied == 180
    trouble = [e for e in logs if "connection" in str(e).lower() and e["log_level"] != "debug"]
    assert trouble == []


# -- a Redis that may evict keys -------------------------------------------------------


async def test_a_redis_that_may_evict_keys_is_refused_at_start(tmp_path: Path) -> None:
    async with EmbeddedRedis(port=0) as server:
        admin = aioredis.Redis.from_url(server.url)
        try:
            await admin.config_set("maxmemory-policy", "allkeys-lru")
        finally:
            await admin.aclose()
        config = RedisConfig(url=server.url, socket_timeout=2.0)
        with pytest.raises(TransportError, match=r"maxmemory-policy is 'allkeys-lru'.*noeviction"):
            async with Runtime(transport=RedisTransport(server.url, config)):
                pass
        # And a worker started from the command line says so in one line.
        (tmp_path / "w.toml").write_text(f'[redis]\nurl = "{server.url}"\n')
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        result = await anyio.run_process(
            [sys.executable, "-m", "runtime.cli", "worker", "w.toml"],
            cwd=tmp_path,
            env=env,
            check=False,
        )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert len(err.splitlines()) == 1, err
    assert "maxmemory-policy is 'allkeys-lru'" in err
