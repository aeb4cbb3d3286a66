"""Prometheus metrics of one runtime, and the HTTP endpoint that serves them.

A runtime opened with a :class:`~actormem.runtime.config.MetricsConfig` whose
``port`` is set gets a :class:`Metrics`: a private
:class:`prometheus_client.CollectorRegistry` (two runtimes in one process never
collide) and a small HTTP server on the runtime's own event loop, so every scrape
reads the runtime's counters on the thread that changes them.

Most values are counters the runtime keeps anyway (messages processed, restarts,
asks waiting, a transport's redeliveries...), read when Prometheus scrapes. Only
what exists per event (the handling-time histogram, commands by type, group
commit sizes and times) is recorded while the handler runs, and only when metrics
are on: off, a runtime pays one ``None`` check per message.
"""

from __future__ import annotations

import errno
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import anyio
import anyio.abc
import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from actormem.runtime.config import MetricsConfig
from actormem.runtime.errors import ConfigError

if TYPE_CHECKING:
    from actormem.runtime._asks import Asks
    from actormem.runtime._dispatch import Dispatcher
    from actormem.runtime._supervision import Supervisor

__all__ = ("Distribution", "Metrics", "MetricsSource", "open_endpoint", "serve")

log = structlog.get_logger("actormem.metrics")

#: Something that yields metric families when Prometheus scrapes.
MetricsSource = Callable[[], Iterable[Metric]]


def _decades(first: int, last: int) -> tuple[float, ...]:
    """1, 2.5 and 5 times each power of ten from ``10**first`` to ``10**last``."""
    return tuple(round(m * 10.0**e, 6) for e in range(first, last + 1) for m in (1.0, 2.5, 5.0))


#: Handling-time buckets (seconds): from a cached read (0.1 ms) to a slow LLM summary.
HANDLING_BUCKETS: Final = (*_decades(-4, 0), 10.0, 30.0)
#: Commands per group commit (a commit carries 256 at most).
COMMIT_SIZE_BUCKETS: Final = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
#: Seconds one group commit call takes.
COMMIT_SECONDS_BUCKETS: Final = _decades(-4, 0)
#: Distinct command types labelled per actor kind; the rest are counted as ``other``.
MAX_COMMAND_LABELS: Final = 100
#: Label value of the command types past :data:`MAX_COMMAND_LABELS`.
OTHER: Final = "other"

#: A scrape request's head may take this long and this many bytes.
_REQUEST_TIMEOUT: Final = 5.0
_MAX_REQUEST: Final = 16 * 1024


class Distribution:
    """A histogram kept as plain bucket counts: an observation is a bisect and two
    additions, without the lock a ``prometheus_client.Histogram`` takes.

    Args:
        bounds: the buckets' upper bounds, ascending (``+Inf`` is added).
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is at least ``value``."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        """Observations so far."""
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs as Prometheus reads them, ``+Inf`` last."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


def _histogram(
    name: str, doc: str, label: str, by: dict[str, Distribution]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label])
    for value, dist in sorted(by.items()):
        family.add_metric([value], dist.buckets(), dist.total)
    return family


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _labelled_counter(name: str, doc: str, label: str, by: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for value, n in sorted(by.items()):
        family.add_metric([value], n)
    return family


class _Other:
    """Stands for the command types past :data:`MAX_COMMAND_LABELS` (labelled ``other``)."""


class _KindRecord:
    """What one actor kind's handlers did: their times, and the commands by type."""

    __slots__ = ("failed", "handled", "handling", "rejected")

    def __init__(self) -> None:
        self.handling = Distribution(HANDLING_BUCKETS)
        self.handled: dict[type, int] = {}
        self.failed: dict[type, int] = {}
        self.rejected: dict[type, int] = {}


def _by_name(counts: Iterable[dict[type, int]]) -> dict[str, int]:
    """Counts by command type, summed over the kinds, by the type's name."""
    out: dict[str, int] = {}
    for by_type in counts:
        for command, n in by_type.items():
            name = OTHER if command is _Other else command.__name__
            out[name] = out.get(name, 0) + n
    return out


