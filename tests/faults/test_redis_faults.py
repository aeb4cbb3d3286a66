"""Redis faults that are quick to show: lost replies, cancellations, a small pool, eviction.

Every run that sends commands ends with the history checker: nothing lost,
nothing applied twice, nothing out of order.
"""

from __future__ import annotations

import hashlib
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

from actormem.actors import AppConfig, MemoryRuntime, Message
from actormem.runtime import Runtime, RuntimeConfig, TransportError
from actormem.runtime.redis import EmbeddedRedis, RedisConfig, _scripts, connect
from actormem.runtime.redis.transport import RedisTransport
from tests.faults.report import Recorder
from tests.runtime.redis.test_transport import worker as runtime
from tests.support import ROOT
from tests.support.actors import Add, GetState
from tests.support.history import Applied, History, observe_memory
from tests.support.streams import eventually

pytestmark = [pytest.mark.faults, pytest.mark.anyio]


async def ledgers(rt: Runtime, agents: list[str]) -> dict[str, list[Applied]]:
    """Each ledger's applied tokens (its durable log), oldest first."""
    return {
        agent: [Applied(token) for token in (await rt.ref(agent).ask(GetState())).tokens]
        for agent in agents
    }


# -- lost replies to XADD ------------------------------------------------------------


class Faults:
    """Loses the reply of every ``every``-th matching call, ``most`` times at most."""

    def __init__(self, every: int, most: int) -> None:
        self.every, self.most = every, most
        self.seen = self.lost = 0

    def strike(self) -> None:
        """Count a call Redis has just applied; raise as if its reply never came."""
        self.seen += 1
        if self.seen % self.every == 0 and self.lost < self.most:
            self.lost += 1
            raise rexc.ConnectionError("simulated: the connection dropped before the reply")


#: The group-commit script's SHA1, as EVALSHA names it.
COMMIT_SHA = hashlib.sha1(_scripts.COMMIT.encode()).hexdigest()
#: The outbox's script (one call XADDs a batch to one stream).
XADD_SHA = hashlib.sha1(_scripts.XADD_MANY.encode()).hexdigest()

#: Commands that lose nothing.
NEVER = Faults(1, 0)


class LossyPipeline(Pipeline):
    """A pipeline whose outbox XADDs lose their reply now and then, *after* Redis applied them."""

    faults = NEVER

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        xadd = any(_is_shard_xadd(args) for args, _ in self.command_stack)
        result = await super().execute(raise_on_error)
        if xadd:
            self.faults.strike()
        return result


def _is_shard_xadd(args: tuple[Any, ...]) -> bool:
    """True for the outbox's XADDs to a shard stream (EVALSHA sha 1 stream ...)."""
    if args[0] != "EVALSHA" or args[1] != XADD_SHA:
        return False
    key = args[3]
    return b":stream" in (key.encode() if isinstance(key, str) else bytes(key))


class LossyRedis(aioredis.Redis):
    """A client that loses replies: of outbox XADDs, and of group commits (a Lua call)."""

    xadds = NEVER
    commits = NEVER

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = LossyPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.faults = self.xadds
        return pipe

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        result = await super().execute_command(*args, **options)
        if args[0] == "EVALSHA" and args[1] == COMMIT_SHA:  # the commit script
            self.commits.strike()
        elif _is_shard_xadd(args):  # a batch to one stream goes without a pipeline
            self.xadds.strike()
        return result


def lossy(config: RedisConfig, *, xadds: Faults = NEVER, commits: Faults = NEVER) -> LossyRedis:
    client = LossyRedis.from_pool(connect(config).connection_pool)
    client.xadds, client.commits = xadds, commits
    return client


async def send_waves(
    client: Runtime, history: History, agents: list[str], waves: int = 8, per_wave: int = 25
) -> dict[str, list[Applied]]:
    """Tell ``waves`` x ``per_wave`` ledger commands, flushing after each wave; the
    ledgers' final state."""
    for wave in range(waves):
        for n in range(per_wave):
            agent = agents[n % len(agents)]
            token = f"w{wave}-{n}"
            history.sent(token, agent, token)
            await client.ref(agent).tell(Add(token))
        await client.transport.flush()  # type: ignore[attr-defined]
    return await ledgers(client, agents)


@pytest.mark.parametrize("lost", ["xadd", "commit"])
async def test_calls_whose_reply_was_lost_are_retried_without_duplicate_effects(
    lost: str, redis_config: RedisConfig, redis_client: aioredis.Redis, fault_report: Recorder
) -> None:
    # The producer's outbox XADDs, or the worker's commits, lose their replies.
    if lost == "xadd":
        faults = Faults(every=2, most=6)
        flaky = lossy(redis_config, xadds=faults)
        worker_redis, client_redis = redis_client, flaky
    else:
        # A group commit carries many commands, and reads make none: the calls are
        # few, so every one loses its reply (retries included) until 4 are lost.
        faults = Faults(every=1, most=4)
        flaky = lossy(redis_config, commits=faults)
        worker_redis, client_redis = flaky, redis_client
    history = History()
    try:
        with structlog.testing.capture_logs() as logs:
            async with (
                runtime(worker_redis, redis_config) as worker,
                runtime(client_redis, redis_config, worker=False) as client,
            ):
                final = await send_waves(client, history, [f"ledger/{lost}{i}" for i in range(6)])
                duplicates = worker.transport.stats().duplicates  # type: ignore[attr-defined]
    finally:
        await flaky.aclose()
    assert faults.lost == faults.most, "the faults were injected"
    if lost == "xadd":
        assert duplicates > 0, "the lost batches really were written twice"
    else:
        # The retry found the commit already stored (by its command id): stored once.
        assert any(e["event"] == "commit_already_stored" for e in logs)
    verdict = history.check(final)
    what = "XADD" if lost == "xadd" else "group COMMIT"
    fault_report.row(
        f"replies to {what} calls lost (at the client)",
        f"1 worker, 6 agents, {faults.lost} replies lost",
        verdict,
    )
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
        transport: Any = rt.transport

        async def forgotten() -> bool:
            return bool(transport.stats().pending_asks == 0)

        # The cancelled asks' late replies arrived and freed their entries: no leak.
        await eventually(forgotten, "no ask is left pending")
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
    redis_config: RedisConfig, redis_client: aioredis.Redis, fault_report: Recorder
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
    fault_report.row(
        "60 agents at once on a pool of 4 connections", "2 runtimes, 60 agents", verdict
    )
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
            [sys.executable, "-m", "actormem.runtime.cli", "worker", "w.toml"],
            cwd=tmp_path,
            env=env,
            check=False,
        )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert len(err.splitlines()) == 1, err
    assert "maxmemory-policy is 'allkeys-lru'" in err
