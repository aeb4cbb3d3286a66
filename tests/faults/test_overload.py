"""Load (issue 7, item 5): ten times the nominal rate, for a sustained period.

The test first measures what the runtime takes (the nominal rate: commands
handled per second with producers that wait on backpressure), then offers ten
times that for a few seconds from many concurrent producers of three kinds:
``tell`` (waits while the mailbox or outbox is full), ``tell_nowait`` (paced at
the offered rate, refused with ``MailboxFullError`` when full) and ``ask`` with a
short timeout (``AskTimeoutError``). Meanwhile a sampler watches every bound:

* every mailbox holds at most its ``mailbox_size``;
* over Redis, the outbox at most ``outbox_size`` and every shard stream at most
  ``stream_limit`` (one producer process here: others' writes could add theirs);
* resident memory levels off: it grows in the last third of the run by little
  next to the first third, when the queues filled up.

Afterwards the history checker compares what each producer was told with what
the actors applied: every accepted command applied exactly once, in producer
order, nothing made up; a refused ``tell_nowait`` applied nowhere; a timed-out
ask applied at most once (it may have been queued before it timed out). No call
fails any other way. Nothing here asserts on time; the figures (nominal and
offered rate, deepest mailbox, longest stream, RSS by thirds) are printed.

An ask that times out while it still waits for mailbox or outbox space used to
leave its reply future holding a ``TimeoutError`` nobody retrieved (asyncio
reported "Future exception was never retrieved" once per such ask); this load
found it, and both tests here check it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import os
import sys
import time
import weakref
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

import anyio
import msgspec
import pytest

from actormem.runtime import Actor, ActorContext, Runtime, RuntimeConfig
from actormem.runtime.errors import AskTimeoutError, MailboxFullError
from actormem.runtime.redis import Keys, RedisConfig, register_message_types, shard_of
from actormem.runtime.redis._client import connect
from actormem.runtime.redis.transport import RedisTransport
from tests.faults.report import Recorder, full_size
from tests.support.history import Applied, History

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

AGENTS: Final = 8
MAILBOX: Final = 32
#: Per-message work in the actor, so that consumers, not the event loop, set the pace.
WORK_ROUNDS: Final = 40
PAD: Final = "x" * 200
NOMINAL_S: Final = 0.8
#: Seconds of overload: 30 under make faults, 4.5 in make test.
OVERLOAD_S: Final = 30.0 if full_size() else 4.5
OFFERED_FACTOR: Final = 10
#: Producers of each kind.
TELLERS: Final = 8
ASKERS: Final = 8
NOWAITERS: Final = 8
ASK_TIMEOUT: Final = 0.05
#: Below this, growth of the resident set is noise (allocator arenas, the sampler itself).
RSS_NOISE: Final = 6 << 20


class Put(msgspec.Struct, frozen=True, tag="overload.Put"):
    """Apply command ``n`` of ``producer``."""

    producer: int
    n: int
    pad: str = ""


class Dump(msgspec.Struct, frozen=True, tag="overload.Dump"):
    """Return every (producer, n) applied, packed, in the order applied."""

    reply_type: ClassVar[Any] = list[int]


register_message_types(Put, Dump)


def pack(producer: int, n: int) -> int:
    return producer << 32 | n


class Tally(Actor):
    """Applies Puts: some work, then one packed integer kept (8 bytes per command)."""

    #: Every tally made, for :func:`records_size`.
    instances: ClassVar[weakref.WeakSet[Tally]] = weakref.WeakSet()

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.applied = array("Q")
        Tally.instances.add(self)

    async def receive(self, message: Any) -> Any:
        match message:
            case Put(producer=producer, n=n, pad=pad):
                digest = pad.encode()
                for _ in range(WORK_ROUNDS):
                    digest = hashlib.blake2b(digest, digest_size=16).digest()
                self.applied.append(pack(producer, n))
                return None
            case Dump():
                return self.applied.tolist()
        raise TypeError(f"unexpected {type(message).__name__}")


@dataclass
class Producer:
    """One producer's account of what it was told, call by call."""

    index: int
    kind: Literal["tell", "ask", "nowait"]
    agent: str
    n: int = 0
    accepted: array[int] = field(default_factory=lambda: array("Q"))
    #: Asks that timed out: maybe applied (queued before the timeout), maybe not.
    timed_out: array[int] = field(default_factory=lambda: array("Q"))
    refused: int = 0
    unexpected: list[str] = field(default_factory=list)

    def next(self) -> Put:
        self.n += 1
        return Put(producer=self.index, n=self.n, pad=PAD)


