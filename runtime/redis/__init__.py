"""Redis for actormem: an embedded server, clients, key names, codec, durable state.

The transport itself is :class:`actormem.runtime.transports.redis.RedisTransport`; this
package holds what it is built from and what tests and tools need directly.
"""

from actormem.runtime.redis._client import check_server, connect, open_client, redis_errors
from actormem.runtime.redis._server import EmbeddedRedis, find_redis_server, free_port
from actormem.runtime.redis.codec import (
    Codec,
    default_codec,
    register_error_types,
    register_message_types,
)
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.durable import Durable, DurableChanges, is_durable
from actormem.runtime.redis.keys import CONSUMER_GROUP, DEFAULT_PREFIX, Keys, shard_of

__all__ = (
    "CONSUMER_GROUP",
    "DEFAULT_PREFIX",
    "Codec",
    "Durable",
    "DurableChanges",
    "EmbeddedRedis",
    "Keys",
    "RedisConfig",
    "check_server",
    "connect",
    "default_codec",
    "find_redis_server",
    "free_port",
    "is_durable",
    "open_client",
    "redis_errors",
    "register_error_types",
    "register_message_types",
    "shard_of",
)
