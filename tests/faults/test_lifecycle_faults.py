"""Lifecycle faults: the process that started the workers is SIGKILLed mid-load.

Its workers get SIGTERM from the kernel (the parent-death signal), drain and hand
their shards back, and its watchdog removes their temp dir; a new set of workers
then serves the same agents. Every command the killed driver had acknowledged
is applied once, in order (the one in flight at the kill may or may not be: it
was never acknowledged). ``make faults`` prints the row.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.actors.config import AppConfig
from actormem.benchmarks._redis import wait_drained
from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.support import ROOT
from tests.support.history import Applied, History
from tests.support.processes import family, leftovers, needs_proc, survivors
from tests.support.streams import eventually, stored_tokens

pytestmark = [pytest.mark.faults, pytest.mark.anyio, needs_proc]

REGISTER = "tests.support.actors:register"
AGENTS = [f"ledger/life{i}" for i in range(12)]

# The driver: two workers and a client that asks Adds round-robin, saying what it
# sends and what was acknowledged, until it is killed.
_DRIVER = textwrap.dedent(
    """
    import sys
    import anyio, msgspec
    from actormem.runtime.redis import RedisConfig
    from actormem.runtime.redis.worker import WorkerProcesses
    from tests.support.actors import Add
    from tests.support.streams import client_runtime

    config = msgspec.json.decode(sys.argv[1], type=RedisConfig)
    agents = sys.argv[2].split(",")

    async def main() -> None:
        async with WorkerProcesses(2, config, "tests.support.actors:register"):
            async with client_runtime(config) as rt:
                i = 0
                while True:
                    agent, token = agents[i % len(agents)], f"c{i}"
                    print("send", agent, token, flush=True)
                    await rt.ref(agent).ask(Add(token), timeout=30)
                    print("ack", agent, token, flush=True)
                    i += 1

    anyio.run(main)
    """
)


def _drive_and_kill(config: RedisConfig, acks: int, tmp: Path) -> tuple[list[list[str]], float]:
    """Run the driver until ``acks`` commands are acknowledged, SIGKILL it, and wait
    for its workers and watchdog to end and its temp dir to go; its lines, and how
    long its workers took to stop."""
    tmp.mkdir()
    errors = tmp.parent / "driver.err"
    with errors.open("w") as stderr:
        driver = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, msgspec.json.encode(config).decode(), ",".join(AGENTS)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=ROOT,
            env={"TMPDIR": str(tmp), "PATH": "/usr/bin:/bin"},
        )
    assert driver.stdout is not None
    try:
        lines: list[list[str]] = []
        deadline = time.monotonic() + 300
        while sum(line[0] == "ack" for line in lines) < acks:
            line = driver.stdout.readline().split()
            assert line, f"the driver exited: {errors.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "the driver is too slow"
            lines.append(line)
        processes = family(driver.pid)
        driver.kill()
        killed = time.monotonic()
        rest = driver.stdout.read()  # through the same buffer as the lines read so far
    finally:
        driver.kill()
        driver.wait()
        driver.stdout.close()
    lines += [line.split() for line in rest.splitlines()]
    # Its workers stop with it (they drain and hand their shards back), its temp
    # dir goes too.
    assert len(processes) >= 3, processes  # 2 workers and the watchdog
    assert survivors(processes, within=30) == []
    stopped_s = time.monotonic() - killed
    assert leftovers(tmp, within=10) == []
    return lines, stopped_s


@pytest.mark.timeout(600)
async def test_the_workers_parent_sigkilled_loses_and_repeats_nothing_acknowledged(
    redis_client: aioredis.Redis,
    redis_config: RedisConfig,
    fault_report: Recorder,
    tmp_path: Path,
) -> None:
    acks = 3_000 if full_size() else 300
    config = msgspec.structs.replace(redis_config, shards=4)
    tmp = tmp_path / "tmp"
    lines, stopped_s = await anyio.to_thread.run_sync(_drive_and_kill, config, acks, tmp)
    history = History()
    acked = {token for what, _, token in lines if what == "ack"}
    in_flight = [token for what, _, token in lines if what == "send" and token not in acked]
    for what, agent, token in lines:
        if what == "send":
            history.sent(token, agent, token)
    async with WorkerProcesses(2, config, REGISTER):
        app = AppConfig(redis=config)
        await wait_drained(redis_client, app, 60.0)

        async def all_acked_stored() -> bool:
            stored = await stored_tokens(redis_client, config, AGENTS)
            return acked <= {t for tokens in stored.values() for t in tokens}

        await eventually(all_acked_stored, "every acknowledged command is stored")
        stored = await stored_tokens(redis_client, config, AGENTS)
    applied = {t for tokens in stored.values() for t in tokens}
    for token in in_flight:
        if token not in applied:
            history.forget(token)  # never acknowledged, and never applied: not lost
    verdict = history.check({a: [Applied(t) for t in tokens] for a, tokens in stored.items()})
    fault_report.row(
        "the workers' parent SIGKILLed; new workers take over",
        f"2 workers, {len(AGENTS)} agents, {len(acked):,} acknowledged asks",
        verdict,
        recovery_s=stopped_s,
    )
    assert verdict.ok, str(verdict)
