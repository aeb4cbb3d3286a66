"""Typed configuration, loaded from TOML files in ``configs/``.

Every section is a frozen msgspec Struct that forbids unknown fields, with its
defaults as named constants. :func:`load_toml` decodes a file into any such type
and turns a decoding or validation failure into a :class:`ConfigError` that names
the file, the key and what was expected. ``actors`` composes its own sections
with :class:`RuntimeConfig` into the application's config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, TypeVar
from urllib.parse import urlsplit

import msgspec

from actormem.runtime.errors import ConfigError

__all__ = (
    "DEFAULT_ASK_TIMEOUT",
    "DEFAULT_DISPATCHERS",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_MAILBOX_SIZE",
    "DEFAULT_THROUGHPUT",
    "REDACTED",
    "ConfigSection",
    "LoggingConfig",
    "MetricsConfig",
    "RuntimeConfig",
    "SupervisionConfig",
    "TransportName",
    "decode_config",
    "load_toml",
    "redact_url",
    "redacted",
)

DEFAULT_MAILBOX_SIZE: Final = 1_000
DEFAULT_DISPATCHERS: Final = 8
DEFAULT_THROUGHPUT: Final = 64
DEFAULT_ASK_TIMEOUT: Final = 30.0
DEFAULT_DRAIN_TIMEOUT: Final = 10.0
DEFAULT_GC_THRESHOLD: Final = 10_000
DEFAULT_MAX_RESTARTS: Final = 3
DEFAULT_RESTART_PERIOD: Final = 5.0
DEFAULT_STOPPED_BACKOFF: Final = 5.0
DEFAULT_METRICS_HOST: Final = "127.0.0.1"
DEFAULT_STATUS_INTERVAL: Final = 30.0

#: What a secret is shown as wherever a config is printed, logged or repr'd.
REDACTED: Final = "***"

T = TypeVar("T")

RestartStrategy = Literal["resume", "reset", "stop"]

#: The transports a config may name. ``memory`` is an older name of ``local``,
#: accepted when decoding and turned into ``local``.
TransportName = Literal["local", "redis", "memory"]


_QUERY_PASSWORD: Final = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """Return ``url`` with its password replaced by ``***``.

    Both places a URL can carry one are covered: the user info
    (``redis://user:secret@host``) and a ``password`` query parameter
    (``redis://host?password=secret``). Anything else is returned as it is.
    """
    try:
        has_password = urlsplit(url).password is not None
    except ValueError:  # not a URL at all (an invalid port, say): nothing to find
        has_password = False
    if has_password:
        scheme, sep, rest = url.partition("://")
        # The user info ends at the last "@" of the authority (a password may hold "@").
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        userinfo, _, host = rest[:end].rpartition("@")
        user = userinfo.partition(":")[0]
        url = f"{scheme}{sep}{user}:{REDACTED}@{host}{rest[end:]}"
    return _QUERY_PASSWORD.sub(rf"\g<1>{REDACTED}", url)


def _shown(section: msgspec.Struct, name: str) -> Any:
    """A section's field as it may be shown: secrets hidden, passwords cut from URLs."""
    value = getattr(section, name)
    if not isinstance(value, str) or not value:
        return value
    if name in getattr(section, "__secret_fields__", ()):
        return REDACTED
    if name.endswith("url"):
        return redact_url(value)
    return value


def redacted(config: msgspec.Struct) -> dict[str, Any]:
    """A config as JSON-able data for printing, every secret shown as ``***``.

    Secrets are the fields a section names in ``__secret_fields__`` (the pool's
    ``hmac_key``) and the passwords in fields whose names end in ``url``; nested
    sections are redacted the same way.
    """
    out: dict[str, Any] = {}
    for name in config.__struct_fields__:
        value = getattr(config, name)
        if isinstance(value, msgspec.Struct):
            out[name] = redacted(value)
        else:
            out[name] = msgspec.to_builtins(_shown(config, name))
    return out


class ConfigSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every config section, the runtime's and the domain's.

    A section is frozen, and an unknown key is an error. ``__post_init__`` checks
    use the range helpers below; the ValueError they raise becomes a ConfigError
    naming the file and the section. The repr (and so ``str``) hides secrets as
    :func:`redacted` does, and so does rich's pretty printer.
    """

    #: Fields holding a secret, shown as ``***`` when set.
    __secret_fields__: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={_shown(self, name)!r}" for name in self.__struct_fields__)
        return f"{type(self).__name__}({fields})"

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        """The fields as rich's pretty printer shows them, secrets hidden too."""
        return [(name, _shown(self, name)) for name in self.__struct_fields__]

    def _at_least(self, minimum: float, *keys: str) -> None:
        for key in keys:
            value = getattr(self, key)
            if value < minimum:
                raise ValueError(f"{key} must be >= {minimum:g}, got {value}")

    def _above(self, minimum: float, *keys: str) -> None:
        for key in keys:
            value = getattr(self, key)
            if value <= minimum:
                raise ValueError(f"{key} must be > {minimum:g}, got {value}")

    def _within(self, low: float, high: float, *keys: str) -> None:
        for key in keys:
            value = getattr(self, key)
            if not low <= value <= high:
                raise ValueError(f"{key} must be within {low:g}..{high:g}, got {value}")


class SupervisionConfig(ConfigSection, frozen=True):
    """What happens when an actor's handler raises an unexpected exception.

    Attributes:
        strategy: ``resume`` keeps the actor's state and goes on with the next
            message; ``reset`` replaces the actor with a fresh one (state lost);
            ``stop`` stops it at the first failure.
        max_restarts: restarts allowed within ``within_seconds`` (OTP's restart
            intensity); one more stops the actor and fails its pending asks.
        within_seconds: the period of the restart intensity.
        backoff_seconds: how long a stopped actor stays stopped. It is deactivated
            (its object dropped). Commands sent to it meanwhile are refused with
            ``ActorStoppedError``; over Redis they are dead-lettered with the
            reason, and can be requeued. The first command after it brings the
            actor back from its stored state with a fresh restart budget. Over
            Redis that is what Redis holds. In process it is what its
            ``on_start`` restores, so an actor that stores nothing comes back fresh.
    """

    strategy: RestartStrategy = "resume"
    max_restarts: int = msgspec.field(default=DEFAULT_MAX_RESTARTS)
    within_seconds: float = DEFAULT_RESTART_PERIOD
    backoff_seconds: float = DEFAULT_STOPPED_BACKOFF

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.within_seconds <= 0:
            raise ValueError(f"within_seconds must be > 0, got {self.within_seconds}")
        if not self.backoff_seconds >= 0:
            raise ValueError(f"backoff_seconds must be >= 0, got {self.backoff_seconds}")


class RuntimeConfig(ConfigSection, frozen=True):
    """The actor machinery.

    Attributes:
        transport: ``local`` (in process) or ``redis``; ``memory``, an older name of
            ``local``, is read as ``local``.
        mailbox_size: messages a mailbox holds before senders wait (``tell``) or
            get ``MailboxFullError`` (``tell_nowait``).
        dispatchers: tasks that run actors with mail; an idle actor holds no task.
        throughput: messages one actor handles per turn before others get a go.
        ask_timeout: seconds an ``ask`` waits for its reply by default.
        drain_timeout: seconds shutdown waits for mailboxes to drain before it
            fails what is left.
        supervision: the default restart policy (actor kinds may override it).
        gc_threshold: the garbage collector's first-generation threshold while
            the runtime is open (the interpreter's default is 700: message-heavy
            work then spends a fifth of its time collecting); 0 leaves the
            collector alone.
        gc_freeze: freeze the objects that exist when the first runtime opens
            (``gc.freeze``: modules, classes, configuration) until the last one
            closes, so full collections skip them: shorter pauses in the latency
            tail. Cyclic garbage made before the runtime opened is then only
            collected after it closes.
        max_pending_asks: asks that may wait for replies at once in this runtime;
            one more fails at once with ``TooManyAsksError``, unsent (0: no bound).
            A client that outruns its workers otherwise piles up asks that all
            time out, and handling the timeouts takes the time the replies needed.
        shed_expired_asks: drop an ask whose deadline passed before its actor got
            to it, unhandled (its asker already got ``AskTimeoutError``), so a
            runtime past its capacity does not spend it on replies nobody reads.
            Deadlines are wall-clock times: across hosts, keep clocks in sync or
            turn this off.
    """

    transport: TransportName = "local"
    mailbox_size: int = DEFAULT_MAILBOX_SIZE
    dispatchers: int = DEFAULT_DISPATCHERS
    throughput: int = DEFAULT_THROUGHPUT
    ask_timeout: float = DEFAULT_ASK_TIMEOUT
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    supervision: SupervisionConfig = msgspec.field(default_factory=SupervisionConfig)
    gc_threshold: int = DEFAULT_GC_THRESHOLD
    gc_freeze: bool = True
    max_pending_asks: int = 0
    shed_expired_asks: bool = True

    def __post_init__(self) -> None:
        if self.transport == "memory":
            # Configs written before the rename keep working, and everything past
            # decoding sees one name.
            msgspec.structs.force_setattr(self, "transport", "local")
        self._at_least(1, "mailbox_size", "dispatchers", "throughput")
        self._at_least(0, "gc_threshold", "max_pending_asks")
        self._above(0, "ask_timeout", "drain_timeout")


class LoggingConfig(ConfigSection, frozen=True):
    """structlog output.

    Attributes:
        format: ``console`` (human) or ``json`` (one object per line).
        level: the lowest level written.
    """

    format: Literal["console", "json"] = "console"
    level: Literal["debug", "info", "warning", "error"] = "info"


class MetricsConfig(ConfigSection, frozen=True):
    """The Prometheus endpoint and a worker's periodic status line.

    Attributes:
        port: the TCP port the runtime serves ``/metrics`` on (Prometheus's text
            format); 0 (the default) serves nothing.
        host: the address the endpoint binds (the default, loopback, keeps it off
            the network; ``0.0.0.0`` serves every interface).
        status_interval: seconds between a worker's ``worker_status`` log lines
            (handled/s, lag, active actors, failures since the last line); 0: none.
    """

    port: int = 0
    host: str = DEFAULT_METRICS_HOST
    status_interval: float = DEFAULT_STATUS_INTERVAL

    def __post_init__(self) -> None:
        self._within(0, 65535, "port")
        self._at_least(0, "status_interval")
        if not self.host:
            raise ValueError("host must name an address to bind (127.0.0.1, 0.0.0.0...)")


_PATH_RE: Final = re.compile(r" - at `\$\.?(.*)`$")


def _translate(exc: msgspec.MsgspecError, source: str) -> ConfigError:
    """Turn msgspec's ``Expected `int`, got `str` - at `$.a.b``` into our one line."""
    text = str(exc).replace("`", "")
    match = _PATH_RE.search(str(exc))
    reason = str(exc)[: match.start()].replace("`", "") if match else text
    key = (match.group(1) if match else "") or ""
    unknown = re.match(r"Object contains unknown field (\S+)", reason)
    if unknown:
        full = f"{key}.{unknown.group(1)}" if key else unknown.group(1)
        return ConfigError(f"{source}: unknown key {full!r}")
    if reason.startswith("Expected"):
        reason = "expected" + reason[len("Expected") :]
    elif reason.startswith("Invalid enum value"):
        reason = "invalid value" + reason[len("Invalid enum value") :]
    if not isinstance(exc, msgspec.ValidationError):
        return ConfigError(f"{source}: not valid TOML: {reason}")
    if key:
        return ConfigError(f"{source}: key {key!r}: {reason}")
    return ConfigError(f"{source}: {reason}")


def decode_config(data: bytes | str | dict[str, Any], type: type[T], *, source: str) -> T:
    """Decode TOML text (or an already parsed mapping) into a config type.

    Args:
        data: TOML text, or a dict (for overrides built in code).
        type: the config Struct to build.
        source: what to call the input in errors (usually the file's path).

    Raises:
        ConfigError: naming ``source``, the key and what was expected.
    """
    try:
        if isinstance(data, dict):
            return msgspec.convert(data, type=type)
        return msgspec.toml.decode(data, type=type)
    except msgspec.MsgspecError as exc:
        raise _translate(exc, source) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: not UTF-8 text") from exc
    except RecursionError as exc:
        raise ConfigError(f"{source}: not valid TOML: nested too deeply") from exc


def load_toml(path: str | Path, type: type[T], *, what: str = "config file") -> T:
    """Load a TOML config file into ``type`` (``what`` names the file in errors).

    Raises:
        ConfigError: the file is missing or unreadable, is not valid TOML, or has
            an unknown key or a value of the wrong type or range.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: {what} not found") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read {what}: {exc.strerror}") from exc
    return decode_config(data, type, source=str(p))
