"""The garbage collector's first-generation threshold, raised while runtimes are open.

Handling a message allocates a few dozen objects (the envelope, the decoded
command, the message, its token count, the reply), so at the interpreter's
default threshold (700 allocations) a busy runtime runs a young collection every
few dozen messages, and the older generations follow. Raising the threshold
while a runtime is open cuts the time spent collecting, a visible share of a busy
worker's (see docs/performance.md). Reference counting frees almost everything
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
"""

from __future__ import annotations

import gc

__all__ = ("hold", "release")

_holders = 0
_found: tuple[int, int, int] | None = None
_set: tuple[int, int, int] | None = None
_frozen = False


def hold(threshold: int, freeze: bool = False) -> bool:
    """Raise the first-generation threshold to ``threshold`` (0: leave it alone),
    and with ``freeze``, freeze the objects that exist now (if nobody holds yet).

    Returns:
        True if the caller must :func:`release` it when done.
    """
    global _holders, _found, _set, _frozen
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
