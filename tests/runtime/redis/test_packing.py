"""Commands packed by hiredis are the bytes redis-py's own packer makes."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import DataError

from actormem.runtime.redis import RedisConfig, connect

COMMANDS: list[tuple[Any, ...]] = [
    ("XADD", "am:{s1}:stream", "*", b"e", b"\x00\xff\x80 binary"),
    ("EVALSHA", "0" * 40, 5, "k1", "k2", "", b"snap", 7, "1795290000.123456", -1),
    ("XREADGROUP", "GROUP", "workers", "w-1", "COUNT", 256, "BLOCK", 1000, "STREAMS", "s", ">"),
    ("SET", "k", "ünïcode ✓"),
    ("CONFIG GET", "maxmemory-policy"),  # two words: split the way redis-py splits them
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_hiredis_packs_what_redis_py_packs(command: tuple[Any, ...]) -> None:
    client = connect(RedisConfig(), "redis://127.0.0.1:1")
    ours = client.connection_pool.connection_class()
    theirs = aioredis.Connection()
    assert b"".join(ours.pack_command(*command)) == b"".join(theirs.pack_command(*command))


def test_an_argument_redis_py_refuses_is_still_refused() -> None:
    client = connect(RedisConfig(), "redis://127.0.0.1:1")
    connection = client.connection_pool.connection_class()
    with pytest.raises(DataError):
        connection.pack_command("SET", "k", None)
