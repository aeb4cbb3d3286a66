"""Errors of the domain actors, all within actormem's one error tree (``actormem.runtime.errors``).

::

    ActormemError (actormem.runtime.errors)
    ├── MemoryInputError              bad input to an agent memory (also a ValueError)
    │   ├── ContextBudgetError        a context cannot fit the budget at all
    │   ├── InsightError              an unusable insight (actormem.actors.pool.insights)
    │   │   └── InsightSignatureError a missing or forged provenance HMAC
    │   ├── ToolArgumentsError        bad memory-tool arguments (actormem.actors.recall.tools)
    │   └── ReloadArgumentsError      bad context_reload arguments (actormem.actors.compression)
    ├── SessionFileError              a corrupt or unwritable session file
    │                                 (actormem.actors.retention)
    └── EmbeddingError                an embeddings endpoint failed
                                      (actormem.actors.recall.embeddings)
"""

from __future__ import annotations

from actormem.runtime.errors import ActormemError

__all__ = ("ContextBudgetError", "MemoryInputError")


class MemoryInputError(ActormemError, ValueError):
    """Input to an agent memory is invalid; the message says what and why.

    Nothing already stored is changed when this is raised.
    """


class ContextBudgetError(MemoryInputError):
    """The pinned part of a context (system messages) alone is over the token budget."""
