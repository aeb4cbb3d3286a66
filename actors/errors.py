"""Errors of the domain actors, all within actormem's one error tree (``runtime.errors``).

::

    ActormemError (runtime.errors)
    └── MemoryInputError          bad input to an agent memory (also a ValueError)
        └── ContextBudgetError    a context cannot fit the budget at all
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
