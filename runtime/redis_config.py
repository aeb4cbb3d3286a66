"""The ``[redis]`` config section: where Redis is and how the transport uses it.

It lives outside :mod:`actormem.runtime.redis`: every app config holds one, and
reading a config loads no Redis module. redis-py is imported only to check a
``url``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from actormem.runtime.config import ConfigSection

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
DEFAULT_REPLY_TTL_MS: Final = 120_000
DEFAULT_PASSWORD_ENV: Final = "ACTORMEM_REDIS_PASSWORD"
DEFAULT_RETRY_FOR: Final = 30.0
DEFAULT_OUTBOX_SIZE: Final = 10_000
DEFAULT_NO_OWNER_TIMEOUT: Final = 2.0

#: A namespace (a simulation's run id, say): letters, digits, ``_``, ``.`` and ``-``.
_NAMESPACE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_namespace(name: str, what: str = "namespace") -> str:
    """Return ``name`` if it may name a namespace; ``what`` names it in the error.

    Raises:
        ValueError: ``name`` is empty, longer than 64 characters, or holds a
            character other than a letter, a digit, ``_``, ``.`` or ``-`` (a ``:``
            would let one namespace's keys match another's pattern).
    """
    if not isinstance(name, str) or not _NAMESPACE.fullmatch(name):
        raise ValueError(
            f"{what} must be 1-64 letters, digits, '_', '.' or '-' (starting with a "
            f"letter or digit), got {name!r}"
        )
    return name


#: Whether the client checks the server's certificate (``none`` is for tests only).
TlsVerify = Literal["required", "none"]
#: The TLS keys that name files, checked to be readable when the config is built.
_TLS_FILES: Final = ("tls_ca_file", "tls_cert_file", "tls_key_file")


class RedisConfig(ConfigSection, frozen=True):
    """How to reach Redis and how the Redis transport behaves.

    Attributes:
        url: ``redis://host:port/db``, ``unix:///path.sock``, or None to start an
            embedded ``redis-server`` on a Unix socket in a temp dir.
        cluster: ``url`` names a node of a Redis Cluster.
        password_env: the environment variable holding the password (never put a
            password in a config file; one in ``url`` is shown as ``***`` wherever
            the config is printed, logged or repr'd).
        username: the Redis ACL user to log in as (None: the ``default`` user,
            which is what a bare ``requirepass`` password is for).
        tls: speak TLS to the server (a ``rediss://`` url does too).
        tls_ca_file: the PEM file of the CA that signed the server's certificate
            (None: the system's trusted CAs).
        tls_cert_file: this client's certificate (PEM), for a server that
            requires client certificates (``tls-auth-clients yes``).
        tls_key_file: the private key of ``tls_cert_file`` (None: it is in that file).
        tls_verify: ``required`` checks the server's certificate; ``none`` does
            not (encrypted but unauthenticated: for tests, never for production).
        tls_check_hostname: the server's certificate must name the url's host.
        reply_ttl_ms: the longest a worker keeps the reply to an ask it applied
            (until the ask's deadline and a second more), so that the ask sent
            again (same command id) after its worker died is answered with it;
            keep it above any ask timeout in use.
        prefix: the first part of every key.
        shards: command streams; actors map to them by a stable hash. Every
            worker and client of one deployment must use the same number.
        max_message_bytes: the largest encoded envelope sent or decoded.
        block_ms: how long one blocking read waits for new entries.
        claim_idle_ms: an entry pending this long is delivered again.
        lease_ms: a shard lease's time to live; renewed every third of it.
        max_deliveries: attempts at handling an entry after which it goes to the
            dead letters (an attempt is a delivery whose handling started: the
            entries a dead worker had read but not begun do not count; an entry
            delivered ten times this many without starting goes too).
        stream_maxlen: a shard stream longer than this is trimmed, but only below
            its lowest pending entry.
        stream_limit: producers stop writing to a shard stream this long (its
            workers are down or behind) and wait until it is shorter.
        pool_size: the most connections one client opens.
        socket_timeout: seconds a command may take (blocking reads get
            ``block_ms`` on top, so they never time out spuriously).
        passivate_after: seconds an idle virtual actor stays in memory.
        applied_keep: command ids remembered per actor for exactly-once effects.
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
    # New keys go last: a config encoded by an older version still decodes.
    username: str | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_verify: TlsVerify = "required"
    tls_check_hostname: bool = True
    no_owner_timeout: float = DEFAULT_NO_OWNER_TIMEOUT
    reply_ttl_ms: int = DEFAULT_REPLY_TTL_MS

    def __post_init__(self) -> None:
        if self.url is not None:
            from redis.connection import parse_url

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
            "reply_ttl_ms",
        )
        self._above(0, "socket_timeout", "passivate_after", "retry_for")
        self._at_least(0, "no_owner_timeout")
        if self.stream_limit <= self.stream_maxlen:
            raise ValueError(
                f"stream_limit ({self.stream_limit}) must be above stream_maxlen "
                f"({self.stream_maxlen}): streams are trimmed back to stream_maxlen"
            )
        if not self.prefix or "{" in self.prefix or "}" in self.prefix:
            raise ValueError(f"prefix must be non-empty without braces, got {self.prefix!r}")
        if self.username == "":
            raise ValueError("username must not be empty (leave it unset for the default user)")
        self._check_tls()

    def _check_tls(self) -> None:
        """TLS keys only with a TLS url, and every file they name readable."""
        tls_keys = [key for key in _TLS_FILES if getattr(self, key) is not None]
        if self.tls_verify != "required":
            tls_keys.append("tls_verify")
        if not self.tls_check_hostname:
            tls_keys.append("tls_check_hostname")
        if self.tls and (self.url is None or self.url.startswith("unix:")):
            where = "an embedded server" if self.url is None else "a unix:// url"
            raise ValueError(f"tls = true needs a redis:// or rediss:// url, not {where}")
        if tls_keys and not self.use_tls:
            raise ValueError(
                f"{tls_keys[0]} is set but TLS is off: set tls = true or use a rediss:// url"
            )
        if self.tls_key_file is not None and self.tls_cert_file is None:
            raise ValueError("tls_key_file is set without tls_cert_file (the certificate it signs)")
        for key in _TLS_FILES:
            path = getattr(self, key)
            if path is not None:
                problem = _unreadable(Path(path))
                if problem:
                    raise ValueError(f"{key}: cannot read {path}: {problem}")

    @property
    def use_tls(self) -> bool:
        """True when the client speaks TLS (``tls = true`` or a ``rediss://`` url)."""
        return self.tls or (self.url or "").startswith("rediss:")

    def tls_options(self) -> dict[str, Any]:
        """redis-py's ``ssl_*`` connection arguments for this config (empty without TLS)."""
        if not self.use_tls:
            return {}
        return {
            "ssl_ca_certs": self.tls_ca_file,
            "ssl_certfile": self.tls_cert_file,
            "ssl_keyfile": self.tls_key_file,
            "ssl_cert_reqs": self.tls_verify,
            "ssl_check_hostname": self.tls_check_hostname and self.tls_verify == "required",
        }

    def user(self) -> str:
        """The ACL user the client logs in as, for messages."""
        return self.username or "default"

    def password(self) -> str | None:
        """The password from the ``password_env`` environment variable, if set."""
        return os.environ.get(self.password_env) or None

    def namespaced(self, namespace: str) -> RedisConfig:
        """Return a copy whose keys live in ``namespace``: under ``<prefix>:<namespace>``.

        Keys of different namespaces never meet (no shard, lease, stream or state
        is shared), and SCANning ``<prefix>:<namespace>:*`` finds one namespace's
        keys alone: another namespace's, and the un-namespaced prefix's
        (``<prefix>:{...}``), never match it.

        Raises:
            ValueError: ``namespace`` is not a valid name (see :func:`check_namespace`).
        """
        return self.replace(prefix=f"{self.prefix}:{check_namespace(namespace)}")

    def replace(self, **changes: object) -> RedisConfig:
        """Return a copy with some fields changed (validated again)."""
        return msgspec.structs.replace(self, **changes)


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file, or None if it can."""
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        return "no such file"
    except IsADirectoryError:
        return "it is a directory"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return None
