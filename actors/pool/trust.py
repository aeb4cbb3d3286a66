"""Who may send the pool a command, and the error a wrong sender gets.

The commands that act for an agent are taken only from that agent's memory
actor; the peer notes only from another partition; a delivery outcome only
from the pool itself. The checks live in the pool actor, which knows the sender.
"""

from __future__ import annotations

from typing import Final

import structlog

from actormem.actors.pool.insights import InsightSignatureError

__all__ = ("refusal",)

log = structlog.get_logger("actormem.pool")

#: The handle method that sends each command (for error messages).
_VERB: Final = {
    "Share": "share",
    "RegisterFact": "register_fact",
    "Subscribe": "subscribe",
    "Unsubscribe": "unsubscribe",
    "ForgetSource": "forget",
}


def refusal(name: str, agent: str, expected: str, sender: str | None) -> InsightSignatureError:
    """The error for command ``name``, for ``agent``, sent by ``sender``, not ``expected``.

    The refusal is logged here.
    """
    who = repr(sender[:80]) if sender else "code outside any actor"
    log.warning("pool_command_refused", command=name, agent=agent[:64], sender=who)
    if name in ("DeliveryOutcome", "PeerShared", "PeerForgot"):
        return InsightSignatureError(f"DeliveryOutcome is {expected}; this one came from {who}")
    return InsightSignatureError(
        f"{name} acts for agent {agent[:64]!r} but was sent by {who}: the pool takes it "
        f"only from {expected[:80]} (send it through the agent's handle, "
        f"rt.memory({agent[:64]!r}).{_VERB.get(name, 'share')}(...))"
    )