def records_size(producers: list[Producer]) -> int:
    """Bytes the test's own records hold: what each tally applied and each producer
    was told (they grow with every command by design; the runtime must not)."""
    tallies = sum(sys.getsizeof(t.applied) for t in list(Tally.instances))
    return tallies + sum(sys.getsizeof(p.accepted) + sys.getsizeof(p.timed_out) for p in producers)


def rss() -> int:
    """This process's resident set size in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class Watch:
    """What the sampler saw."""

    mailbox: int = 0
    outbox: int = 0
    stream: int = 0
    #: Resident set size less the test's own records (see :func:`records_size`).
    rss: list[tuple[float, int]] = field(default_factory=list)


async def _tell(rt: Runtime, p: Producer, stop: anyio.Event) -> None:
    while not stop.is_set():
        put = p.next()
        await rt.tell(p.agent, put)  # backpressure: waits while full
        p.accepted.append(put.n)


async def _ask(rt: Runtime, p: Producer, stop: anyio.Event) -> None:
    while not stop.is_set():
        put = p.next()
        try:
            await rt.ask(p.agent, put, timeout=ASK_TIMEOUT)
        except AskTimeoutError:
            p.timed_out.append(put.n)
        else:
            p.accepted.append(put.n)


async def _nowait(rt: Runtime, p: Producer, stop: anyio.Event, rate: float, tick: float) -> None:
    """Offer ``rate`` commands a second, on schedule, whatever happens to them."""
    started = time.monotonic()
    offered = 0
    while not stop.is_set():
        due = int(rate * (time.monotonic() - started)) - offered
        for _ in range(max(0, min(due, 5_000))):
            put = p.next()
            offered += 1
            try:
                rt.tell_nowait(p.agent, put)
            except MailboxFullError:
                p.refused += 1
            else:
                p.accepted.append(put.n)
        await anyio.sleep(tick)


async def _guard(p: Producer, body: Callable[[], Any]) -> None:
    try:
        await body()
    except Exception as exc:  # any other error is a failure of the runtime's contract
        p.unexpected.append(f"{type(exc).__name__}: {exc}")


async def _sample(
    rt: Runtime,
    transport: Any,
    redis: RedisConfig | None,
    watch: Watch,
    producers: list[Producer],
    stop: anyio.Event,
) -> None:
    client = connect(redis) if redis is not None else None
    streams = [Keys(redis.prefix).stream(s) for s in range(redis.shards)] if redis else []
    started = time.monotonic()
    try:
        while not stop.is_set():
            watch.mailbox = max(watch.mailbox, rt.stats().max_mailbox_depth)
            watch.rss.append((time.monotonic() - started, rss() - records_size(producers)))
            if client is not None:
                watch.outbox = max(watch.outbox, transport.stats().outbox)
                for stream in streams:
                    watch.stream = max(watch.stream, int(await client.xlen(stream)))
            await anyio.sleep(0.01)
    finally:
        if client is not None:
            await client.aclose()


def _growth_by_thirds(samples: list[tuple[float, int]]) -> tuple[int, int]:
    """RSS growth over the first and over the last third of the samples' time span."""
    end = samples[-1][0]

    def at(t: float) -> int:
        return next(value for when, value in samples if when >= t)

    first = at(end / 3) - samples[0][1]
    last = samples[-1][1] - at(2 * end / 3)
    return first, last


