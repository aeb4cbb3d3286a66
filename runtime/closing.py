"""The one way a long-lived resource leaves ``async with``: by awaiting its ``aclose()``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType

__all__ = ("AsyncClosing",)


class AsyncClosing(ABC):
    """Base of resources whose ``async with`` ends in :meth:`aclose` (httpx's pattern).

    Subclasses write ``__aenter__`` (opening differs) and ``aclose`` (idempotent).
    """

    __slots__ = ()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def aclose(self) -> None:
        """Release everything the resource holds; safe to call more than once."""
