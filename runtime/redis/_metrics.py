"""The Redis transport's Prometheus families, read from its counters at scrape time
(the group commit histograms are recorded by :class:`~actormem.runtime.metrics.Metrics`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from actormem.runtime.redis.transport import RedisTransport

__all__ = ("families",)

#: (name, help, RedisTransportStats field) of every counter.
_COUNTERS = (
    (
        "actormem_redeliveries",
        "Stream entries delivered again (a failure, a dead worker).",
        "redelivered",
    ),
    (
        "actormem_duplicates_skipped",
        "Commands skipped: their id was already applied.",
        "duplicates",
    ),
    (
        "actormem_dead_letters",
        "Entries this process moved to the dead-letter stream.",
        "dead_lettered",
    ),
    ("actormem_lease_acquisitions", "Shard leases taken (or taken back).", "leases_acquired"),
    (
        "actormem_lease_losses",
        "Shard leases lost (expired, or taken by another worker).",
        "leases_lost",
    ),
    (
        "actormem_asks_handed_over",
        "Asks to actors of the shards this worker owns, delivered in memory.",
        "handed_over",
    ),
    (
        "actormem_tells_handed_over",
        "Tells actors sent to actors of the shards this worker owns, delivered in memory.",
        "tells_handed_over",
    ),
    (
        "actormem_expired_unsent",
        "Asks and replies dropped unsent: their deadline passed.",
        "expired_unsent",
    ),
)


def families(transport: RedisTransport) -> Iterator[Metric]:
    """The transport's counters and gauges now."""
    stats = transport.stats()
    for name, doc, field in _COUNTERS:
        yield CounterMetricFamily(name, doc, value=getattr(stats, field))
    yield GaugeMetricFamily(
        "actormem_owned_shards",
        "Shards whose lease this worker holds.",
        value=len(stats.owned_shards),
    )
    yield GaugeMetricFamily(
        "actormem_outbox_depth", "Envelopes queued for XADD.", value=stats.outbox
    )