async def _run(
    rt: Runtime, transport: Any, redis: RedisConfig | None, agents: list[str]
) -> dict[str, Any]:
    for agent in agents:  # activate every actor (over Redis: shards leased, groups made)
        await rt.ask(agent, Dump(), timeout=30)
    index = iter(range(1, 1_000))
    producers: list[Producer] = []

    def make(kind: Literal["tell", "ask", "nowait"], i: int) -> Producer:
        p = Producer(next(index), kind, agents[i % len(agents)])
        producers.append(p)
        return p

    # Nominal: what the runtime takes when producers wait on backpressure.
    stop = anyio.Event()
    before = rt.stats().processed
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i in range(TELLERS):
            p = make("tell", i)
            tg.start_soon(_guard, p, lambda p=p: _tell(rt, p, stop))
        await anyio.sleep(NOMINAL_S)
        stop.set()
    nominal = (rt.stats().processed - before) / (time.monotonic() - started)

    # Overload: ten times that, offered for OVERLOAD_S seconds.
    target = OFFERED_FACTOR * nominal
    stop, sampling = anyio.Event(), anyio.Event()
    watch = Watch()
    before = rt.stats().processed
    started = time.monotonic()
    async with anyio.create_task_group() as outer:
        outer.start_soon(_sample, rt, transport, redis, watch, producers, sampling)
        async with anyio.create_task_group() as tg:
            for i in range(TELLERS):
                p = make("tell", i)
                tg.start_soon(_guard, p, lambda p=p: _tell(rt, p, stop))
            for i in range(ASKERS):
                p = make("ask", i)
                tg.start_soon(_guard, p, lambda p=p: _ask(rt, p, stop))
            share = target / NOWAITERS
            for i in range(NOWAITERS):
                p = make("nowait", i)
                tg.start_soon(_guard, p, lambda p=p: _nowait(rt, p, stop, share, 0.005))
            await anyio.sleep(OVERLOAD_S)
            stop.set()
        elapsed = time.monotonic() - started
        sampling.set()
    handled = rt.stats().processed - before
    attempts = sum(p.n for p in producers[TELLERS:])
    if isinstance(transport, RedisTransport):
        await transport.flush()
    final: dict[str, list[Applied]] = {}
    for agent in agents:  # behind everything queued for it: a barrier, then the state
        packed = await rt.ask(agent, Dump(), timeout=30)
        final[agent] = [Applied(f"{v >> 32}-{v & 0xFFFFFFFF}") for v in packed]
    return {
        "producers": producers,
        "final": final,
        "watch": watch,
        "nominal": nominal,
        "offered": attempts / elapsed,
        "handled": handled / elapsed,
    }


def _history(producers: list[Producer], final: dict[str, list[Applied]]) -> History:
    """What each producer was told was accepted, plus its timed-out asks that were applied."""
    applied = {a.command for entries in final.values() for a in entries}
    history = History()
    for p in producers:
        maybe = set(p.timed_out)
        for n in sorted({*p.accepted, *maybe}):
            command = f"{p.index}-{n}"
            if n in maybe and command not in applied:
                continue  # timed out before it was queued: the asker was told so
            history.sent(command, p.agent, None, producer=str(p.index))
    return history


