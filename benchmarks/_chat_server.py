"""A loopback OpenAI-compatible chat model for the llm brain's benchmarks, in its own
process (so that serving takes no time from the runtime being measured).

``python -m actormem.benchmarks._chat_server`` serves ``POST /v1/chat/completions``
on a free port of 127.0.0.1 and prints ``port N`` once it listens; with
``--latency MS`` it answers each request MS milliseconds after it came, as a hosted
model would. The model plays
the town: asked to take its step, it speaks to the first other agent named and
shares an insight (two tool calls); given the tools' results, or spoken to, it
answers one line. :func:`chat_server` starts it and stops it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

__all__ = ("chat_server", "reply")

_STEP: Final = re.compile(r"Step (\d+)\. You are (\w+), .* The others are (\w+)")


def _call(n: int, name: str, arguments: dict[str, str]) -> dict[str, Any]:
    return {
        "id": f"call-{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message answering the request ``body``."""
    last = body["messages"][-1]
    step = _STEP.search(str(last.get("content", "")))
    if last.get("role") == "tool" or step is None or "tools" not in body:
        return {"role": "assistant", "content": "Noted; I took my turn."}
    n, me, other = step.groups()
    calls = [
        _call(1, "talk_to", {"agent": other, "message": f"Hello {other}, it is step {n}."}),
        _call(2, "share_insight", {"insight": f"{me} was at the mill at step {n}"}),
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body go in two writes: without this, Nagle's algorithm
    # and the client's delayed ACK hold each answer back for tens of milliseconds.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # the client's check that the endpoint answers
        self._send({"object": "list", "data": [{"id": "loopback", "object": "model"}]})

    #: Seconds each answer waits (``--latency``).
    latency = 0.0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self.latency:
            time.sleep(self.latency)
        message = reply(body)
        self._send(
            {
                "id": "chatcmpl-loopback",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "loopback"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }
        )

    def _send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def chat_server(latency_ms: float = 0.0) -> Iterator[str]:
    """Serve the model in a child process, answering after ``latency_ms``; yield its
    base URL, and stop it after."""
    command = [sys.executable, "-m", "actormem.benchmarks._chat_server"]
    if latency_ms:
        command += ["--latency", str(latency_ms)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().split()
            if line[:1] != ["port"]:
                raise RuntimeError(f"the loopback chat server did not start (exit {proc.poll()})")
            yield f"http://127.0.0.1:{line[1]}/v1"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m actormem.benchmarks._chat_server")
    parser.add_argument("--latency", type=float, default=0.0, metavar="MS")
    _Handler.latency = parser.parse_args().latency / 1000
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
