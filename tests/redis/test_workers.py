"""Worker processes against one Redis: sharing, crashes, restarts, stale owners."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from runtime import HandlerError, Runtime, RuntimeConfig
from runtime.errors import ConfigError, TransportUnavailableError
from runtime.redis import (
    EmbeddedRedis,
    Keys,
    RedisConfig,
    connect,
    default_codec,
    free_port,
    shard_of,
)
from runtime.transports.redis import RedisTransport
from runtime.worker import WorkerProcesses, load_register
from tests.redis.actors import Add, Crash, GetState
from tests.redis.helpers import eventually

pytestmark = pytest.mark.anyio

REGISTER = "tests.redis.actors:register"
LEDGERS = [f"ledger/l{i}" for i in range(12)]


@asynccontextmanager
async def client_runtime(config: RedisConfig) -> AsyncIterator[Runtime]:
    """A runtime that only sends and asks (the simulation's driver, say)."""
    transport = RedisTransport(None, config, worker=False)
    async with Runtime(RuntimeConfig(ask_timeout=30.0), transport=transport) as rt:
        yield rt


async def stored_tokens(client: aioredis.Redis, config: RedisConfig) -> dict[str, list[str]]:
    """Every ledger's stored log, read straight from Redis."""
    keys = Keys(config.prefix)
    out = {}
    for address in LEDGERS:
        log = await client.lrange(keys.agent_log(shard_of(address, config.shards), address), 0, -1)
        out[address] = [t.decode() for t in log]
    return out


async def send_commands(rt: Runtime, count: int, delay: float = 0.0) -> dict[str, list[str]]:
    """Tell ``count`` Adds spread over the ledgers; return what each should hold."""
    expected: dict[str, list[str]] = {a: [] for a in LEDGERS}
    for i in range(count):
        address = LEDGERS[i % len(LEDGERS)]
        token = f"cmd{i:04d}"
        expected[address].append(token)
        await rt.ref(address).tell(Add(token, delay=delay))
    return expected


def exactly_once(stored: dict[str, list[str]], expected: dict[str, list[str]]) -> bool:
    # Per-agent order is kept too: a ledger's log is its commands in send order.
    return stored == expected


def owners(workers: WorkerProcesses) -> Callable[[], Awaitable[set[str]]]:
    async def read() -> set[str]:
        client = connect(workers.redis)
        keys = Keys(workers.redis.prefix)
        try:
            values = [await client.get(keys.lease(s)) for s in range(workers.redis.shards)]
        finally:
            await client.aclose()
        return {v.decode().partition(":")[2] for v in values if v}

    return read


async def busy_pair(
    workers: WorkerProcesses, rt: Runtime, client: aioredis.Redis, count: int
) -> dict[str, list[str]]:
    """Wait until both workers own shards, send ``count`` slow commands, and
    return once the workers are part-way through them."""
    read_owners = owners(workers)

    async def shared() -> bool:
        return await read_owners() == set(workers.ids)

    await eventually(shared, "both workers own shards")
    expected = await send_commands(rt, count, delay=0.02)

    async def some_done() -> bool:
        stored = await stored_tokens(client, workers.redis)
        return sum(map(len, stored.values())) >= count // 6

    await eventually(some_done, "the workers are busy")
    return expected


async def test_three_workers_share_the_shards_and_apply_each_command_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, shards=6)
    async with WorkerProcesses(3, config, REGISTER) as workers, client_runtime(config) as rt:
        read_owners = owners(workers)

        async def shared() -> bool:
            return await read_owners() == set(workers.ids)

        await eventually(shared, "every worker owns some shards")
        expected = await send_commands(rt, 120)

        async def done() -> bool:
            return exactly_once(await stored_tokens(redis_client, config), expected)

        await eventually(done, "every command applied once")
        state = await rt.ref(LEDGERS[0]).ask(GetState())
        assert state.tokens == expected[LEDGERS[0]]