@contextlib.contextmanager
def unretrieved_timeouts() -> Iterator[list[dict[str, Any]]]:
    """Collect asyncio's "exception was never retrieved" reports of TimeoutErrors
    (the ask defect in the module doc); anything else the loop reports goes on
    to the handler that was there before."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    seen: list[dict[str, Any]] = []

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), TimeoutError) and "never retrieved" in str(
            context.get("message")
        ):
            seen.append(context)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield seen
    finally:
        gc.collect()  # the report is made when the future is collected
        loop.set_exception_handler(previous)


@pytest.fixture(params=["local", "redis"])
def overload_runtime(request: pytest.FixtureRequest) -> tuple[Runtime, RedisConfig | None]:
    runtime_config = RuntimeConfig(mailbox_size=MAILBOX, ask_timeout=30)
    if request.param == "local":
        return Runtime(runtime_config), None
    base: RedisConfig = request.getfixturevalue("redis_config")
    request.getfixturevalue("redis_client")  # deletes the test's keys afterwards
    # A 3 s lease, not the tests' 1 s: this process runs the producers and the worker
    # flat out, and a stall of the loop (CPU taken by the rest of the suite) would
    # otherwise let the lease lapse, and a lapsed lease resets the tallies (they are
    # not durable): that is the lease doing its job, not what this test is about.
    redis = msgspec.structs.replace(
        base, stream_maxlen=200, stream_limit=1_000, outbox_size=256, lease_ms=3_000
    )
    transport = RedisTransport(redis.url, redis)
    return Runtime(runtime_config, transport=transport), redis


async def test_ten_times_the_nominal_rate_stays_bounded_and_loses_nothing(
    overload_runtime: tuple[Runtime, RedisConfig | None], fault_report: Recorder
) -> None:
    rt, redis = overload_runtime
    agents = [f"tally/a{i}" for i in range(AGENTS)]
    with unretrieved_timeouts() as unretrieved:
        async with rt:
            rt.register("tally", Tally)
            result = await _run(rt, rt.transport, redis, agents)
    producers: list[Producer] = result["producers"]
    watch: Watch = result["watch"]
    first, last = _growth_by_thirds(watch.rss)
    print(
        f"\n[{rt.transport.name}] nominal {result['nominal']:,.0f}/s, "
        f"offered {result['offered']:,.0f}/s, handled {result['handled']:,.0f}/s under overload; "
        f"deepest mailbox {watch.mailbox}/{MAILBOX}, outbox {watch.outbox}, "
        f"longest stream {watch.stream}; RSS growth (less the test's records) "
        f"first third {first / 2**20:.1f} MiB, "
        f"last third {last / 2**20:.1f} MiB; "
        f"refused {sum(p.refused for p in producers)}, "
        f"asks timed out {sum(len(p.timed_out) for p in producers)} "
        f"({len(unretrieved)} left an unretrieved TimeoutError)"
    )

    # Every call succeeded (after waiting, perhaps) or failed with a clear error.
    assert [u for p in producers for u in p.unexpected] == []
    assert unretrieved == []
    # The overload was real: producers were turned away or timed out.
    assert sum(p.refused + len(p.timed_out) for p in producers) > 0

    # Every bound held.
    assert 0 < watch.mailbox <= MAILBOX
    if redis is not None:
        assert watch.outbox <= redis.outbox_size
        assert watch.stream <= redis.stream_limit
    assert last <= max(first / 2, RSS_NOISE), (first, last)

    # Exactly once, in producer order, nothing made up (a refused tell_nowait applied
    # anywhere would be "unknown"); every accepted command is there.
    verdict = _history(producers, result["final"]).check(result["final"])
    fault_report.row(
        f"10x the nominal rate for {OVERLOAD_S:g} s ({rt.transport.name})",
        f"{result['offered']:,.0f}/s offered, {result['handled']:,.0f}/s handled",
        verdict,
    )
    assert verdict.ok, str(verdict)
    assert verdict.sent == sum(len(entries) for entries in result["final"].values())


async def test_a_stream_nobody_reads_stays_bounded_while_others_have_room(
    redis_config: RedisConfig, redis_client: Any
) -> None:
    # Skewed load: one shard's workers are away (its stream is full), another's
    # stream has room, and one producer alternates between them. The full stream
    # must not grow past its limit because the entry at the head of the outbox
    # happens to be for the other one.
    config = msgspec.structs.replace(
        redis_config, shards=2, stream_maxlen=50, stream_limit=100, outbox_size=32
    )
    keys = Keys(config.prefix)
    full, roomy = (
        next(f"tally/s{s}-{i}" for i in range(99) if shard_of(f"tally/s{s}-{i}", 2) == s)
        for s in (0, 1)
    )
    for _ in range(config.stream_limit):
        await redis_client.xadd(keys.stream(0), {b"e": b"backlog"})
    transport = RedisTransport(config.url, config, worker=False)
    async with Runtime(transport=transport) as rt:
        producer = Producer(1, "tell", full)

        async def produce() -> None:
            while True:
                await rt.tell(roomy, producer.next())  # room: written
                await rt.tell(full, producer.next())  # waits once the outbox is stuck

        with anyio.move_on_after(1.0):
            await produce()
        length = int(await redis_client.xlen(keys.stream(0)))
        written = int(await redis_client.xlen(keys.stream(1)))
        for shard in (0, 1):  # let the outbox drain, to close at once
            await redis_client.xtrim(keys.stream(shard), maxlen=0)
    assert written > 0  # the other stream took entries meanwhile
    assert length <= config.stream_limit, length


async def test_an_ask_that_times_out_waiting_for_space_leaves_no_unretrieved_error() -> None:
    gate = anyio.Event()

    class Slow(Actor):
        async def receive(self, message: Any) -> Any:
            await gate.wait()

    with unretrieved_timeouts() as unretrieved:
        async with Runtime(RuntimeConfig(mailbox_size=1)) as rt:
            rt.register("slow", Slow)
            rt.tell_nowait("slow/a", "busy")  # the handler holds this one
            await anyio.sleep(0.01)
            rt.tell_nowait("slow/a", "queued")  # the mailbox is full now
            with pytest.raises(AskTimeoutError):
                await rt.ask("slow/a", "one more", timeout=0.05)
            gate.set()
    assert unretrieved == []
