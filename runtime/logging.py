"""structlog setup, done once by the CLI (or by embedding code that wants ours).

Modules only call ``structlog.get_logger()``; this decides where events go and
how they look: ``console`` for people, ``json`` (one object per line) for
machines. Actor and message ids are bound with contextvars by the runtime.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

__all__ = ("configure_logging",)

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    format: str = "console", level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog for the whole process.

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
    processors: list[structlog.typing.Processor] = [
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
