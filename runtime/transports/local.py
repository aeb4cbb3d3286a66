"""The local transport: envelopes go straight into the local runtime's mailboxes.

No encoding and no copying: the fastest path, and the test double for the others
(the same actor tests run over it and over Redis).
"""

from __future__ import annotations

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import RuntimeClosedError
from actormem.runtime.transports.base import Transport, TransportHost

__all__ = ("LocalTransport",)

_CLOSED = "the local transport is closed"


class LocalTransport(Transport):
    """Delivers every envelope to the runtime that opened it, in this process.

    Configs name it ``local`` (``memory`` is accepted as an older spelling).
    """

    name = "local"

    def __init__(self) -> None:
        self._host: TransportHost | None = None
        self._opened = False

    async def open(self, host: TransportHost) -> None:
        if self._opened:
            raise RuntimeError("LocalTransport is already open (it cannot be reopened)")
        self._opened = True
        self._host = host

    async def aclose(self) -> None:
        self._host = None

    def _require_host(self) -> TransportHost:
        host = self._host
        if host is None:
            raise RuntimeClosedError(_CLOSED)
        return host

    async def send(self, envelope: Envelope) -> None:
        await self._require_host().deliver(envelope)

    def send_nowait(self, envelope: Envelope) -> None:
        host = self._host  # _require_host() inlined: every in-process tell comes here
        if host is None:
            raise RuntimeClosedError(_CLOSED)
        host.deliver_nowait(envelope)

    async def reply(self, envelope: Envelope, reply: Reply) -> None:
        self._require_host().resolve(reply)
