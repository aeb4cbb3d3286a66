"""Counts the domain actors keep for the Prometheus endpoint.

One :class:`ActorCounts` is shared by every actor registered on a runtime
(:func:`~actormem.actors.app.wiring.register_actors` makes it), so the counts go on
across passivations and restarts of the actors themselves. Counting is a few
integer additions per compression or delivery; the families are built only when
Prometheus scrapes a runtime that serves metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ("ActorCounts", "families")


class ActorCounts:
    """What the domain actors of one runtime did since it started.

    Attributes:
        compressions: compressions that took something out of a view.
        tokens_saved: tokens those compressions took out.
        pool_deliveries: insights the pool told to subscribed agents' memories.
        pool_delivery_failures: deliveries the pool lost (the agent gone, or too
            many deferred at once).
    """

    __slots__ = ("compressions", "pool_deliveries", "pool_delivery_failures", "tokens_saved")

    def __init__(self) -> None:
        self.compressions = 0
        self.tokens_saved = 0
        self.pool_deliveries = 0
        self.pool_delivery_failures = 0


def families(counts: ActorCounts) -> Iterator[Metric]:
    """The counts as Prometheus counters."""
    from prometheus_client.metrics_core import CounterMetricFamily

    for name, doc, value in (
        ("actormem_compressions", "Compressions that shrank a view.", counts.compressions),
        ("actormem_compression_tokens_saved", "Tokens compressions took out.", counts.tokens_saved),
        ("actormem_pool_deliveries", "Insights told to subscribers.", counts.pool_deliveries),
        (
            "actormem_pool_delivery_failures",
            "Insight deliveries lost (agent gone, too many deferred).",
            counts.pool_delivery_failures,
        ),
    ):
        yield CounterMetricFamily(name, doc, value=value)
