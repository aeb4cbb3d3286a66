"""Poison envelopes: entries no actor can take, XADDed straight into the shard streams
of live worker processes (past the sending side's address check).

Hypothesis makes the corpus: addresses of every shape (empty kinds and keys, no
``/``, control characters, unknown kinds, names a factory refuses, valid ones)
and raw envelopes whose every field may be of the wrong type or missing. Each
entry is classified by the rules the worker must apply (the codec, the address
check, the registered kinds, the factory); then the workers must still be the
same processes, every bad entry must be in the dead-letter stream with its
reason, every valid command must be applied exactly once (the history checker),
and every shard must serve a command sent afterwards.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormem.runtime import ActorContext, InvalidAddressError, Runtime
from actormem.runtime._envelope import Envelope
from actormem.runtime.errors import MessageDecodeError
from actormem.runtime.ids import split_address
from actormem.runtime.redis import Keys, RedisConfig, default_codec, shard_of
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.support.actors import Add, Ledger
from tests.support.history import Applied, History
from tests.support.streams import (
    client_runtime,
    eventually,
    every_worker_owns_shards,
    stored_tokens,
)

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

REGISTER = "tests.faults.test_poison:register"
#: The kinds the workers serve; ``picky`` refuses keys that start with ``no``.
KINDS = ("ledger", "picky")


def picky(ctx: ActorContext) -> Ledger:
    if ctx.key.startswith("no"):
        raise LookupError(f"no ledger may be called {ctx.key!r}")
    return Ledger(ctx)


def register(rt: Runtime) -> None:
    """The workers' kinds (the worker subprocesses call this)."""
    rt.register("ledger", Ledger)
    rt.register("picky", picky)


