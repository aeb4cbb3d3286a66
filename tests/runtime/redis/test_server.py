"""The embedded redis-server and the client factory, against real servers."""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from actormem.runtime.errors import TransportError, TransportUnavailableError
from actormem.runtime.redis import (
    EmbeddedRedis,
    RedisConfig,
    check_server,
    connect,
    find_redis_server,
    free_port,
    open_client,
    redis_errors,
)
from actormem.runtime.redis._server import _answers_ping


def test_a_redis_server_binary_is_found() -> None:
    path = find_redis_server()
    assert os.access(path, os.X_OK)


@pytest.mark.anyio
async def test_embedded_server_serves_on_a_unix_socket_and_cleans_up() -> None:
    async with EmbeddedRedis() as server:
        assert server.url.startswith("unix://")
        sock = Path(server.url.removeprefix("unix://"))
        client = connect(RedisConfig(), server.url)
        try:
            await client.set("k", "v")
            assert await client.get("k") == b"v"
            info = await client.info("persistence")
            assert info["aof_enabled"] == 0
        finally:
            await client.aclose()
    assert not sock.parent.exists()


@pytest.mark.anyio
async def test_a_dir_too_long_for_a_socket_address_gets_a_short_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    async with EmbeddedRedis(directory=deep) as server:
        sock = Path(server.url.removeprefix("unix://"))
        assert sock.parent != deep
        client = connect(RedisConfig(), server.url)
        try:
            assert await client.ping()
        finally:
            await client.aclose()
    assert not sock.parent.exists()
    assert deep.exists()


@pytest.mark.anyio
async def test_embedded_server_with_aof_keeps_data_across_a_restart(tmp_path: Path) -> None:
    port = free_port()
    async with EmbeddedRedis(aof=True, port=port, directory=tmp_path) as server:
        client = connect(RedisConfig(), server.url)
        await client.set("kept", "yes")
        await client.aclose()
    async with EmbeddedRedis(aof=True, port=port, directory=tmp_path) as server:
        client = connect(RedisConfig(), server.url)
        assert await client.get("kept") == b"yes"
        await client.aclose()


@pytest.mark.anyio
async def test_embedded_server_stops_when_the_body_raises() -> None:
    server = EmbeddedRedis()
    with pytest.raises(ZeroDivisionError):
        async with server:
            pid = server.pid
            assert pid is not None
            1 / 0  # noqa: B018
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.anyio
async def test_missing_binary_is_one_clear_error() -> None:
    with pytest.raises(TransportUnavailableError, match="cannot run /nonexistent/redis-server"):
        async with EmbeddedRedis(binary="/nonexistent/redis-server"):
            pass


@pytest.mark.anyio
async def test_open_client_without_url_embeds_a_server() -> None:
    async with open_client(RedisConfig(aof=False)) as client:
        assert await client.ping()
        assert client.connection_pool.connection_kwargs["path"].endswith("redis.sock")


@pytest.mark.anyio
async def test_a_server_that_evicts_keys_is_refused(tmp_path: Path) -> None:
    async with EmbeddedRedis(directory=tmp_path) as server:
        client = connect(RedisConfig(), server.url)
        try:
            await client.config_set("maxmemory-policy", "allkeys-lru")
            with pytest.raises(TransportError, match="noeviction"):
                await check_server(client)
        finally:
            await client.aclose()


@pytest.mark.anyio
async def test_an_unreachable_server_is_a_transport_unavailable_error() -> None:
    client = connect(RedisConfig(socket_timeout=0.5), f"redis://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(TransportUnavailableError, match="Redis unavailable"):
            await check_server(client)
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_server_errors_are_translated(redis_client: aioredis.Redis) -> None:
    with (
        pytest.raises(TransportError, match="doing a wrong thing: Redis error"),
        redis_errors("doing a wrong thing"),
    ):
        await redis_client.execute_command("NOSUCHCOMMAND")


@pytest.mark.anyio
async def test_a_blocking_read_longer_than_the_socket_timeout_does_not_time_out(
    redis_url: str, redis_prefix: str
) -> None:
    config = RedisConfig(socket_timeout=0.2, block_ms=700, prefix=redis_prefix)
    client = connect(config, redis_url)
    try:
        result = await client.xread({f"{redis_prefix}:nothing": "0-0"}, block=700)
        assert result in ([], {}, None)
    finally:
        await client.aclose()


_KILLED_OWNER = """
import anyio, os, sys
from actormem.runtime.redis import EmbeddedRedis

async def main():
    async with EmbeddedRedis() as server:
        print(server._proc.pid, flush=True)
        await anyio.sleep(60)

anyio.run(main)
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_sigkilled_owner_leaves_no_server_behind() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED_OWNER], stdout=subprocess.PIPE, text=True
    ) as owner:
        assert owner.stdout is not None
        server_pid = int(owner.stdout.readline())
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(server_pid, signal.SIGKILL)
    pytest.fail("the embedded redis-server outlived its SIGKILLed owner")


def test_a_ping_refused_by_a_server_not_listening_yet_closes_its_socket(tmp_path: Path) -> None:
    path = tmp_path / "redis.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(path))  # the socket file exists; nothing listens on it yet
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            assert not _answers_ping(path, None)
            gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
