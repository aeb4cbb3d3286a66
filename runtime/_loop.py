"""The event loop actormem's own processes run on: uvloop where it is installed.

The command line (``actormem simulate``, ``worker``, ``bench``...) and the worker
processes start their event loop through :func:`run`, which asks anyio for uvloop
(its ``use_uvloop`` backend option): its loop turns cost less than asyncio's, and
over Redis an ask is a chain of such turns on both sides. Where uvloop is not
installed (no wheel for the platform) the loop is plain asyncio. The environment
variable ``ACTORMEM_EVENT_LOOP`` chooses: ``uvloop`` (the default) or ``asyncio``;
worker processes inherit it from whoever starts them. An application that embeds
the runtime runs it on its own loop: this module never changes a loop policy.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio

from actormem.runtime.errors import ConfigError

__all__ = ("EVENT_LOOPS", "EVENT_LOOP_ENV", "backend_options", "run")

#: The environment variable that chooses the event loop.
EVENT_LOOP_ENV: Final = "ACTORMEM_EVENT_LOOP"
#: The loops it may name.
EVENT_LOOPS: Final = ("uvloop", "asyncio")

T = TypeVar("T")


def backend_options() -> dict[str, Any]:
    """anyio's asyncio backend options for the loop ``ACTORMEM_EVENT_LOOP`` names.

    Raises:
        ConfigError: it names no known loop.
    """
    choice = os.environ.get(EVENT_LOOP_ENV, "").strip().lower() or "uvloop"
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"{EVENT_LOOP_ENV}={choice!r}: expected one of {', '.join(EVENT_LOOPS)}")
    if choice == "uvloop" and importlib.util.find_spec("uvloop") is not None:
        return {"use_uvloop": True}
    return {}


def run(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run(func, *args)`` on the event loop :func:`backend_options` chooses.

    Raises:
        ConfigError: ``ACTORMEM_EVENT_LOOP`` names no known loop (nothing is run).
    """
    return anyio.run(func, *args, backend_options=backend_options())
