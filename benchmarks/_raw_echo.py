"""The raw baseline of the Redis latency benchmark: request/reply over Redis streams
with plain redis-py, no actormem.

A responder process reads requests from one stream with a consumer group
(XREADGROUP COUNT 1000, blocking) and answers each on the asker's reply stream,
its replies and the XACK in one pipeline per batch; the asker (:class:`RawAsker`)
XADDs its requests in pipelines of whatever is queued, and reads its replies with
a blocking XREAD. That is the least any ask over Redis streams costs: two stream
writes and two blocking reads, each batched the way actormem batches them.

The responder's garbage collector runs as a worker's does (the threshold and the
freeze of a runtime with the default config), so that the two sides' collections
differ only by what their round trips leave alive.

Run the responder as ``python -m actormem.benchmarks._raw_echo REQUESTS REPLIES`` with the
Redis URL in ``ACTORMEM_RAW_ECHO_URL`` (the environment, so that a password in it stays
off the command line); it answers until it is terminated.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc

from actormem.runtime import RuntimeConfig, collector
from actormem.runtime.lifetime import keeper
from actormem.runtime.redis import RedisConfig, connect

#: The environment variable that gives the responder process its Redis URL.
URL_ENV = "ACTORMEM_RAW_ECHO_URL"

__all__ = ("RawAsker", "raw_responder")

#: Entries per read, as in the throughput baseline.
_BATCH = 1_000
#: What every reply carries besides its correlation id (about an ``add`` reply's size).
_REPLY = b"\x00" * 48


async def respond(url: str, requests: str, replies: str) -> None:
    """Answer every request on ``requests`` on ``replies``, until cancelled."""
    client: Any = connect(RedisConfig(url=url))
    try:
        await client.xgroup_create(requests, "g", id="0", mkstream=True)
        while True:
            response = await client.xreadgroup("g", "c", {requests: ">"}, count=_BATCH, block=1000)
            for _stream, entries in response or ():
                async with client.pipeline(transaction=False) as pipe:
                    for _entry, fields in entries:
                        pipe.xadd(replies, {b"c": fields[b"c"], b"e": _REPLY})
                    pipe.xack(requests, "g", *(entry for entry, _ in entries))
                    await pipe.execute()
    finally:
        await client.aclose()


class RawAsker:
    """Asks the raw responder: ``await asker.ask(payload)`` returns once it is answered."""

    def __init__(self, client: Any, requests: str, replies: str) -> None:
        self._client = client
        self._requests = requests
        self._replies = replies
        self._queue: deque[tuple[bytes, bytes]] = deque()
        self._ready = anyio.Event()
        self._waiting: dict[bytes, asyncio.Future[None]] = {}
        self._next = 0
        #: The responder's process id (set once it runs).
        self.pid: int | None = None

    async def ask(self, payload: bytes) -> object:
        """Send ``payload`` and wait for its reply."""
        self._next += 1
        correlation = str(self._next).encode()
        future = asyncio.get_running_loop().create_future()
        self._waiting[correlation] = future
        self._queue.append((correlation, payload))
        self._ready.set()
        try:
            return await future
        finally:
            self._waiting.pop(correlation, None)

    async def write(self) -> None:
        """XADD what is queued, one pipeline per batch, until cancelled."""
        while True:
            await self._ready.wait()
            self._ready = anyio.Event()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), _BATCH))]
                async with self._client.pipeline(transaction=False) as pipe:
                    for correlation, payload in batch:
                        pipe.xadd(self._requests, {b"c": correlation, b"e": payload})
                    await pipe.execute()

    async def read(self) -> None:
        """Hand each reply to its asker, until cancelled."""
        after = "0-0"
        while True:
            response = await self._client.xread({self._replies: after}, count=_BATCH, block=1000)
            for _stream, entries in response or ():
                for _entry, fields in entries:
                    future = self._waiting.get(fields[b"c"])
                    if future is not None and not future.done():
                        future.set_result(None)
                after = entries[-1][0]


@asynccontextmanager
async def raw_responder(url: str, env: Mapping[str, str] | None = None) -> AsyncIterator[RawAsker]:
    """A responder process on the Redis at ``url``, and an asker to it (in this process);
    ``env``: more environment variables for the responder."""
    tag = secrets.token_hex(4)
    requests, replies = f"rawask:{tag}:requests", f"rawask:{tag}:replies"
    client: Any = connect(RedisConfig(url=url))
    process = await anyio.open_process(
        [sys.executable, "-m", "actormem.benchmarks._raw_echo", requests, replies],
        env={**os.environ, **(env or {}), URL_ENV: url},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=None,
    )
    keeper().track_pid(process.pid)  # stopped even if this process is SIGKILLed
    try:
        asker = RawAsker(client, requests, replies)
        asker.pid = process.pid
        async with anyio.create_task_group() as tg:
            tg.start_soon(asker.write)
            tg.start_soon(asker.read)
            # The responder is up once it answers.
            with anyio.fail_after(30):
                await asker.ask(b"")
            yield asker
            tg.cancel_scope.cancel()
    finally:
        process.terminate()
        with anyio.move_on_after(5, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()
        keeper().untrack_pid(process.pid)
        with anyio.CancelScope(shield=True):
            await client.delete(requests, replies)
            await client.aclose()


def main(argv: list[str]) -> None:
    requests, replies = argv
    url = os.environ[URL_ENV]
    config = RuntimeConfig()
    collector.hold(config.gc_threshold, config.gc_freeze)
    # Terminated, it leaves as on Ctrl-C: through its exit handlers (a gc record).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with suppress(KeyboardInterrupt):
        anyio.run(respond, url, requests, replies)


if __name__ == "__main__":
    main(sys.argv[1:])
