"""Errors of the domain actors, all within actormem's one error tree (``runtime.errors``).

::

    ActormemError (runtime.errors)
    ├── MemoryInputError              bad input to an agent memory (also a ValueError)
    │   ├── ContextBudgetError        a context cannot fit the budget at all
    │   ├── InsightError              an unusable insight (actors.insights)
    │   │   └── InsightSignatureError a missing or forged provenance HMAC
    │   ├── ToolArgumentsError        bad memory-tool arguments (actors.memory_tools)
    │   └── ReloadArgumentsError      bad context_reload arguments (actors.compression)
    ├── SessionFileError              a corrupt or unwritable session file (actors.retention)
    └── EmbeddingError                an embeddings endpoint failed (actors._embeddings)
"""

from __future__ import annotations

from runtime.errors import ActormemError

__all__ = ("ContextBudgetError", "MemoryInputError")


class MemoryInputError(ActormemError, ValueError):
    """Input to an agent memory is invalid; the message says what and why.

    Nothing already stored is changed when this is raised.
    """


class ContextBudgetError(MemoryInputError):
    """The pinned part of a context (system messages) alone is over the token budget."""
