"""Optional extras: the packages an integration needs, checked when it is used."""

from __future__ import annotations

import importlib

from actormem.runtime.errors import ActormemError

__all__ = ("MissingExtraError", "require")


class MissingExtraError(ActormemError, ImportError):
    """An integration was used without its optional extra installed; the message
    names the extra and the command that installs it."""


def require(module: str, extra: str, what: str) -> None:
    """Check that ``module`` imports, for ``what`` (the integration, in words).

    Raises:
        MissingExtraError: it does not; the message says ``pip install 'actormem[extra]'``.
    """
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{what} needs the optional extra {extra!r} ({exc}): pip install 'actormem[{extra}]'"
        ) from exc