def corpus(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` examples of ``strategy``, drawn by Hypothesis (derandomized: the same
    corpus every run)."""
    found: list[Any] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategy)
    def collect(example: Any) -> None:
        found.append(example)

    collect()
    return found


KNOWN_BAD = ["memory/", "memory", "pool/", "/", "", "/x", "ledger/", "ledger", "picky/no"]

addresses = st.one_of(
    st.sampled_from(KNOWN_BAD),
    st.text(max_size=20),
    st.builds(
        lambda kind, key: f"{kind}/{key}",
        st.sampled_from([*KINDS, "memory", "pool", "ghost", ""]),
        st.one_of(st.text(max_size=12), st.sampled_from(["no", "nobody", "ok", "a/b"])),
    ),
)

_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_any = st.one_of(st.none(), _int64, st.text(max_size=10), st.binary(max_size=10), st.booleans())
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "recipient": st.one_of(addresses, _any),
        # Never a plain value a ledger would take in and crash on: that is a
        # handler's failure, supervised, not an envelope no actor can take.
        "body": st.one_of(
            st.just("ADD"),  # replaced with a valid Add body
            st.fixed_dictionaries({"type": st.sampled_from(["ledger.Add", "nope"])}),
            st.binary(max_size=10),
        ),
        "id": st.one_of(st.just(""), _any),
        "sender": _any,
        "reply_to": _any,
        "correlation": _any,
        "deadline": st.one_of(
            st.none(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3)
        ),
    },
)


class Expected:
    """What the worker must do with each entry: apply it, dead-letter it (with what
    in the reason), or drop it unhandled (an ask whose deadline passed)."""

    def __init__(self) -> None:
        self.applied: dict[str, str] = {}  # token -> address
        self.dead: dict[str, str] = {}  # "<stream> <entry>" -> part of the reason
        self.skipped = 0


def classify(data: bytes, token: str) -> tuple[str, str]:
    """``("apply", address)``, ``("dead", reason part)`` or ``("skip", "")`` for an entry."""
    try:
        env = default_codec.decode_envelope(data)
    except MessageDecodeError as exc:
        return "dead", str(exc)
    try:
        kind, key = split_address(env.recipient)
    except InvalidAddressError:
        return "dead", "invalid actor address"
    if kind not in KINDS:
        return "dead", f"no actor kind {kind!r}"
    if kind == "picky" and key.startswith("no"):
        return "dead", "refused the address"
    if env.deadline is not None and env.deadline < time.time() + 60:
        return "skip", ""  # an ask nobody waits for (or about to be): not handled
    if env.body != Add(token):
        return "skip", ""  # not a valid envelope of this corpus: checked by its decode
    return "apply", env.recipient


def encode_raw(raw: dict[str, Any], token: str) -> bytes | None:
    if raw.get("body") == "ADD":
        raw = {**raw, "body": {"type": "ledger.Add", "token": token}}
    try:
        return msgspec.msgpack.encode(raw)
    except (OverflowError, TypeError):
        return None


@pytest.mark.timeout(600)
async def test_poison_envelopes_never_kill_a_worker(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    count = 600 if full_size() else 150
    config = redis_config.replace(shards=3)
    keys = Keys(config.prefix)
    expected = Expected()
    history = History()
    entries: list[tuple[str, bytes, str]] = []  # (stream, data, token)
    for n, address in enumerate(corpus(addresses, count)):
        token = f"a{n}"
        envelope = Envelope(recipient=address, body=Add(token), id=f"fuzz-a{n}")
        entries.append(("", default_codec.encode_envelope(envelope), token))
    for n, raw in enumerate(corpus(envelopes, count)):
        data = encode_raw(raw, f"e{n}")
        if data is not None:
            entries.append(("", data, f"e{n}"))
    async with (
        WorkerProcesses(2, config, REGISTER, log_level="warning") as workers,
        client_runtime(config) as rt,
    ):
        await every_worker_owns_shards(workers)
        pids = [workers.pid(i) for i in range(2)]
        # The sending side refuses what the workers would have to dead-letter.
        for address in ("memory/", "memory", "pool/"):
            with pytest.raises(InvalidAddressError):
                await rt.tell(address, Add("never"))
        for _, data, token in entries:
            verdict, detail = classify(data, token)
            try:
                recipient = msgspec.msgpack.decode(data).get("recipient")
            except (msgspec.DecodeError, AttributeError):
                recipient = None
            # Into the recipient's shard when it has one, else any shard.
            shard = shard_of(recipient, config.shards) if isinstance(recipient, str) else 0
            stream = keys.stream(shard)
            entry = (await redis_client.xadd(stream, {b"e": data})).decode()
            if verdict == "dead":
                expected.dead[f"{stream} {entry}"] = detail
            elif verdict == "apply":
                expected.applied[token] = detail
                history.sent(token, detail, token)
            else:
                expected.skipped += 1

        async def all_dead() -> bool:
            letters = await redis_client.xrange(keys.dead_letters())
            seen = {f"{f[b'stream'].decode()} {f[b'entry'].decode()}" for _, f in letters}
            return set(expected.dead) <= seen

        await eventually(all_dead, "every bad entry is dead-lettered", limit=120.0)
        # Every shard still serves: a valid command on each, after the poison.
        after = {shard_of(f"ledger/after{i}", config.shards): f"ledger/after{i}" for i in range(60)}
        for address in after.values():
            history.sent(f"after-{address}", address, f"after-{address}")
            assert await rt.ask(address, Add(f"after-{address}"), timeout=30) >= 1
        agents = sorted({*expected.applied.values(), *after.values()})

        async def all_applied() -> bool:
            stored = await stored_tokens(redis_client, config, agents)
            return sum(len(t) for t in stored.values()) >= len(expected.applied) + len(after)

        await eventually(all_applied, "every valid command is applied", limit=120.0)
        stored = await stored_tokens(redis_client, config, agents)
        # The same worker processes, never restarted.
        assert [workers.pid(i) for i in range(2)] == pids
        assert None not in pids
    letters = await redis_client.xrange(keys.dead_letters())
    reasons = {f"{f[b'stream'].decode()} {f[b'entry'].decode()}": f[b"reason"] for _, f in letters}
    for where, part in expected.dead.items():
        assert part in reasons[where].decode(), (where, part, reasons[where])
    verdict = history.check({a: [Applied(t) for t in tokens] for a, tokens in stored.items()})
    fault_report.row(
        "poison envelopes",
        f"2 workers, {len(entries):,} fuzzed entries ({len(expected.dead):,} dead-lettered, "
        f"{len(expected.applied)} valid), 0 worker deaths",
        verdict,
    )
    assert verdict.ok, str(verdict)
    assert len(expected.dead) > len(entries) // 3  # the corpus is mostly poison
