"""Optional extras: the packages an integration needs, checked when it is used."""

from __future__ import annotations

import importlib
import importlib.metadata

from actormem.runtime.errors import ActormemError

__all__ = ("MissingExtraError", "require")


class MissingExtraError(ActormemError, ImportError):
    """An integration was used without its optional extra installed; the message
    names the extra and the command that installs it."""


def require(module: str, extra: str, what: str, *, major: tuple[str, int] | None = None) -> None:
    """Check that ``module`` imports, for ``what`` (the integration, in words), and
    with ``major`` = (distribution, version) that this major version is installed.

    Raises:
        MissingExtraError: it does not, or another major version is installed; the
            message says ``pip install 'actormem[extra]'``, and for a clone
            ``pip install -e '.[extra]'``.
    """
    install = f"pip install 'actormem[{extra}]' (in a clone: pip install -e '.[{extra}]')"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtraError(f"{what} needs the optional extra {extra!r}: {install}") from exc
    except ImportError as exc:  # installed, but broken
        raise MissingExtraError(f"{what} cannot import {module} ({exc}): {install}") from exc
    if major is not None:
        name, number = major
        found = importlib.metadata.version(name)
        if found.split(".")[0] != str(number):
            raise MissingExtraError(f"{what} needs {name} {number}.x, not {found}: {install}")
