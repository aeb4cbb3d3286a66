"""The ``[redis]`` config section, under the Redis transport's package.

The section is defined in :mod:`actormem.runtime.redis_config`, so that an app
config can hold one without loading this package.
"""

from actormem.runtime.redis_config import (
    DEFAULT_BLOCK_MS,
    DEFAULT_CLAIM_IDLE_MS,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_DELIVERIES,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_REPLY_TTL_MS,
    DEFAULT_SHARDS,
    DEFAULT_STREAM_LIMIT,
    DEFAULT_STREAM_MAXLEN,
    RedisConfig,
    check_namespace,
)

__all__ = (
    "DEFAULT_BLOCK_MS",
    "DEFAULT_CLAIM_IDLE_MS",
    "DEFAULT_LEASE_MS",
    "DEFAULT_MAX_DELIVERIES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_REPLY_TTL_MS",
    "DEFAULT_SHARDS",
    "DEFAULT_STREAM_LIMIT",
    "DEFAULT_STREAM_MAXLEN",
    "RedisConfig",
    "check_namespace",
)
