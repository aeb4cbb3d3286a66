"""The ``[redis]`` config section: where Redis is and how the transport uses it."""

from __future__ import annotations

import os
import re
from typing import Final

import msgspec
from redis.connection import parse_url

from runtime.config import _Section

__all__ = (
    "DEFAULT_BLOCK_MS",
    "DEFAULT_CLAIM_IDLE_MS",
    "DEFAULT_LEASE_MS",
    "DEFAULT_MAX_DELIVERIES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_SHARDS",
    "DEFAULT_STREAM_LIMIT",
    "DEFAULT_STREAM_MAXLEN",
    "RedisConfig",
)

DEFAULT_SHARDS: Final = 16
DEFAULT_MAX_MESSAGE_BYTES: Final = 1 << 20
DEFAULT_BLOCK_MS: Final = 1_000
DEFAULT_CLAIM_IDLE_MS: Final = 30_000
DEFAULT_LEASE_MS: Final = 10_000
DEFAULT_MAX_DELIVERIES: Final = 5
DEFAULT_STREAM_MAXLEN: Final = 100_000
DEFAULT_STREAM_LIMIT: Final = 1_000_000
DEFAULT_POOL_SIZE: Final = 32
DEFAULT_SOCKET_TIMEOUT: Final = 5.0
DEFAULT_PASSIVATE_AFTER: Final = 300.0
DEFAULT_APPLIED_KEEP: Final = 1_000
DEFAULT_PASSWORD_ENV: Final = "ACTORMEM_REDIS_PASSWORD"
DEFAULT_RETRY_FOR: Final = 30.0
DEFAULT_OUTBOX_SIZE: Final = 10_000

_URL_PASSWORD: Final = re.compile(r"(://[^:/@]*:)[^@]*@")


class RedisConfig(_Section, frozen=True):
    """How to reach Redis and how the Redis transport behaves.

    Attributes:
        url: ``redis://host:port/db``, ``unix:///path.sock``, or None to start an
            embedded ``redis-server`` on a Unix socket in a temp dir.
        cluster: ``url`` names a node of a Redis Cluster.
        password_env: the environment variable holding the password (never put a
            password in a config file; one in ``url`` is hidden from reprs).
        prefix: the first part of every key.
        shards: command streams; agents map to them by a stable hash. Every
            worker and client of one deployment must use the same number.
        max_message_bytes: the largest encoded envelope sent or decoded.
        block_ms: how long one blocking read waits for new entries.
        claim_idle_ms: an entry pending this long is delivered again.
        lease_ms: a shard lease's time to live; renewed every third of it.
        max_deliveries: deliveries after which an entry goes to the dead letters.
        stream_maxlen: a shard stream longer than this is trimmed, but only below
            its lowest pending entry.
        stream_limit: producers stop writing to a shard stream this long (its
            workers are down or behind) and wait until it is shorter.
        pool_size: the most connections one client opens.
        socket_timeout: seconds a command may take (blocking reads get
            ``block_ms`` on top, so they never time out spuriously).
        passivate_after: seconds an idle virtual actor stays in memory.
        applied_keep: command ids remembered per agent for exactly-once effects.
        retry_for: seconds a commit, a reply, a publish or a state load keeps
            retrying while Redis is unavailable before it fails (the outbox and
            the background loops retry for ever).
        outbox_size: envelopes queued for XADD at most (``tell`` then waits,
            ``tell_nowait`` raises ``MailboxFullError``).
        aof: append-only persistence for the embedded server (off by default: its
            temp dir is removed on exit, so AOF only helps it survive its own crash).
    """

    url: str | None = None
    cluster: bool = False
    password_env: str = DEFAULT_PASSWORD_ENV
    prefix: str = "am"
    shards: int = DEFAULT_SHARDS
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    block_ms: int = DEFAULT_BLOCK_MS
    claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS
    lease_ms: int = DEFAULT_LEASE_MS
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    stream_maxlen: int = DEFAULT_STREAM_MAXLEN
    stream_limit: int = DEFAULT_STREAM_LIMIT
    pool_size: int = DEFAULT_POOL_SIZE
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT
    passivate_after: float = DEFAULT_PASSIVATE_AFTER
    applied_keep: int = DEFAULT_APPLIED_KEEP
    retry_for: float = DEFAULT_RETRY_FOR
    outbox_size: int = DEFAULT_OUTBOX_SIZE
    aof: bool = False

    def __post_init__(self) -> None:
        if self.url is not None:
            try:
                parse_url(self.url)  # type: ignore[no-untyped-call]
            except ValueError as exc:
                raise ValueError(f"url must be redis://, rediss:// or unix:// ({exc})") from None
        self._at_least(
            1,
            "shards",
            "max_message_bytes",
            "block_ms",
            "claim_idle_ms",
            "lease_ms",
            "max_deliveries",
            "stream_maxlen",
            "stream_limit",
            "pool_size",
            "applied_keep",
            "outbox_size",
        )
        self._above(0, "socket_timeout", "passivate_after", "retry_for")
        if self.stream_limit <= self.stream_maxlen:
            raise ValueError(
                f"stream_limit ({self.stream_limit}) must be above stream_maxlen "
                f"({self.stream_maxlen}): streams are trimmed back to stream_maxlen"
            )
        if not self.prefix or "{" in self.prefix or "}" in self.prefix:
            raise ValueError(f"prefix must be non-empty without braces, got {self.prefix!r}")

    def __repr__(self) -> str:
        fields = []
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if name == "url" and isinstance(value, str):
                value = _URL_PASSWORD.sub(r"\1***@", value)
            fields.append(f"{name}={value!r}")
        return f"RedisConfig({', '.join(fields)})"

    def password(self) -> str | None:
        """The password from the ``password_env`` environment variable, if set."""
        return os.environ.get(self.password_env) or None

    def replace(self, **changes: object) -> RedisConfig:
        """Return a copy with some fields changed (validated again)."""
        return msgspec.structs.replace(self, **changes)
