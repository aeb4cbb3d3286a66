"""Real erasure: ``forget()`` and ``clear(history=True)`` leave no trace of the text.

A canary string goes into every kind of place an agent's text lives (messages,
tool arguments, metadata, long-term records, episodes, offloaded blocks after
compression, a dead letter, the stream entries of its commands, its session
file); after the erasure every key under the test's Redis prefix (every type) and
every file under the session directory is scanned for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import anyio
import pytest
import redis.asyncio as aioredis

from actormem.actors import AppConfig, MemoryHandle, MemoryRuntime
from actormem.actors.compression import CompressionConfig, LLMConfig, compressor_address
from actormem.actors.text import bm25, terms
from actormem.runtime import Transport, tokens
from actormem.runtime.redis import RedisConfig, RedisTransport, connect, shard_of
from tests.support.erasure import (
    CANARY,
    dead_letter,
    erasure_config,
    files_holding,
    no_trace_left,
    plant,
    replies_holding,
    wait_idle,
)
from tests.support.openai_server import OpenAIStub, serve_keyed
from tests.support.redis import keys_holding

pytestmark = pytest.mark.anyio

KEY_ENV = "ACTORMEM_TEST_ERASURE_KEY"


async def erase_and_scan(
    request: pytest.FixtureRequest,
    make_transport: Callable[[], Transport],
    tmp_path: Path,
    erase: Callable[[MemoryHandle], object],
    *,
    shared: bool = False,
) -> MemoryHandle:
    client: aioredis.Redis | None = None
    config: RedisConfig | None = None
    if request.node.callspec.params["make_transport"] == "redis":
        # The default reply_ttl_ms (2 minutes): no reply kept may quote the canary.
        config = request.getfixturevalue("redis_config")
        client = connect(config)
        make_transport = partial(RedisTransport, config.url, config)
    try:
        return await _erase_and_scan(client, config, make_transport, tmp_path, erase, shared)
    finally:
        if client is not None:
            await client.aclose()


async def _erase_and_scan(
    client: aioredis.Redis | None,
    config: RedisConfig | None,
    make_transport: Callable[[], Transport],
    tmp_path: Path,
    erase: Callable[[MemoryHandle], object],
    shared: bool,
) -> MemoryHandle:
    async with MemoryRuntime(erasure_config(tmp_path), transport=make_transport()) as rt:
        mem = rt.memory("ana")
        bystander = rt.memory("bob")
        await bystander.add({"role": "user", "content": "Bob keeps his own notes."})
        await plant(mem)
        if shared:  # the pool holds it, and so does the memory of bob, who subscribed
            await bystander.subscribe("vault")
            await mem.share(f"the vault code is {CANARY}", topic="vault")
            await held_by(bystander, 1)
            await bystander.end_run()
        await mem.end_run()  # persistent: in process, the session file holds the canary now
        assert bool(files_holding(tmp_path, CANARY)) is (client is None)
        if client is not None and config is not None:
            await dead_letter(client, config, "ana")
        await erase(mem)  # type: ignore[misc]
        assert (await mem.get(scope="history")) == []
        assert (await mem.get(scope="offloaded")) == []
        # (Queries naming the canary would put it into the stream themselves.)
        assert await mem.retrieve("vault code forever") == []
        assert await mem.recall_episode("vault") == []
        stats = await mem.stats()
        assert (stats.size, stats.history_size, stats.offloaded) == (0, 0, 0)
        assert (stats.longterm_entries, stats.episodes, stats.core_messages) == (0, 0, 0)
        assert [m.content for m in await bystander.get()] == ["Bob keeps his own notes."]
        if client is not None and config is not None:
            # At once: no reply kept for an ask (the pool's to the share included),
            # no reply stream, holds the canary.
            assert await replies_holding(client, config) == []
        if shared:
            await held_by(bystander, 0)
        if client is not None and config is not None:
            await no_trace_left(client, config)
        # A later command finds the agent empty, and stores afresh.
        await mem.add({"role": "user", "content": "a new start"})
        assert [m.content for m in await mem.get(scope="history")] == ["a new start"]
    assert files_holding(tmp_path, CANARY) == []
    if client is not None and config is not None:
        assert await keys_holding(client, config.prefix, CANARY.encode()) == []
    return mem


async def held_by(mem: MemoryHandle, count: int) -> None:
    """Wait until ``mem`` holds ``count`` insights with the canary."""
    with anyio.fail_after(20):
        while sum(CANARY in i.text for i in await mem.held_insights()) != count:  # noqa: ASYNC110
            await anyio.sleep(0.02)


async def test_forget_leaves_no_trace_of_the_agent_anywhere(
    request: pytest.FixtureRequest, make_transport: Callable[[], Transport], tmp_path: Path
) -> None:
    async def forget(mem: MemoryHandle) -> None:
        assert await mem.forget() > 0

    await erase_and_scan(request, make_transport, tmp_path, forget, shared=True)


async def test_clear_with_history_leaves_no_trace_of_what_it_erases(
    request: pytest.FixtureRequest, make_transport: Callable[[], Transport], tmp_path: Path
) -> None:
    async def clear(mem: MemoryHandle) -> None:
        assert await mem.clear(history=True) > 0

    await erase_and_scan(request, make_transport, tmp_path, clear)


async def test_forget_leaves_no_copy_of_what_a_client_read(
    redis_config: RedisConfig, tmp_path: Path
) -> None:
    # Reads through a client (its own reply stream) quote the canary; once it has
    # them, the client trims them, so right after the forget no reply holds it.
    config = erasure_config(tmp_path)
    client = connect(redis_config)
    worker = RedisTransport(redis_config.url, redis_config)
    asker = RedisTransport(redis_config.url, redis_config, worker=False)
    try:
        async with (
            MemoryRuntime(config, transport=worker),
            MemoryRuntime(config, transport=asker) as rt,
        ):
            mem = rt.memory("ana")
            await mem.add({"role": "user", "content": f"my pin is {CANARY}"})
            assert CANARY in (await mem.get())[0].text()
            assert any(CANARY in str(m.get("content")) for m in await mem.context())
            shared = await mem.share(f"the pin is {CANARY}", topic="pins")
            assert CANARY in shared.insight.text
            assert await mem.forget() == 1
            assert await replies_holding(client, redis_config) == []
            await no_trace_left(client, redis_config)
    finally:
        await client.aclose()


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    yield from serve_keyed(monkeypatch, KEY_ENV)


async def test_a_compression_result_that_comes_after_the_erasure_leaves_no_trace(
    stub: OpenAIStub, redis_config: RedisConfig, tmp_path: Path
) -> None:
    # The summarizer holds the compression until the agent is forgotten; its result
    # (the agent's text, summarized and kept) then reaches the agent's shard stream
    # and is discarded, and its entry goes with it.
    llm = LLMConfig(base_url=stub.base_url, api_key_env=KEY_ENV, model="stub", max_retries=0)
    compression = CompressionConfig(
        msg_threshold=20, max_tokens=1200, last_keep=6, summarizer="openai", llm=llm
    )
    shards = redis_config.shards
    # Its compressor on another shard: the erasure's trimming of the compressor's
    # stream, once the request in flight is acked, cannot take the result along.
    agent = next(
        name
        for name in (f"ana{i}" for i in range(100))
        if shard_of(f"memory/{name}", shards)
        != shard_of(compressor_address(name, compression.concurrency), shards)
    )
    stub.script("hang")
    client = connect(redis_config)
    transport = RedisTransport(redis_config.url, redis_config)
    try:
        async with MemoryRuntime(AppConfig(compression=compression), transport=transport) as rt:
            mem = rt.memory(agent)
            await mem.add({"role": "user", "content": f"The vault code is {CANARY}."})
            for i in range(30):
                await mem.add(
                    [
                        {"role": "user", "content": f"Question {i}: how is the mill?"},
                        {"role": "assistant", "content": f"Answer {i}: it turned {i} times."},
                    ]
                )
                if (await mem.stats()).compressing:
                    break
            assert await anyio.to_thread.run_sync(stub.hanging.wait, 20)
            assert await mem.forget() > 0
            stub.release()  # the summary fails: the offline one is made instead
            await wait_idle(mem)
            await no_trace_left(client, redis_config)
    finally:
        await client.aclose()


async def test_redis_frees_a_deleted_entry_s_bytes_only_with_its_whole_node(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # What erasure cannot reach below Redis: XDEL and a partial XTRIM only mark an
    # entry deleted inside its stream node (DUMP, like an RDB file, still holds its
    # bytes); trimming every entry of the node frees them.
    secret = CANARY.encode()
    for delete in ("xdel", "xtrim"):
        stream = f"{redis_config.prefix}:dump:{delete}"
        await redis_client.xadd(stream, {"e": "before"})
        entry = await redis_client.xadd(stream, {"e": secret})
        after = await redis_client.xadd(stream, {"e": "after"})
        if delete == "xdel":
            await redis_client.xdel(stream, entry)
        else:
            await redis_client.xtrim(stream, minid=after, approximate=False)
        assert all(secret not in f[b"e"] for _, f in await redis_client.xrange(stream))
        assert secret in (await redis_client.dump(stream) or b"")
        await redis_client.xtrim(stream, maxlen=0, approximate=False)
        assert secret not in (await redis_client.dump(stream) or b"")
        await redis_client.delete(stream)


async def test_a_forgotten_agent_starts_empty_after_a_restart(
    make_transport: Callable[[], Transport], tmp_path: Path
) -> None:
    config = erasure_config(tmp_path)
    async with MemoryRuntime(config, transport=make_transport()) as rt:
        mem = rt.memory("ana")
        await mem.add({"role": "user", "content": f"secret {CANARY}"})
        await mem.record({"role": "user", "content": f"remember {CANARY}"})
        assert await mem.forget() == 1
        assert await mem.forget() == 0  # forgetting twice erases nothing more
    async with MemoryRuntime(config, transport=make_transport()) as rt:
        stats = await rt.memory("ana").stats()
        assert (stats.history_size, stats.longterm_entries, stats.peak_size) == (0, 0, 0)


async def test_forget_leaves_no_text_in_the_caches_keyed_by_text() -> None:
    async with MemoryRuntime() as rt:
        mem, bob = rt.memory("ana"), rt.memory("bob")
        await bob.subscribe("vault")
        await mem.add([{"role": "user", "content": f"the vault code is {CANARY}"}])
        await mem.share(f"the vault code is {CANARY}", topic="vault")
        await held_by(bob, 1)
        await bob.context(4096)
        await mem.context(4096)
        await mem.retrieve(f"vault {CANARY}")
        assert _cached(CANARY)
        await mem.forget()
        await held_by(bob, 0)
        assert not _cached(CANARY)
        assert terms.stem.cache_info().currsize == 0


def _cached(text: str) -> bool:
    """True when a cache keyed by text or word holds ``text`` (or its words)."""
    keys = [k for counter in list(tokens._counters) for k in counter._text_costs]
    keys += [*bm25._counts, *terms._terms]
    return any(text.casefold() in key.casefold() for key in keys)