async def test_a_killed_worker_s_shards_are_taken_over_without_loss_or_repeats(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, shards=4)
    async with WorkerProcesses(2, config, REGISTER) as workers, client_runtime(config) as rt:
        expected = await busy_pair(workers, rt, redis_client, 240)
        workers.kill(0)  # kill -9, mid-run: its leases expire, nothing is released
        read_owners = owners(workers)

        async def taken_over() -> bool:
            return await read_owners() == {workers.ids[1]}

        await eventually(taken_over, "the survivor owns every shard")

        async def done() -> bool:
            return exactly_once(await stored_tokens(redis_client, config), expected)

        await eventually(done, "every command applied once, none lost")
    # The survivor really took work over from the dead worker's pending entries.
    lines = workers.log_path(1).read_text().splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert any(e["event"] == "entry_taken_over" and e["previous"] == workers.ids[0] for e in events)


async def test_a_paused_stale_owner_cannot_overwrite_the_new_owner_s_state(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, shards=2)
    async with WorkerProcesses(2, config, REGISTER) as workers, client_runtime(config) as rt:
        expected = await busy_pair(workers, rt, redis_client, 120)
        workers.signal(0, signal.SIGSTOP)  # paused mid-command, holding its leases
        read_owners = owners(workers)

        async def taken_over() -> bool:
            return await read_owners() == {workers.ids[1]}

        await eventually(taken_over, "the other worker takes the shards over")
        workers.signal(0, signal.SIGCONT)  # it wakes up believing it still owns them

        async def done() -> bool:
            return exactly_once(await stored_tokens(redis_client, config), expected)

        await eventually(done, "every command applied once despite the stale owner")
        await anyio.sleep(1.0)  # give a stale write every chance to land
        assert exactly_once(await stored_tokens(redis_client, config), expected)
    log = workers.log_path(0).read_text()
    assert "write_fenced_off" in log or "shard_lease_lost" in log


async def test_workers_carry_on_after_redis_restarts_with_aof(
    tmp_path: Path, redis_config: RedisConfig
) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}"
    config = msgspec.structs.replace(
        redis_config, url=url, shards=2, retry_for=30.0, socket_timeout=1.0
    )
    server = EmbeddedRedis(aof=True, port=port, directory=tmp_path)
    await server.start()
    try:
        async with WorkerProcesses(1, config, REGISTER), client_runtime(config) as rt:
            first = await send_commands(rt, 30)
            client = connect(config)
            try:

                async def first_done() -> bool:
                    return exactly_once(await stored_tokens(client, config), first)

                await eventually(first_done, "the first batch is applied")
            finally:
                await client.aclose()
            await server.aclose()  # Redis goes away mid-run...
            more = {a: [f"late{i}-{a}"] for i, a in enumerate(LEDGERS)}
            for address, tokens in more.items():
                await rt.ref(address).tell(Add(tokens[0]))  # queued meanwhile
            server = EmbeddedRedis(aof=True, port=port, directory=tmp_path)
            await server.start()  # ...and comes back with its AOF
            transport = rt.transport
            assert isinstance(transport, RedisTransport)
            await transport.flush()
            expected = {a: first[a] + more[a] for a in LEDGERS}
            client = connect(config)
            try:

                async def all_done() -> bool:
                    return exactly_once(await stored_tokens(client, config), expected)

                await eventually(all_done, "commands after the restart are applied once")
            finally:
                await client.aclose()
    finally:
        await server.aclose()


