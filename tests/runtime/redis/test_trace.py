"""The stage tracer records every stage of an ask over Redis, in the asker and in
the worker, and costs nothing when it is off."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest
import redis.asyncio as aioredis

from actormem.runtime import Runtime, RuntimeConfig
from actormem.runtime._envelope import Envelope
from actormem.runtime.redis import RedisConfig, RedisTransport
from actormem.runtime.redis.trace import (
    SPANS,
    TRACE_ENV,
    Stage,
    Tracer,
    attach,
    call_sizes,
    from_env,
    load,
    loop_lags,
    spans,
    timelines,
)
from tests.support.actors import Add, GetState, register

pytestmark = pytest.mark.anyio


async def test_an_ask_passes_every_stage_in_order(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    asker, handler = Tracer(), Tracer()
    worker = RedisTransport(redis_client, redis_config)
    client = RedisTransport(redis_client, redis_config, worker=False)
    attach(worker, handler)  # before the runtime opens: its dispatchers take it then
    attach(client, asker)
    config = RuntimeConfig(ask_timeout=10.0)
    async with Runtime(config, transport=worker) as rt, Runtime(config, transport=client) as c:
        register(rt)
        await c.ref("ledger/t").ask(Add("a", 2))  # stored: the commit call writes the reply
        await c.ref("ledger/t").ask(GetState())  # a read: the reply outbox writes it
        await anyio.sleep(0.05)  # the loop watchers look a few times
    worked = handler.records()
    lines = timelines([asker.records(), worked])
    assert len(lines) == 2
    add, read = sorted(lines.values(), key=lambda line: line[Stage.SENT])
    stored = [Stage.COMMITTING, Stage.COMMITTED]
    queued = [Stage.REPLY_QUEUED, Stage.REPLY_WRITTEN]
    for line, missing in ((add, queued), (read, stored)):
        passed = [stage for stage in Stage if not math.isnan(line[stage])]
        assert passed == [stage for stage in Stage if stage not in missing]
        # In order, but for when the worker hears that its commit call returned.
        times = [line[stage] for stage in passed if stage != Stage.COMMITTED]
        assert times == sorted(times)
    found = spans([add, read])
    assert set(found) == {name for name, _, _ in SPANS}
    assert len(found["whole ask"]) == 2 and len(found["handler"]) == 2
    assert len(found["commit call"]) == 1 and len(found["worker reply outbox"]) == 1
    assert len(found["reply to the asker"]) == 2
    # The worker's loop was watched; it read both asks, and stored the add in one call.
    assert loop_lags([worked], 0, math.inf) and loop_lags([asker.records()], 0, math.inf)
    assert sum(call_sizes([worked], Stage.READ, 0, math.inf)) == 2
    assert call_sizes([worked], Stage.COMMITTING, 0, math.inf) == [1]


async def test_tracing_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    assert from_env() is None


def test_records_survive_the_file_a_process_writes(tmp_path: Path) -> None:
    tracer = Tracer()
    tracer.sent(Envelope(recipient="ledger/a", body=None, id="c1", correlation=7), 1)
    tracer.writing(Stage.WRITTEN, 1)
    tracer.answered(7)
    tracer.answered(8)  # not an ask sent here: nothing recorded
    path = tmp_path / "trace.msgpack"
    tracer.dump(path)
    (line,) = timelines([load(path)]).values()
    assert [s for s in Stage if not math.isnan(line[s])] == [
        Stage.SENT,
        Stage.WRITTEN,
        Stage.ANSWERED,
    ]
