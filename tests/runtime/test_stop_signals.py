"""StopSignals: the first SIGINT/SIGTERM asks the command to stop; its echo is no second."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from actormem.runtime.cli import StopSignals


@pytest.mark.anyio
async def test_a_signal_sent_twice_at_once_is_one_request_to_stop() -> None:
    # GNU timeout sends SIGTERM to the command, then to the command's process group.
    lines: list[str] = []
    stops = StopSignals(lambda: "finishing", say=lines.append)
    async with anyio.create_task_group() as tg:
        await tg.start(stops.watch)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        with anyio.fail_after(5):
            await stops.requested.wait()
        await anyio.sleep(0.05)  # the echo, delivered, is handled by now
        tg.cancel_scope.cancel()
    # A second request would have ended this process (os._exit) before this line.
    assert lines == ["actormem: stopping (SIGTERM): finishing"]
    assert stops.exit_code == 143
