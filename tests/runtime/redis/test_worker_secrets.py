"""A password in the Redis URL never reaches a worker's command line or its logs.

The test Redis gets an ACL user with a password for each test (a real login, so a
worker that did not get the password could not serve); the URL carries it.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis
import structlog

from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis.worker import REDIS_JSON_ENV, WorkerProcesses, run_worker
from tests.support.actors import Add, GetState, register
from tests.support.streams import client_runtime, eventually

pytestmark = pytest.mark.anyio

REGISTER = "tests.support.actors:register"


@pytest.fixture
async def password_config(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> AsyncIterator[tuple[RedisConfig, str]]:
    """``redis_config`` logging in as a fresh ACL user whose password is in the URL."""
    user, password = f"u{secrets.token_hex(4)}", f"pw-{secrets.token_hex(12)}"
    await redis_client.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    host = (redis_config.url or "").partition("://")[2]
    try:
        yield redis_config.replace(url=f"redis://{user}:{password}@{host}"), password
    finally:
        await redis_client.execute_command("ACL", "DELUSER", user)


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.slow
async def test_worker_processes_get_the_password_from_their_environment_only(
    password_config: tuple[RedisConfig, str],
) -> None:
    config, password = password_config
    async with WorkerProcesses(2, config, REGISTER) as workers:
        pids = [workers.pid(i) for i in range(2)]
        assert all(pids)
        for pid in pids:
            assert pid is not None
            cmdline = _cmdline(pid)
            assert "actormem.runtime.redis.worker" in cmdline
            assert password not in cmdline
            # The environment is readable by its owner alone.
            mode = os.stat(f"/proc/{pid}/environ").st_mode
            assert not mode & (stat.S_IRWXG | stat.S_IRWXO)
        # The workers logged in with it: they serve.
        async with client_runtime(config) as rt:
            await rt.ref("ledger/a").tell(Add("one"))
            state = await rt.ref("ledger/a").ask(GetState(), timeout=30)
            assert state.tokens == ["one"]
    for i in range(2):
        text = workers.log_path(i).read_text()
        assert "worker_started" in text and password not in text


async def test_a_worker_logs_no_secret(password_config: tuple[RedisConfig, str]) -> None:
    config, password = password_config
    stop = anyio.Event()
    with structlog.testing.capture_logs() as events:

        async def started() -> bool:
            return any(e["event"] == "worker_started" for e in events)

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: run_worker(config, register, stop=stop))
            await eventually(started, "the worker started")
            stop.set()
    assert any(e["event"] == "worker_stopped" for e in events)
    assert password not in repr(events)


def test_the_worker_module_reads_its_redis_section_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from actormem.runtime.redis.worker import main

    monkeypatch.delenv(REDIS_JSON_ENV, raising=False)
    with pytest.raises(SystemExit):
        main(["--register", REGISTER])
    assert REDIS_JSON_ENV in capsys.readouterr().err
    # A bad section given there is one line, not a traceback.
    monkeypatch.setenv(REDIS_JSON_ENV, msgspec.json.encode({"shards": 0}).decode())
    assert main(["--register", REGISTER]) == 2
    assert "shards must be >= 1" in capsys.readouterr().err
    assert REDIS_JSON_ENV not in os.environ  # read once, not handed down
