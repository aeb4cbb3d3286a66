"""A user's own brain, named ``module:callable`` (``kind = "python"``).

Two shapes are accepted, both checked before the run starts:

- an async function ``async def step(turn)``: every agent runs it; an agent
  spoken to answers with a short acknowledgement;
- a class (or other callable) built with each agent's
  :class:`~actormem.actors.app.simulation.brains.protocol.AgentInfo`, whose
  instances have an async ``step(turn)`` and, optionally, an async
  ``respond(turn, caller, said)``.

The module is imported from the working directory first, then from ``sys.path``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

from actormem.actors.app.simulation.brains.protocol import (
    AgentInfo,
    Brain,
    BrainError,
    BrainFactory,
    Turn,
)

__all__ = ("brain_failed", "load_callable", "python_brain", "raised_at")

#: Where actormem's own modules and Python's installed ones live: not the user's code.
_NOT_USERS: tuple[str, ...] = tuple(
    {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} - {""}
)


def raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised in the user's code, as ``file.py:42``: the innermost
    frame of its traceback outside actormem and the installed packages (else outside
    actormem alone; ``""`` when every frame is actormem's)."""
    theirs = [
        (frame, line)
        for frame, line in traceback.walk_tb(exc.__traceback__)
        if not str(frame.f_globals.get("__name__", "")).startswith("actormem.")
    ]
    users = [(f, n) for f, n in theirs if not f.f_code.co_filename.startswith(_NOT_USERS)]
    for frame, line in reversed(users or theirs):
        return f"{Path(frame.f_code.co_filename).name}:{line}"
    return ""


def brain_failed(what: str, exc: BaseException) -> BrainError:
    """The one-line error of a brain that raised ``exc``, said after ``what`` (``the
    brain of Ada failed at step 5``), naming the file and line of the user's code
    it was raised at."""
    where = raised_at(exc)
    at = f" ({where})" if where else ""
    return BrainError(f"{what}: {type(exc).__name__}: {exc}{at}")


def load_callable(spec: str) -> Any:
    """Import ``module:callable`` and return the object it names.

    Raises:
        BrainError: not ``module:callable``, the module cannot be imported, or it has
            no such attribute.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise BrainError(f"brain {spec!r}: expected module:callable (my_agents:step)")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise BrainError(
                f"brain {spec!r}: no module named {module_name!r} (looked in {cwd} and sys.path)"
            ) from exc
        raise BrainError(f"brain {spec!r}: importing {module_name} failed: {exc}") from exc
    except Exception as exc:
        raise BrainError(
            f"brain {spec!r}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from exc
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise BrainError(f"brain {spec!r}: module {module_name} has no {attr!r}")
        found = getattr(found, part)
    return found


def python_brain(spec: str) -> BrainFactory:
    """The brain factory for the user's ``module:callable``.

    Raises:
        BrainError: it cannot be loaded (see :func:`load_callable`) or has neither
            accepted shape; the message says which shape was expected.
    """
    found = load_callable(spec)
    if inspect.iscoroutinefunction(found):
        _takes_one(spec, found, "turn")
        return lambda agent: _StepFunction(agent, found)
    if callable(found) and inspect.iscoroutinefunction(getattr(found, "step", None)):
        _takes_one(spec, found, "an AgentInfo")
        return lambda agent: _built(spec, found, agent)
    raise BrainError(
        f"brain {spec!r}: expected an async function step(turn), or a class whose "
        f"instances have an async step(turn); got {_shown(found)}"
    )


def _takes_one(spec: str, found: Any, what: str) -> None:
    try:
        inspect.signature(found).bind(None)
    except TypeError:
        raise BrainError(f"brain {spec!r}: it must take one argument ({what})") from None
    except ValueError:  # no signature to read (a builtin): it gets its chance
        pass


def _built(spec: str, factory: Any, agent: AgentInfo) -> Brain:
    brain = factory(agent)
    if not inspect.iscoroutinefunction(getattr(brain, "step", None)):
        raise BrainError(f"brain {spec!r}: built {_shown(brain)}, which has no async step(turn)")
    if getattr(brain, "respond", None) is None:
        return _WithDefaultAnswer(brain)
    if not inspect.iscoroutinefunction(brain.respond):
        raise BrainError(f"brain {spec!r}: respond of {_shown(brain)} is not async")
    return brain  # type: ignore[no-any-return]


def _shown(value: Any) -> str:
    kind = type(value).__name__
    name = getattr(value, "__qualname__", None)
    return f"{kind} {name}" if name else kind


def _acknowledge(turn: Turn, caller: str) -> str:
    return f"{caller}, this is {turn.agent}: I hear you."


class _StepFunction:
    """A brain made of the user's ``async def step(turn)``."""

    def __init__(self, agent: AgentInfo, step: Any) -> None:
        self.agent = agent
        self._step = step

    async def step(self, turn: Turn) -> None:
        await self._step(turn)

    async def respond(self, turn: Turn, caller: str, said: str) -> str:
        return _acknowledge(turn, caller)


class _WithDefaultAnswer:
    """The user's brain that has no ``respond``, answering with an acknowledgement."""

    def __init__(self, brain: Any) -> None:
        self.brain = brain

    async def step(self, turn: Turn) -> None:
        await self.brain.step(turn)

    async def respond(self, turn: Turn, caller: str, said: str) -> str:
        return _acknowledge(turn, caller)
