"""What a namespace holds on a Redis server: count its keys, or clear them.

A namespace is a key prefix (``RedisConfig.namespaced`` makes ``<prefix>:<name>``),
so both functions read or delete exactly the keys SCAN finds for the config's
prefix, in batches, and nothing else: never ``FLUSHDB``, never a key of another
namespace. Do not clear a namespace while workers still serve it.
"""

from __future__ import annotations

from typing import Final

from actormem.runtime.redis._client import open_client, redis_errors
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import Keys

__all__ = ("clear_prefix", "count_prefix")

#: Keys asked for per SCAN call, and deleted per UNLINK.
_BATCH: Final = 500


async def count_prefix(config: RedisConfig) -> int:
    """The number of keys under ``config.prefix`` on ``config.url``.

    Raises:
        ValueError: the config has no url (an embedded server holds nothing yet).
        TransportUnavailableError: Redis cannot be reached, or refused the login.
        TransportError: Redis is not suitable (see ``check_server``), or refused
            the SCAN.
    """
    return await _walk(config, delete=False)


async def clear_prefix(config: RedisConfig) -> int:
    """Delete every key under ``config.prefix`` on ``config.url``; the number deleted.

    Raises:
        ValueError: the config has no url.
        TransportUnavailableError: Redis cannot be reached, or refused the login.
        TransportError: Redis is not suitable, or refused the SCAN or the UNLINK.
    """
    return await _walk(config, delete=True)


async def _walk(config: RedisConfig, *, delete: bool) -> int:
    if not config.url:
        raise ValueError("a namespace is counted or cleared on a configured Redis: set its url")
    pattern = Keys(config.prefix).pattern()
    found = 0
    async with open_client(config) as client:
        with redis_errors(f"{'clearing' if delete else 'counting'} the keys {pattern}"):
            batch: list[bytes] = []
            async for key in client.scan_iter(match=pattern, count=_BATCH):
                found += 1
                if delete:
                    batch.append(key)
                if len(batch) >= _BATCH:
                    await client.unlink(*batch)
                    batch.clear()
            if batch:
                await client.unlink(*batch)
    return found
