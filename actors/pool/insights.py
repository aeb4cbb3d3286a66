"""Insights: what one agent shares with others through the pool, and their provenance.

An :class:`Insight` is a short text with its provenance (source agent, topic,
importance, time, the message ids it came from) and, when a key is configured,
an HMAC of that provenance made by the pool: :class:`InsightSigner` signs and
checks it, so a delivery whose source or text was forged is rejected.

The text an agent shares is hostile until shown otherwise: it is sanitized
(:mod:`actormem.actors.pool.sanitize`) before the pool keeps it, and shown to other
agents only as quoted data (:mod:`actormem.actors.recall.inbox`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable
from typing import ClassVar, Final

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.runtime import Command
from actormem.runtime.ids import new_id

__all__ = (
    "DEFAULT_MAX_INSIGHT_CHARS",
    "Insight",
    "InsightDelivery",
    "InsightError",
    "InsightSignatureError",
    "InsightSigner",
    "make_insight",
)

DEFAULT_MAX_INSIGHT_CHARS: Final = 1_000
_SIGNATURE_VERSION: Final = "v1"


class InsightError(MemoryInputError):
    """An insight, its topic or its provenance is invalid; the message says which."""


class InsightSignatureError(InsightError):
    """A provenance HMAC is missing or does not match (forged or altered): an insight's
    signature (forged or altered), or a pool command or delivery from the wrong sender."""


class Insight(msgspec.Struct, frozen=True, kw_only=True):
    """One shared insight with its provenance.

    Args:
        id: unique, time-ordered (made by the pool).
        text: the sanitized text.
        topic: the topic it was shared under (lowercase).
        importance: 0..1, as the sharing agent rated it.
        source: the agent that shared it.
        created: when the pool accepted it (seconds since the epoch).
        source_message_ids: ids of the messages it was drawn from.
        signature: ``v1:<hex HMAC-SHA256>`` of the fields above, or None when the
            pool has no key.
        erased: its source was forgotten: ``text`` is empty, the provenance stays.
    """

    id: str
    text: str
    topic: str
    importance: float
    source: str
    created: float
    source_message_ids: tuple[str, ...] = ()
    signature: str | None = None
    erased: bool = False


class InsightDelivery(Command[None], frozen=True):
    """Pool → ``memory/<agent>``: an insight on a topic the agent subscribes to.

    Told, never asked; the memory actor takes it only from the pool (the
    envelope's sender) and keeps it in its
    :class:`~actormem.actors.recall.inbox.InsightInbox`.

    Deliveries to one agent form a chain: ``number`` is the delivery's place in
    the pool's numbering (increasing, never reused), ``after`` the number of the
    delivery before it to this agent (0: none). The memory applies a delivery only
    when it holds everything up to ``after`` and not this one, so a delivery sent
    again is applied once and in order; ``ack`` asks it to confirm how far it got
    (:class:`~actormem.actors.pool.commands.DeliveryAck`). ``number`` 0 is a
    delivery outside any chain (applied unless held already).
    """

    #: Deliveries (and adds) to one agent that queue together are stored as one change
    #: set over Redis: a delivery changes only the memory's inbox and tells its
    #: confirmation, and one handled again is applied once by its place in the chain.
    batch: ClassVar[bool] = True

    insight: Insight
    number: int = 0
    after: int = 0
    ack: bool = False
    #: The last of a ranked feed: the confirmation carries the agent's interest.
    feed: bool = False


class InsightSigner:
    """Signs and checks the HMAC-SHA256 of an insight's provenance.

    The signed bytes are the JSON array ``[id, text, topic, importance, source,
    created, source_message_ids]``, so changing any of them breaks the signature.

    Args:
        key: the shared secret (at least 16 bytes).

    Raises:
        ValueError: the key is shorter than 16 bytes.
    """

    def __init__(self, key: bytes | str) -> None:
        raw = key.encode() if isinstance(key, str) else bytes(key)
        if len(raw) < 16:
            raise ValueError("an insight HMAC key must be at least 16 bytes long")
        self._key = raw

    def __repr__(self) -> str:
        return "InsightSigner(key=***)"

    def _digest(self, insight: Insight) -> str:
        payload = msgspec.json.encode(
            [
                insight.id,
                insight.text,
                insight.topic,
                insight.importance,
                insight.source,
                insight.created,
                list(insight.source_message_ids),
            ]
        )
        mac = hmac.new(self._key, payload, hashlib.sha256).hexdigest()
        return f"{_SIGNATURE_VERSION}:{mac}"

    def sign(self, insight: Insight) -> Insight:
        """Return ``insight`` with its signature set."""
        return msgspec.structs.replace(insight, signature=self._digest(insight))

    def verify(self, insight: Insight) -> bool:
        """Return True when ``insight`` carries a valid signature."""
        sig = insight.signature
        if not isinstance(sig, str):
            return False
        return hmac.compare_digest(sig.encode(), self._digest(insight).encode())

    def check(self, insight: Insight) -> Insight:
        """Return ``insight`` if its signature is valid.

        Raises:
            InsightSignatureError: unsigned, or the signature does not match.
        """
        if insight.signature is None:
            raise InsightSignatureError(
                f"insight {insight.id} from {insight.source!r} is unsigned, "
                "but an insight HMAC key is configured"
            )
        if not self.verify(insight):
            raise InsightSignatureError(
                f"insight {insight.id} claims source {insight.source!r} but its HMAC "
                "does not match (forged or altered)"
            )
        return insight


def make_insight(
    text: str,
    *,
    topic: str,
    importance: float,
    source: str,
    source_message_ids: Iterable[str] = (),
    created: float | None = None,
) -> Insight:
    """Build an unsigned insight with a fresh id (the pool uses this; tests too)."""
    return Insight(
        id=new_id(),
        text=text,
        topic=topic,
        importance=importance,
        source=source,
        created=time.time() if created is None else created,
        source_message_ids=tuple(source_message_ids),
    )
