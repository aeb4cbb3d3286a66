"""What an agent memory does for the insight pool and the keyed long-term entries:
hand the agent's pool commands on to the pool as the agent, take the insights the
pool delivers (kept, over Redis, as entries of the memory's log: :class:`DeliveryLog`),
and serve the keyed entry commands (:mod:`actormem.actors.recall.keyed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final

import msgspec

from actormem.actors.memory.commands import (
    DeleteEntry,
    GetEntry,
    ListNamespaces,
    PutEntry,
    SearchEntries,
)
from actormem.actors.memory.snapshot import encode_delivery
from actormem.actors.messages import Message
from actormem.actors.pool.commands import (
    POOL_KIND,
    AgentCommand,
    DeliveryAck,
    Subscribe,
    Unsubscribe,
)
from actormem.actors.pool.feeds import FEED_TERMS
from actormem.actors.pool.insights import InsightDelivery, InsightSignatureError
from actormem.actors.recall.agent import AgentRecall
from actormem.actors.text.terms import index_terms
from actormem.runtime import ActorContext, Forward, MailboxFullError

__all__ = (
    "INTEREST_MESSAGES",
    "DeliveryLog",
    "Interest",
    "KeyedCommand",
    "interest",
    "serve_keyed",
    "take_delivery",
    "to_pool",
)

#: Delivery entries a memory's log may hold, at least, before it is written again
#: without them (beside a snapshot); past this, as many as its history has messages.
DELIVERIES_KEPT: Final = 256

KeyedCommand = PutEntry | GetEntry | DeleteEntry | SearchEntries | ListNamespaces


#: What a feed's confirmation carries: the terms of the agent's recent messages and
#: the agents they name (see :class:`~actormem.actors.pool.commands.DeliveryAck`).
Interest = Callable[[], tuple[tuple[str, ...], tuple[str, ...]]]

#: The newest messages whose terms and names a feed's confirmation carries.
INTEREST_MESSAGES: Final = 12


def interest(
    working: list[Message], agent: str, known: dict[str, list[str]]
) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, list[str]]]:
    """The terms of ``agent``'s recent messages, newest first, and the agents they
    name: what its next feed is ranked by.

    ``known`` holds the terms of messages seen before, by id. The third value
    holds those of the messages read now, for the next call.
    """
    terms: dict[str, None] = {}
    names: dict[str, None] = {}
    fresh: dict[str, list[str]] = {}
    for message in reversed(working[-INTEREST_MESSAGES:]):
        if message.role == "system":
            continue
        if message.name and message.name != agent:
            names[message.name] = None
        said = known.get(message.id)
        if said is None:
            said = index_terms(message.text())
        fresh[message.id] = said
        if len(terms) < FEED_TERMS:
            terms.update(dict.fromkeys(said))
    return tuple(terms)[:FEED_TERMS], tuple(names), fresh


def to_pool(ctx: ActorContext, agent: str, command: AgentCommand, pool: str) -> Forward:
    """Hand ``command`` on to the pool partition ``pool`` as ``agent`` (the pool
    answers the asker).

    Raises:
        InsightSignatureError: the command names another agent.
    """
    named = command.agent if isinstance(command, Subscribe | Unsubscribe) else command.source
    if named != agent:
        raise InsightSignatureError(
            f"{type(command).__name__} names agent {str(named)[:64]!r}, but this is the "
            f"memory of {agent!r}: an agent acts in the pool only for itself"
        )
    return ctx.forward(pool, command)


def take_delivery(
    ctx: ActorContext,
    recall: AgentRecall,
    delivery: InsightDelivery,
    logged: bool = False,
    interest: Interest | None = None,
) -> bool:
    """Take an insight the pool delivered; refuse one from anybody else.

    Returns True when it was applied (its chain moved on). Confirms how far the
    chain got when the pool asks, or when one before this delivery is missing
    (then the pool sends again what follows). ``logged``: an applied delivery goes
    into the memory's durable log (see :class:`DeliveryLog`), so recall's snapshot
    need not be written for it. ``interest``: what the confirmation of a feed
    carries.

    Raises:
        InsightSignatureError: the delivery did not come from the pool.
    """
    sender = ctx.sender
    if sender is None or sender.partition("/")[0] != POOL_KIND:
        who = repr(sender[:80]) if sender else "code outside any actor"
        raise InsightSignatureError(
            f"an agent memory takes insights only from the pool; this "
            f"InsightDelivery (source {str(delivery.insight.source)[:64]!r}) came from {who}"
        )
    applied, through, missing = recall.inbox.deliver(sender, delivery)
    if applied:
        recall.changed(logged)
    if delivery.ack or missing:
        # With the pool's mailbox full, the pool asks again with a later delivery.
        terms, names = interest() if delivery.feed and interest is not None else ((), ())
        ack = DeliveryAck(through=through, resend=missing, interest=terms, talks_to=names)
        with contextlib.suppress(MailboxFullError):
            ctx.tell_nowait(sender, ack)
    return applied


def serve_keyed(recall: AgentRecall, command: KeyedCommand) -> Any:
    """Serve a keyed long-term entry command: its fields are the arguments of the
    method of the same job."""
    keyed = recall.keyed
    recall.changed()
    methods: dict[type, Callable[..., Any]] = {
        PutEntry: keyed.put,
        GetEntry: keyed.get,
        DeleteEntry: keyed.delete,
        SearchEntries: keyed.search,
        ListNamespaces: keyed.namespaces,
    }
    return methods[type(command)](**msgspec.structs.asdict(command))


class DeliveryLog:
    """The insight deliveries a durable memory keeps as entries of its log instead of
    in a snapshot of its inbox each (see :mod:`actormem.actors.memory.snapshot`).

    The log is written again, its history alone, beside a snapshot of the inbox
    (:meth:`rewrite_due`) when an erased insight may be quoted by an entry, and when
    the entries outnumber both :data:`DELIVERIES_KEPT` and the history's messages:
    so the log holds at most its history and as many deliveries (or 256), and the
    rewrites cost at most one history message's encoding per delivery.

    Attributes:
        pending: entries of deliveries applied since the last durable change.
        stored: delivery entries the stored log holds (after its skipped ones).
        rewrite: an insight was erased (its source forgotten) while the stored log
            may quote it: the log is to be written again without deliveries, beside
            a snapshot of the inbox.
    """

    __slots__ = ("pending", "rewrite", "stored")

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.stored = 0
        self.rewrite = False

    def take(
        self,
        ctx: ActorContext,
        recall: AgentRecall,
        delivery: InsightDelivery,
        interest: Interest | None = None,
    ) -> bool:
        """:func:`take_delivery`, logging an applied delivery; an erased insight's
        delivery changes recall's snapshot and has the log written again instead.

        Raises:
            InsightSignatureError: as :func:`take_delivery`.
        """
        erased = delivery.insight.erased
        applied = take_delivery(ctx, recall, delivery, not erased, interest)
        if applied:
            if erased:
                self.rewrite = self.rewrite or bool(self.stored or self.pending)
            else:
                self.pending.append(encode_delivery(str(ctx.sender), delivery))
        return applied

    def rewrite_due(self, history: int) -> bool:
        """Whether the log is to be written again (see the class docstring), its
        history holding ``history`` messages."""
        if not self.rewrite and self.stored + len(self.pending) > max(DELIVERIES_KEPT, history):
            self.rewrite = True
        return self.rewrite

    def flush(self) -> list[bytes]:
        """The pending entries, now counted as stored."""
        pending, self.pending = self.pending, []
        self.stored += len(pending)
        return pending

    def reset(self, stored: int = 0) -> None:
        """Forget what is pending: the stored log holds ``stored`` deliveries."""
        self.pending = []
        self.stored = stored
        self.rewrite = False
