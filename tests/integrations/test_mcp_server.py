"""``actormem mcp`` as a client runs it: a child process serving MCP over stdio (the
memories in process) and over streamable HTTP (the memories in Redis, still there
after the server restarts), driven by the ``mcp`` client library."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.support import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

_ACTORMEM = [sys.executable, "-m", "actormem"]


def _result(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


async def test_stdio_serves_one_agent_until_the_client_closes() -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "actormem", "mcp", "--agent", "alice"],
        cwd=ROOT,
        env=dict(os.environ),
    )
    async with Client(server) as client:
        note = {"role": "user", "content": "The spare key is under the blue mat."}
        added = _result(await client.call_tool("add_messages", {"messages": [note]}))
        found = _result(await client.call_tool("search_messages", {"query": "blue mat"}))
        assert [m["id"] for m in found["messages"]] == added["ids"]
        refused = await client.call_tool("get_context", {"max_tokens": 0})
        assert refused.is_error
        assert refused.content[0].text.startswith("MemoryInputError: ")  # type: ignore[union-attr]
        context = _result(await client.call_tool("get_context", {}))
        assert context["messages"] == [{"role": "user", "content": note["content"]}]


def test_stdio_exits_when_its_client_closes_stdin() -> None:
    proc = subprocess.run(
        [*_ACTORMEM, "mcp", "--agent", "alice"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr


@contextmanager
def _http_server(config: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``actormem mcp CONFIG --transport http --port 0``, and the URL it serves."""
    proc = subprocess.Popen(
        [*_ACTORMEM, "mcp", str(config), "--transport", "http", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("actormem: serving MCP on "):
                yield proc, line.split(" on ", 1)[1].strip()
                break
        else:
            pytest.fail(f"the server exited {proc.wait()}: {''.join(seen)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM the server; return the rest of its stderr once it exited."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    return err


@pytest.mark.usefixtures("redis_client")  # deletes the test's keys after it
async def test_http_serves_many_agents_from_redis_across_a_restart(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    config = tmp_path / "mcp.toml"
    config.write_text(
        f'[runtime]\ntransport = "redis"\n\n'
        f"[redis]\nurl = {json.dumps(redis_url)}\nprefix = {json.dumps(redis_prefix)}\n"
        "shards = 2\nlease_ms = 2000\n"
    )
    with _http_server(config) as (proc, url):
        async with Client(url) as alice, Client(url) as bob:
            for agent, client in (("alice", alice), ("bob", bob)):
                message = {"role": "user", "content": f"I am {agent}."}
                args = {"agent": agent, "messages": [message]}
                _result(await client.call_tool("add_messages", args))
            refused = await bob.call_tool("search_messages", {"agent": "bob"})
            assert refused.is_error
        # A session bound to one agent by its URL names no agent.
        async with Client(f"{url}?agent=carol") as carol:
            listed = await carol.list_tools()
            assert all("agent" not in t.input_schema["properties"] for t in listed.tools)
            note = {"role": "user", "content": "I am carol."}
            _result(await carol.call_tool("add_messages", {"messages": [note]}))
        err = _stop(proc)
        assert "Traceback" not in err, err
    with _http_server(config) as (proc, url):
        async with Client(url) as client:
            for agent in ("alice", "carol"):
                args = {"agent": agent, "query": "I am"}
                found = _result(await client.call_tool("search_messages", args))
                assert [m["content"] for m in found["messages"]] == [f"I am {agent}."]
        _stop(proc)
