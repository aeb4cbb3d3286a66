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
    ├── EmbeddingError                an embeddings endpoint failed
    │                                 (actormem.actors.recall.embeddings)
    ├── FactExtractionError           the chat endpoint gave no facts
    │                                 (actormem.actors.recall.facts)
    ├── MissingExtraError             an integration's optional extra is missing
    │                                 (also an ImportError; actormem.actors.integrations)
    └── BrainError                    a simulation brain cannot load, broke the
                                      protocol, or its model failed for good
                                      (actormem.actors.app.simulation)
"""

from __future__ import annotations

import re

from actormem.runtime.errors import ActormemError

__all__ = ("ContextBudgetError", "MemoryInputError")


class MemoryInputError(ActormemError, ValueError):
    """Input to an agent memory is invalid; the message says what and why.

    Nothing already stored is changed when this is raised.
    """


class ContextBudgetError(MemoryInputError):
    """Not even the smallest valid context fits the token budget.

    The smallest valid context is the system prompt, the newest complete message
    (an assistant message with tool calls together with their results) and the
    reply priming; the message says what it costs.

    Args:
        message: what did not fit, naming the tokens needed as "needs N tokens".
        needed: the tokens the smallest valid context needs (None: read from
            ``message``, as when the error is rebuilt from its text over Redis).

    Attributes:
        needed: the tokens the smallest valid context needs, or None if unknown.
    """

    def __init__(self, message: str, needed: int | None = None) -> None:
        super().__init__(message)
        if needed is None:
            found = re.search(r"needs (\d+) tokens", message)
            needed = int(found.group(1)) if found else None
        self.needed = needed
