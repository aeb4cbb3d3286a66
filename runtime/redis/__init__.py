"""The Redis streams transport and what it is built from: an embedded server,
clients, key names, codec.

:class:`RedisTransport` carries envelopes between processes and hosts; worker
processes are in :mod:`actormem.runtime.redis.worker` (``python -m
actormem.runtime.redis.worker`` runs one).
"""

from actormem.runtime.redis._client import (
    check_server,
    connect,
    eval_pipelined,
    open_client,
    redis_errors,
)
from actormem.runtime.redis._counters import WorkerCounters, read_workers_total
from actormem.runtime.redis._dead_letters import (
    DeadLetter,
    count_dead_letters,
    drop_dead_letters,
    is_letter_id,
    read_dead_letters,
    requeue_dead_letters,
)
from actormem.runtime.redis._server import EmbeddedRedis, find_redis_server, free_port
from actormem.runtime.redis.codec import (
    Codec,
    default_codec,
    register_error_types,
    register_message_types,
)
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import CONSUMER_GROUP, DEFAULT_PREFIX, Keys, shard_of
from actormem.runtime.redis.namespaces import clear_prefix, count_prefix
from actormem.runtime.redis.transport import RedisTransport, RedisTransportStats

__all__ = (
    "CONSUMER_GROUP",
    "DEFAULT_PREFIX",
    "Codec",
    "DeadLetter",
    "EmbeddedRedis",
    "Keys",
    "RedisConfig",
    "RedisTransport",
    "RedisTransportStats",
    "WorkerCounters",
    "check_server",
    "clear_prefix",
    "connect",
    "count_dead_letters",
    "count_prefix",
    "default_codec",
    "drop_dead_letters",
    "eval_pipelined",
    "find_redis_server",
    "free_port",
    "is_letter_id",
    "open_client",
    "read_dead_letters",
    "read_workers_total",
    "redis_errors",
    "register_error_types",
    "register_message_types",
    "requeue_dead_letters",
    "shard_of",
)
