"""The insight pool actor (kind ``pool``): agents share insights, subscribers receive them.

One pool actor (``pool/main`` by convention) holds every shared insight, by topic:

- :class:`Share` records an insight with its provenance (source agent, time, the
  message ids it came from), after sanitizing its text; an exact or near
  duplicate of an insight already held on the topic is not stored again, and the
  reply names the insight it duplicates;
- each topic keeps at most ``per_topic_limit`` insights (the least important,
  then the oldest, go first);
- every new insight is told, as an :class:`InsightDelivery`, to
  ``<memory_kind>/<agent>`` of each agent subscribed to its topic (except its
  source); :class:`Subscribe` / :class:`Unsubscribe` take topics or ``*`` (all);
- :class:`RegisterFact` shares on the facts topic, which reaches every agent the
  pool knows whatever it subscribes to (MARSYS's coordinated facts: a fact one
  agent registers is visible to all);
- :class:`QueryInsights` returns the best insights of a topic, or of all;
- :class:`ForgetSource` removes the text of what an agent shared and drops its
  subscriptions and delivery cursors.

**Feeds.** With ``delivery = "feed"`` a new insight goes to nobody at once: at each
:class:`FeedTick` every subscriber gets its ranked feed (see
:mod:`actormem.actors.pool.feeds`). Facts still reach every known agent at once.

**Partitions.** With ``partitions`` > 1 the pool is that many actors
(:func:`~actormem.actors.pool.commands.pool_addresses`). Each serves the agents
that hash to it (:func:`~actormem.actors.pool.commands.pool_address`): their
shares, subscriptions, deliveries and feeds. Each holds a copy of every insight:
a partition that stores a new one tells the others (:class:`PeerShared`), and a
forgotten source is forgotten by all (:class:`PeerForgot`).

**Trust comes from the envelope.** The commands that act for an agent (share,
fact, subscribe, unsubscribe, forget) are taken only from that agent's memory
actor, as the runtime recorded the sender (:attr:`ActorContext.sender`); the
agent named in a field must be that one. A memory takes deliveries only from the
pool, the same way.

**Durable.** The pool's state (insights, subscriptions, the ids of the shares it
applied and every agent's delivery cursor, see :mod:`actormem.actors.pool.cursors`)
is :class:`~actormem.runtime.state.Durable`: over Redis what every command did to
it is stored with the command, as an entry of its journal (see
:mod:`actormem.actors.pool.journal`: a share costs what it changed, not the
whole pool), so it survives its worker being killed or restarted, and a
restarted pool sends again what its subscribers may not have received.
Delivery never blocks the pool on a full mailbox (see
:mod:`actormem.actors.pool.delivery`).
"""

__all__ = ()
