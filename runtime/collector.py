"""The garbage collector's first-generation threshold, raised while runtimes are open.

Handling a message allocates a few dozen objects (the envelope, the decoded
command, the message, its token count, the reply), so at the interpreter's
default threshold (700 allocations) a busy runtime runs a young collection every
few dozen messages, and the older generations follow. Raising the threshold
while a runtime is open cuts the time spent collecting, a visible share of a busy
worker's (see benchmarks/README.md). Reference counting frees almost everything
these objects hold; the collector only has cycles to find, and it still runs.

Full collections are the pauses behind the latency tail: the collector walks
every tracked object, and a process that imported the OpenAI client and its
models already holds a few hundred thousand of them before it stores a message.
So the first runtime to open also freezes what exists then (``gc.freeze``:
modules, classes, config) and the last to close unfreezes it. Messages are not
tracked at all (they cannot form cycles), so stored messages add little to a
full collection's pause.

Several runtimes in one process share the setting: the first to open raises it,
the last to close puts back what it found (unless someone changed it meanwhile).

:class:`Collections` records each collection of the process (its generation,
pause and what it freed); a process started with :data:`RECORD_ENV` naming a
directory records from when a runtime first holds the setting and writes the
record there when it exits (``gc-<pid>.msgpack``): that is how the benchmarks'
worker processes hand theirs over.
"""

from __future__ import annotations

import atexit
import gc
import os
import time
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec

__all__ = ("RECORD_ENV", "Collection", "Collections", "hold", "release")

#: The environment variable naming the directory a process writes its collections to.
RECORD_ENV: Final = "ACTORMEM_GC_RECORD"

_holders = 0
_found: tuple[int, int, int] | None = None
_set: tuple[int, int, int] | None = None
_frozen = False
_recording: Collections | None = None


class Collection(NamedTuple):
    """One collection: when it ended (wall clock), the oldest generation it walked,
    how long it paused the process (s), and how many objects it freed."""

    ended: float
    generation: int
    pause: float
    collected: int


class Collections:
    """Records each collection of this process between :meth:`start` and
    :meth:`stop` (or inside ``with``), from the collector's own callbacks."""

    def __init__(self) -> None:
        self.collections: list[Collection] = []
        self._began = 0.0

    def __enter__(self) -> Collections:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Record from now on."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def stop(self) -> None:
        """Record no more."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        pause = time.perf_counter() - self._began
        self.collections.append(
            Collection(time.time(), info["generation"], pause, info["collected"])
        )

    def during(self, began: float, ended: float) -> list[Collection]:
        """The collections that ended between ``began`` and ``ended`` (wall clock)."""
        return [c for c in self.collections if began <= c.ended < ended]

    def dump(self, path: Path) -> None:
        """Write the collections to ``path`` (msgpack; read back with :meth:`load`)."""
        path.write_bytes(msgspec.msgpack.encode(self.collections))

    @classmethod
    def load(cls, path: Path) -> Collections:
        """The collections :meth:`dump` wrote to ``path``."""
        loaded = cls()
        loaded.collections = msgspec.msgpack.decode(path.read_bytes(), type=list[Collection])
        return loaded


def _record_from_env() -> None:
    """Start recording this process's collections, to be written to the directory
    :data:`RECORD_ENV` names when it exits, if it names one (once per process)."""
    global _recording
    directory = os.environ.get(RECORD_ENV)
    if not directory or _recording is not None:
        return
    _recording = Collections()
    _recording.start()
    atexit.register(_recording.dump, Path(directory) / f"gc-{os.getpid()}.msgpack")


def hold(threshold: int, freeze: bool = False) -> bool:
    """Raise the first-generation threshold to ``threshold`` (0: leave it alone),
    and with ``freeze``, freeze the objects that exist now (if nobody holds yet).
    In a process started with :data:`RECORD_ENV` set, start recording its
    collections too.

    Returns:
        True if the caller must :func:`release` it when done.
    """
    global _holders, _found, _set, _frozen
    _record_from_env()
    if threshold <= 0 and not freeze:
        return False
    if _holders == 0:
        _found = gc.get_threshold()
        if threshold > _found[0]:
            _set = (threshold, _found[1], _found[2])
            gc.set_threshold(*_set)
        if freeze:
            gc.freeze()
            _frozen = True
    _holders += 1
    return True


def release() -> None:
    """Undo one :func:`hold`; the last one puts the thresholds found back and
    unfreezes what it froze."""
    global _holders, _found, _set, _frozen
    _holders -= 1
    if _holders > 0:
        return
    if _set is not None and _found is not None and gc.get_threshold() == _set:
        gc.set_threshold(*_found)
    if _frozen:
        gc.unfreeze()
    _holders, _found, _set, _frozen = 0, None, None, False
