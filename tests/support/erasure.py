"""The canary of the erasure tests: planted in every place an agent's text lives,
then looked for in every Redis key under a prefix and every session file."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import msgspec
import redis.asyncio as aioredis

from actormem.actors import AppConfig, MemoryHandle, Message, ToolCall
from actormem.actors.compression import CompressionConfig
from actormem.actors.retention import RetentionConfig
from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis.keys import Keys, shard_of
from tests.support.redis import keys_holding

__all__ = (
    "CANARY",
    "dead_letter",
    "erasure_config",
    "files_holding",
    "no_trace_left",
    "plant",
    "replies_holding",
    "wait_idle",
)

CANARY = "zq7-canary-0451"


def erasure_config(session_dir: Path) -> AppConfig:
    """Small compression limits (so the canary is offloaded) and session files."""
    return AppConfig(
        compression=CompressionConfig(msg_threshold=20, max_tokens=1200, last_keep=6),
        retention=RetentionConfig(policy="persistent", session_dir=str(session_dir)),
    )


async def wait_idle(mem: MemoryHandle) -> None:
    """Wait until ``mem`` is not compressing."""
    with anyio.fail_after(20):
        while (await mem.stats()).compressing:  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def plant(mem: MemoryHandle) -> None:
    """The canary in every place the agent's memory keeps text."""
    await mem.add({"role": "system", "content": "You are Ana."})
    await mem.add(
        Message(role="user", content=f"The vault code is {CANARY}.", metadata={"tag": CANARY})
    )
    await mem.add(
        [
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="call-1", name="lookup", arguments={"q": CANARY})],
            ),
            Message(role="tool", tool_call_id="call-1", name="lookup", content="found"),
            Message(role="assistant", content=f"Noted {CANARY}."),
        ]
    )
    note = await mem.add({"role": "user", "content": "a note to edit"})
    await mem.update(note.ids[0], content=f"edited to {CANARY}")
    spare = await mem.add([{"role": "user", "content": f"spare {i}"} for i in range(2)])
    await mem.set_summary(f"summary of {CANARY}", replaces=spare.ids)
    assert await mem.record({"role": "user", "content": f"remember {CANARY} forever"}) == 1
    assert await mem.start_episode(topic="vault") is not None
    await mem.put_entry((mem.agent, "vault"), CANARY, {"code": CANARY}, ttl=3600)
    for i in range(30):
        await mem.add(
            [
                {"role": "user", "content": f"Question {i}: how is the mill at dawn?"},
                {"role": "assistant", "content": f"Answer {i}: the mill wheel turned {i} times."},
            ]
        )
        await wait_idle(mem)
    stats = await mem.stats()
    assert stats.compressions >= 1 and stats.offloaded >= 1
    offloaded = await mem.get(scope="offloaded")
    assert any(CANARY in json.dumps(m.to_openai()) for m in offloaded)


async def dead_letter(client: aioredis.Redis, config: RedisConfig, agent: str) -> None:
    """A tell to ``agent`` carrying the canary that fails validation: a dead letter."""
    keys = Keys(config.prefix)
    address = f"memory/{agent}"
    body = {"type": "Add", "messages": f"not a list {CANARY}"}
    envelope = msgspec.msgpack.encode({"recipient": address, "body": body, "id": "dl-1"})
    await client.xadd(keys.stream(shard_of(address, config.shards)), {b"e": envelope})
    with anyio.fail_after(10):
        while not await client.xlen(keys.dead_letters()):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert await keys_holding(client, config.prefix, CANARY.encode())


async def replies_holding(client: aioredis.Redis, config: RedisConfig) -> list[str]:
    """The reply copies that hold the canary: replies kept to answer an ask again
    (``...:reply:<id>``) and clients' reply streams."""
    found = await keys_holding(client, config.prefix, CANARY.encode())
    return [k for k in found if ":reply:" in k or k.endswith(":replies")]


async def no_trace_left(client: aioredis.Redis, config: RedisConfig) -> None:
    """Wait until no key holds the canary: the stream entries of commands still in
    flight at the erasure (a compression request) go once they are acked."""
    with anyio.fail_after(20):
        while await keys_holding(client, config.prefix, CANARY.encode()):  # noqa: ASYNC110
            await anyio.sleep(0.05)


def files_holding(root: Path, needle: str) -> list[Path]:
    """The files under ``root`` that hold ``needle``."""
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]
