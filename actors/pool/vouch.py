"""Vouchers: how the pool knows a command naming an agent came from that agent's memory.

The pool's commands that act for an agent (:class:`~actormem.actors.pool.commands.Share`,
``RegisterFact``, ``Subscribe``, ``Unsubscribe``) name the agent in a field the
sender fills, so the field alone proves nothing: anyone who can ``rt.ask`` could
name ``alice``. The pool therefore takes such a command only with a *voucher*:
an HMAC that ``memory/<agent>`` put on it after setting the agent field to its
own agent (:class:`~actormem.actors.memory.commands.Vouch`). The handle asks its agent's memory
for the voucher, then sends the vouched command to the pool; the pool checks the
voucher and takes the agent from the vouched field. Nobody but alice's memory
actor can make a voucher for alice, and a voucher covers every field, so a
vouched command cannot be altered on its way.

Why not the envelope's sender: the runtime does not stamp envelopes with the
sending actor, and a memory actor that asked the pool itself would hold a
dispatcher until the pool answered (with every dispatcher held so, the pool
never runs). See docs/architecture.md, "The insight pool".

The key: derived from the pool's ``hmac_key`` (or ``hmac_key_env``) when one is
configured; else from the environment variable ``ACTORMEM_VOUCHER_KEY`` when it
is set (``actormem simulate --workers`` sets it for the workers it starts); else
over Redis, one derived from the key prefix, which every worker and client of the
deployment shares (so workers started by hand on several hosts agree with no set
up); else, in process, a random key made once per process. The voucher guards the
public API (a handle, ``rt.ask``): code that can read a deployment's config or
environment is trusted like the deployment itself; configure a secret
``hmac_key_env`` when it is not.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import Final, TypeVar

import msgspec

__all__ = ("VOUCHER_KEY_ENV", "AgentVoucher")

#: The environment variable the processes of one deployment share a voucher key in
#: when the pool has no ``hmac_key`` (see the module doc).
VOUCHER_KEY_ENV: Final = "ACTORMEM_VOUCHER_KEY"
#: The key of this process when none is configured or shared.
_PROCESS_KEY: Final = secrets.token_bytes(32)
#: Keeps vouchers apart from the insight signatures made with the same configured key.
_PURPOSE: Final = b"actormem agent voucher v1"
_VERSION: Final = "v1"

_encoder = msgspec.msgpack.Encoder()

C = TypeVar("C", bound=msgspec.Struct)


class AgentVoucher:
    """Makes and checks the vouchers of commands that name an agent.

    A command type vouched for has a ``voucher: str | None`` field; the HMAC
    covers the command's tag and every other field.

    Args:
        key: the configured secret, or ``""`` for ``ACTORMEM_VOUCHER_KEY``'s, else
            one derived from ``deployment`` (what every process of a multi-process
            deployment shares: over Redis, the key prefix), else this process's
            random key.
    """

    __slots__ = ("_key",)

    def __init__(self, key: str | bytes = "", deployment: str = "") -> None:
        raw = key.encode() if isinstance(key, str) else bytes(key)
        secret = (
            raw
            or os.environ.get(VOUCHER_KEY_ENV, "").encode()
            or (f"actormem deployment {deployment}".encode() if deployment else _PROCESS_KEY)
        )
        self._key = hmac.new(secret, _PURPOSE, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "AgentVoucher(key=***)"

    def _mac(self, command: msgspec.Struct) -> str:
        payload = _encoder.encode(msgspec.structs.replace(command, voucher=None))
        return f"{_VERSION}:{hmac.new(self._key, payload, hashlib.sha256).hexdigest()}"

    def vouch(self, command: C) -> C:
        """Return ``command`` with its voucher set."""
        return msgspec.structs.replace(command, voucher=self._mac(command))

    def check(self, command: msgspec.Struct) -> bool:
        """True when ``command`` carries a voucher this key made for exactly these fields."""
        voucher = getattr(command, "voucher", None)
        if not isinstance(voucher, str):
            return False
        return hmac.compare_digest(voucher.encode(), self._mac(command).encode())