class Metrics(Collector):
    """One runtime's metrics (see the module docstring and docs/operations.md).

    The runtime makes it when its ``MetricsConfig`` has a port; a transport adds its
    own families through :meth:`add`, and so may the application (its actors'
    counters). Everything runs on the runtime's event loop.

    Args:
        dispatch: the runtime's cells and dispatchers.
        kinds: the runtime's registered actor kinds, by name.
        asks: the asks waiting for replies.
        supervisor: counts handler crashes and restarts.

    Attributes:
        registry: the private registry the endpoint serves.
    """

    def __init__(
        self, dispatch: Dispatcher, kinds: Mapping[str, object], asks: Asks, supervisor: Supervisor
    ) -> None:
        self._dispatch = dispatch
        self._kinds = kinds
        self._asks = asks
        self._supervisor = supervisor
        self._sources: list[MetricsSource] = []
        self._kinds_seen: dict[str, _KindRecord] = {}
        self._commit_sizes = Distribution(COMMIT_SIZE_BUCKETS)
        self._commit_seconds = Distribution(COMMIT_SECONDS_BUCKETS)
        self.registry = CollectorRegistry()
        self.registry.register(self)

    # -- per event (only while metrics are on) --------------------------------------------

    def handled(self, kind: str, message: object, seconds: float, outcome: int) -> None:
        """Count one message an actor of ``kind`` handled in ``seconds``.

        ``outcome``: 0 handled, 1 rejected (an expected error: bad input), 2 failed
        (the handler crashed).
        """
        # The hottest path with metrics on: no method calls, counts by type object
        # (named only at scrape time).
        record = self._kinds_seen.get(kind)
        if record is None:
            record = self._kinds_seen[kind] = _KindRecord()
        dist = record.handling
        dist.counts[bisect_left(HANDLING_BUCKETS, seconds)] += 1
        dist.total += seconds
        command = type(message)
        handled = record.handled
        n = handled.get(command)
        if n is None:
            if len(handled) >= MAX_COMMAND_LABELS:
                command = _Other
            n = handled.get(command, 0)
        handled[command] = n + 1
        if outcome:
            into = record.rejected if outcome == 1 else record.failed
            into[command] = into.get(command, 0) + 1

    def committed(self, commands: int, seconds: float) -> None:
        """Count one group commit of ``commands`` commands that took ``seconds``."""
        self._commit_sizes.observe(commands)
        self._commit_seconds.observe(seconds)

    # -- at scrape time -----------------------------------------------------------------------

    def add(self, source: MetricsSource) -> None:
        """Collect ``source``'s families too, at every scrape."""
        self._sources.append(source)

    def collect(self) -> Iterator[Metric]:
        """The runtime's families, then those of every added source."""
        dispatch = self._dispatch
        census = dispatch.census()
        active = census.active_by_kind
        yield _gauge(
            "actormem_mailbox_depth", "Messages waiting in all mailboxes.", census.mailbox_depth
        )
        yield _gauge(
            "actormem_mailbox_depth_max",
            "Messages waiting in the deepest mailbox.",
            census.max_mailbox_depth,
        )
        actors = GaugeMetricFamily(
            "actormem_actors_active", "Actors in memory, by kind.", labels=["kind"]
        )
        passivated = CounterMetricFamily(
            "actormem_actors_passivated",
            "Idle actors dropped from memory (their state stored), by kind.",
            labels=["kind"],
        )
        for kind in sorted(self._kinds):
            actors.add_metric([kind], active.get(kind, 0))
            passivated.add_metric([kind], dispatch.passivated.get(kind, 0))
        yield actors
        yield passivated
        yield _gauge(
            "actormem_actors_stopped",
            "Actors stopped by supervision, in their back-off.",
            census.stopped,
        )
        yield _counter(
            "actormem_messages_processed",
            "Messages taken from mailboxes (handled or shed).",
            dispatch.processed,
        )
        records = self._kinds_seen.values()
        yield _labelled_counter(
            "actormem_commands_handled",
            "Commands handled (any outcome), by command type.",
            "command",
            _by_name(r.handled for r in records),
        )
        yield _labelled_counter(
            "actormem_commands_failed",
            "Commands whose handler crashed, by command type.",
            "command",
            _by_name(r.failed for r in records),
        )
        yield _labelled_counter(
            "actormem_commands_rejected",
            "Commands refused with an expected error (bad input), by command type.",
            "command",
            _by_name(r.rejected for r in records),
        )
        yield _histogram(
            "actormem_handling_seconds",
            "Time a handler took for one message, by actor kind.",
            "kind",
            {kind: r.handling for kind, r in self._kinds_seen.items()},
        )
        yield _counter("actormem_handler_failures", "Handler crashes.", self._supervisor.failures)
        yield _counter(
            "actormem_restarts", "Restarts done by supervision.", self._supervisor.restarts
        )
        yield _gauge(
            "actormem_asks_in_flight", "Asks waiting for a reply.", len(self._asks.pending)
        )
        yield _counter(
            "actormem_asks_resent",
            "Asks sent again, unchanged, because no reply came in time.",
            self._asks.resent,
        )
        yield _counter(
            "actormem_asks_expired",
            "Asks dropped unhandled because their deadline had passed.",
            dispatch.expired,
        )
        if self._commit_sizes.count:
            yield HistogramMetricFamily(
                "actormem_group_commit_size",
                "Commands stored by one group commit.",
                buckets=self._commit_sizes.buckets(),
                sum_value=self._commit_sizes.total,
            )
            yield HistogramMetricFamily(
                "actormem_group_commit_seconds",
                "Time one group commit call took.",
                buckets=self._commit_seconds.buckets(),
                sum_value=self._commit_seconds.total,
            )
        for source in self._sources:
            yield from source()

    def scrape(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition of every family now, and its content type (the format
        ``accept``, a request's Accept header, asks for: Prometheus text by default,
        OpenMetrics on request)."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type


async def open_endpoint(config: MetricsConfig) -> anyio.abc.Listener[anyio.abc.SocketStream]:
    """Bind the metrics endpoint's listening socket (before anything else opens, so
    a taken port stops the runtime at once).

    Raises:
        ConfigError: the port is taken, or the address cannot be bound (named).
    """
    try:
        return await anyio.create_tcp_listener(local_host=config.host, local_port=config.port)
    except OSError as exc:
        reason = (
            "is already in use"
            if exc.errno == errno.EADDRINUSE
            else f"cannot be bound: {exc.strerror}"
        )
        raise ConfigError(
            f"metrics port {config.port} on {config.host} {reason} "
            "(choose another with [metrics] port or --metrics-port)"
        ) from exc


async def serve(
    metrics: Metrics, listener: anyio.abc.Listener[anyio.abc.SocketStream], where: str
) -> None:
    """Answer scrapes on ``listener`` until cancelled (``where`` names it in the log)."""

    async def answer(stream: anyio.abc.SocketStream) -> None:
        try:
            async with stream:
                await _answer(metrics, stream)
        except Exception as exc:  # a client that hangs up mid-request: its problem
            log.debug("metrics_request_failed", reason=repr(exc))

    async with listener:
        log.info("metrics_serving", url=f"http://{where}/metrics")
        try:
            await listener.serve(answer)
        except OSError as exc:  # out of file descriptors, say: the runtime carries on
            log.error("metrics_endpoint_failed", url=f"http://{where}/metrics", reason=str(exc))


async def _answer(metrics: Metrics, stream: anyio.abc.SocketStream) -> None:
    head = b""
    with anyio.move_on_after(_REQUEST_TIMEOUT):
        while b"\r\n\r\n" not in head and len(head) < _MAX_REQUEST:
            try:
                head += await stream.receive()
            except anyio.EndOfStream:
                break
    line, _, rest = head.partition(b"\r\n")
    parts = line.split()
    if len(parts) < 2:
        await stream.send(_response(400, b"bad request\n", "text/plain"))
        return
    method, path = parts[0], parts[1].partition(b"?")[0]
    accept = ""
    for header in rest.split(b"\r\n"):
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"accept":
            accept = value.strip().decode("latin-1")
    if method not in (b"GET", b"HEAD"):
        await stream.send(_response(405, b"only GET\n", "text/plain"))
    elif path not in (b"/metrics", b"/"):
        await stream.send(_response(404, b"the metrics are at /metrics\n", "text/plain"))
    else:
        body, content_type = metrics.scrape(accept)
        await stream.send(_response(200, body, content_type, head_only=method == b"HEAD"))


_REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _response(status: int, body: bytes, content_type: str, *, head_only: bool = False) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
