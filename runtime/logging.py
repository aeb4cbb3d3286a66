"""Logging: silent as a library, configured by the application.

Modules only call ``structlog.get_logger("actormem.<part>")``. Until something
configures structlog, importing this module (which importing ``actormem`` does)
routes those loggers into the standard library under the ``actormem`` logger,
which holds a :class:`logging.NullHandler`: an embedding application sees nothing
unless it configures logging itself, either the stdlib way
(``logging.basicConfig(level=logging.INFO)`` shows actormem's events as
``event key=value`` records) or with its own ``structlog.configure()``, which
replaces this routing and takes actormem's events too. Loggers of other names
keep structlog's own defaults, so the application's structlog output is unchanged.
The routing is a ``structlog.configure()`` call, so ``structlog.is_configured()``
is true once actormem is imported: an application configures structlog without
asking it first.

:func:`configure_logging` is the configuration the CLI uses (and
``MemoryRuntime`` when its config has a ``[logging]`` section): ``console`` for
people, ``json`` (one object per line) for machines, on stderr. Actor and message
ids are bound with contextvars by the runtime.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = ("LIBRARY_LOGGER", "configure_logging")

#: The stdlib logger every actormem event goes to until logging is configured.
LIBRARY_LOGGER: Final = "actormem"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

#: The stdlib level of each structlog method name.
_METHOD_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def configure_logging(
    format: str = "console", level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog for the whole process, replacing any earlier configuration.

    Args:
        format: ``console`` or ``json``.
        level: the lowest level written (debug, info, warning, error).
        stream: where events go (stderr by default, so reports on stdout stay clean).

    Raises:
        ValueError: unknown format or level.
    """
    if format not in ("console", "json"):
        raise ValueError(f"log format must be 'console' or 'json', got {format!r}")
    if level not in _LEVELS:
        raise ValueError(f"log level must be one of {sorted(_LEVELS)}, got {level!r}")
    out = stream or sys.stderr
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if format == "json":
        processors += [
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(),
        ]
    else:
        processors += [
            structlog.dev.ConsoleRenderer(
                colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
            )
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


class _LibraryLoggers:
    """A logger factory: ``actormem.*`` names get their stdlib logger, others the default."""

    def __init__(self, default: Callable[..., WrappedLogger]) -> None:
        self._default = default

    def __call__(self, *args: Any) -> WrappedLogger:
        name = args[0] if args else None
        if isinstance(name, str) and (
            name == LIBRARY_LOGGER or name.startswith(LIBRARY_LOGGER + ".")
        ):
            return logging.getLogger(name)
        return self._default(*args)


class _LibraryEvents:
    """The one processor: a stdlib-bound event becomes one stdlib record (dropped
    early when its level is off), any other runs structlog's default chain."""

    def __init__(self, default: Sequence[Processor]) -> None:
        self._default = tuple(default)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        if not isinstance(logger, logging.Logger):
            result: Any = event_dict
            for processor in self._default:
                result = processor(logger, method_name, result)
            return result
        if not logger.isEnabledFor(_METHOD_LEVELS.get(method_name, logging.INFO)):
            raise structlog.DropEvent
        event_dict = structlog.contextvars.merge_contextvars(logger, method_name, event_dict)
        options = {
            key: event_dict.pop(key) for key in ("exc_info", "stack_info") if key in event_dict
        }
        event = event_dict.pop("event", "")
        fields = " ".join(
            f"{key}={value if isinstance(value, str) else repr(value)}"
            for key, value in sorted(event_dict.items())
        )
        return ((f"{event} {fields}" if fields else str(event),), options)


def _route_library_events() -> None:
    """Give the ``actormem`` logger its NullHandler and, unless structlog is already
    configured, send ``actormem.*`` structlog loggers through the stdlib."""
    logging.getLogger(LIBRARY_LOGGER).addHandler(logging.NullHandler())
    if structlog.is_configured():
        return
    defaults = structlog.get_config()
    structlog.configure(
        processors=[_LibraryEvents(defaults["processors"])],
        logger_factory=_LibraryLoggers(defaults["logger_factory"]),
        cache_logger_on_first_use=False,
    )


_route_library_events()