async def test_a_poison_pill_that_kills_its_workers_is_dead_lettered_and_answered(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, max_deliveries=1)
    async with WorkerProcesses(1, config, REGISTER) as workers, client_runtime(config) as rt:
        async with anyio.create_task_group() as tg:
            outcome: list[BaseException] = []

            async def ask_crash() -> None:
                try:
                    await rt.ref("ledger/poison").ask(Crash())
                except HandlerError as exc:
                    outcome.append(exc)

            tg.start_soon(ask_crash)

            async def died() -> bool:
                return workers.pid(0) is None

            await eventually(died, "the pill kills the worker")
            workers.start(0)  # a new worker finds the pill pending, delivered once already
        [error] = outcome
        assert "delivered 1 times without being handled" in str(error)
        assert await rt.ref("ledger/poison").ask(Add("after")) == 1
    letters = await redis_client.xrange(Keys(config.prefix).dead_letters())
    assert [default_codec.decode_envelope(f[b"e"]).body for _, f in letters] == [Crash()]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must be 'module:function'"),
        ("no_such_module_xyz:register", "cannot import 'no_such_module_xyz'"),
        ("tests.redis.actors:nothing_here", "has no function 'nothing_here'"),
    ],
)
def test_a_bad_register_spec_is_a_config_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_register(spec)


async def test_a_worker_that_cannot_start_says_why(redis_config: RedisConfig) -> None:
    with pytest.raises(TransportUnavailableError, match="has no function 'nope'"):
        async with WorkerProcesses(1, redis_config, "tests.redis.actors:nope"):
            pass


def test_workers_need_a_shared_redis_url() -> None:
    with pytest.raises(ValueError, match="need a shared Redis"):
        WorkerProcesses(2, RedisConfig(url=None), REGISTER)


async def test_workers_get_the_environment_they_are_given(
    redis_config: RedisConfig,
) -> None:
    env = {"TEST_LEDGER_KIND": "books"}
    spec = "tests.redis.actors:register_named"
    async with WorkerProcesses(1, redis_config, spec, env=env), client_runtime(redis_config) as rt:
        assert await rt.ref("books/b").ask(Add("x", 5)) == 5


def test_a_worker_command_with_an_unreachable_redis_prints_one_line() -> None:
    redis = RedisConfig(url=f"redis://127.0.0.1:{free_port()}", socket_timeout=0.3)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtime.worker",
            "--register",
            REGISTER,
            "--redis-json",
            msgspec.json.encode(redis).decode(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("actormem worker: error: connecting to Redis: Redis unavailable")


async def test_workers_started_apart_agree_on_vouchers_with_no_shared_secret(
    redis_config: RedisConfig,
) -> None:
    # No pool key and no ACTORMEM_VOUCHER_KEY: over Redis the deployment's key
    # prefix keys the vouchers, so an agent's memory on one worker vouches for a
    # share that the pool on another worker accepts.
    from actors import AppConfig, MemoryRuntime
    from actors._vouch import VOUCHER_KEY_ENV

    config = msgspec.structs.replace(redis_config, shards=4)
    env = {VOUCHER_KEY_ENV: ""}
    async with WorkerProcesses(2, config, "actors.app:worker_register", env=env) as workers:
        read_owners = owners(workers)

        async def shared() -> bool:
            return await read_owners() == set(workers.ids)

        await eventually(shared, "both workers own shards")
        client = connect(config)
        keys = Keys(config.prefix)
        try:
            lease = {
                s: (await client.get(keys.lease(s)) or b"").decode().partition(":")[2]
                for s in range(config.shards)
            }
        finally:
            await client.aclose()
        pool_owner = lease[shard_of("pool/main", config.shards)]
        names = (f"agent{i}" for i in range(1000))
        sharer = next(n for n in names if lease[shard_of(f"memory/{n}", 4)] != pool_owner)
        app = AppConfig(redis=config)
        transport = RedisTransport(None, config, worker=False)
        async with MemoryRuntime(app, transport=transport) as rt:
            listener = rt.memory("listener")
            await listener.subscribe("news")
            await rt.memory(sharer).share("the bridge is closed", topic="news")

            async def arrived() -> bool:
                return any(i.source == sharer for i in await listener.held_insights())

            await eventually(arrived, "the share reaches the subscriber")
