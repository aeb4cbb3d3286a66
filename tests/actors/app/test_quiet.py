"""Embedded, the runtime writes nothing to stdout or stderr until logging is configured.

Each case runs a small embedding program in a fresh interpreter, so that nothing
this test process configured (the suite's own logging) leaks into what is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support import ROOT

#: An application using the runtime on a transport; argv: transport, Redis URL or "",
#: then what configures logging: "none", "stdlib" or a [logging] section as JSON.
_PROGRAM = textwrap.dedent(
    """
    import json, logging, sys
    import anyio
    from actormem import AppConfig, MemoryRuntime
    from actormem.runtime.config import decode_config

    transport, url, logging_setup = sys.argv[1:4]
    data = {"runtime": {"transport": transport}}
    if url:
        data["redis"] = {"url": url, "prefix": "quiet" + str(id(data))}
    if logging_setup == "stdlib":
        logging.basicConfig(level=logging.INFO, format="%(name)s|%(levelname)s|%(message)s")
    elif logging_setup != "none":
        data["logging"] = json.loads(logging_setup)
    config = decode_config(data, AppConfig, source="test")

    async def main():
        async with MemoryRuntime(config) as rt:
            alice = rt.memory("alice")
            await alice.add({"role": "user", "content": "the key is under the mat"})
            await alice.subscribe("town")
            await alice.context(max_tokens=256)
            await alice.forget_shares()

    anyio.run(main)
    """
)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.slow)])
def transport(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The transport, and the URL of a Redis the tests started (redis only)."""
    if request.param == "memory":
        return ("memory", "")
    url: str = request.getfixturevalue("redis_url")
    return ("redis", url)


def run_embedded(
    transport: tuple[str, str], logging_setup: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORMEM_", "REDIS_"))}
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM, *transport, logging_setup],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )


def test_embedded_runtime_writes_nothing(transport: tuple[str, str]) -> None:
    proc = run_embedded(transport, "none")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == ""


def test_logging_section_is_honoured(transport: tuple[str, str]) -> None:
    proc = run_embedded(transport, json.dumps({"format": "json", "level": "info"}))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    events = [json.loads(line) for line in proc.stderr.splitlines()]
    assert {"event": "pool_source_forgotten", "level": "info"}.items() <= next(
        e for e in events if e["event"] == "pool_source_forgotten"
    ).items()
    assert all(e["level"] != "debug" for e in events)


def test_stdlib_logging_configured_by_the_app_gets_the_events(
    transport: tuple[str, str],
) -> None:
    proc = run_embedded(transport, "stdlib")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert "actormem.pool|INFO|pool_source_forgotten insights=0 source=alice" in lines, lines
    assert all(line.startswith("actormem.") for line in lines), lines
