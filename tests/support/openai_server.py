"""A loopback OpenAI-compatible Chat Completions server for tests, with switchable faults.

Runs in a background thread (independent of the test's event loop) on a free
port of 127.0.0.1; nothing leaves the machine. ``POST /v1/chat/completions``
answers according to the current *mode*, switchable while it runs:

- ``normal``: a chat completion made by ``reply`` (the request body in; out, the
  text, or the whole assistant message as a dict, ``tool_calls`` and all), with a
  ``usage`` block;
- ``429`` / ``500``: an OpenAI-style error with that status (``Retry-After`` is
  ``retry_after``, ``"0"`` by default);
- ``hang``: no answer until the client gives up, ``release()`` is called or the
  server stops (``hanging`` is set meanwhile);
- ``garbage``: status 200 with a body that is not JSON;
- ``wrong_shape``: status 200 with JSON that is not a chat completion.

``script(...)`` queues modes for the next requests, one each, before ``mode``
applies again; with ``rate_limit_every = n``, every n-th request answers 429.
``requests`` counts the requests received and ``bodies`` keeps
their JSON.

Example::

    with OpenAIStub() as server:
        server.script("429", "500")   # two failures, then normal answers
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Literal

import pytest

__all__ = ("MODES", "Mode", "OpenAIStub", "serve_keyed")

Mode = Literal["normal", "429", "500", "hang", "garbage", "wrong_shape"]
MODES: Final = ("normal", "429", "500", "hang", "garbage", "wrong_shape")
_HANG_LIMIT: Final = 60.0


def _default_reply(body: dict[str, Any]) -> str:
    """Echo the start of the last message, so tests can tell an LLM summary apart."""
    messages = body.get("messages") or [{}]
    text = str(messages[-1].get("content", ""))
    return "LLM SUMMARY: " + " ".join(text.split()[:30])


class OpenAIStub:
    """The server; a context manager that starts and stops it.

    Args:
        reply: makes the completion from the request body (``normal`` mode): its
            text, or the assistant message as a dict (``{"content": None,
            "tool_calls": [...]}``).
        mode: the mode when no scripted mode is queued (it applies to every endpoint).
        embed: serves ``POST /v1/embeddings`` with this text -> vector function.

    Attributes:
        delay: seconds every answer waits before it is sent (a slow endpoint).
        retry_after: the ``Retry-After`` header of the 429 and 500 answers.
        rate_limit_every: every this many requests, one answers 429 (0: none).
        peak_in_flight: the most requests it has held at once.
    """

    def __init__(
        self,
        reply: Callable[[dict[str, Any]], str | dict[str, Any]] = _default_reply,
        mode: Mode = "normal",
        embed: Callable[[str], list[float]] | None = None,
    ) -> None:
        self.reply = reply
        self.embed = embed
        self.mode: Mode = mode
        self.delay = 0.0
        self.retry_after = "0"
        self.rate_limit_every = 0
        self.peak_in_flight = 0
        self._in_flight = 0
        self.bodies: list[dict[str, Any]] = []
        self._script: deque[Mode] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._release = threading.Event()
        #: Set while a request is being held in ``hang`` mode (wait on it from a test).
        self.hanging = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control -------------------------------------------------------------------

    @property
    def requests(self) -> int:
        """Requests received so far."""
        with self._lock:
            return len(self.bodies)

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give an OpenAI client."""
        if self._server is None:
            raise RuntimeError("the stub server is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *modes: Mode) -> None:
        """Answer the next requests with ``modes``, one each, then with ``mode`` again."""
        for mode in modes:
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        with self._lock:
            self._script.extend(modes)

    def release(self) -> None:
        """Let requests held in ``hang`` mode go: each ends without an answer."""
        self._release.set()

    def _hold(self) -> None:
        self.hanging.set()
        waited = 0.0
        while waited < _HANG_LIMIT and not (self._stopping.is_set() or self._release.is_set()):
            self._stopping.wait(0.05)
            waited += 0.05

    def _next_mode(self, body: dict[str, Any]) -> Mode:
        with self._lock:
            self.bodies.append(body)
            every = self.rate_limit_every
            if every and len(self.bodies) % every == 0:
                return "429"
            return self._script.popleft() if self._script else self.mode

    # -- lifetime ------------------------------------------------------------------

    def start(self) -> OpenAIStub:
        """Start serving on a free loopback port."""
        stub = self

        class Handler(_Handler):
            server_stub = stub

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="openai-stub",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; hanging requests are released."""
        self._stopping.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up on its request (a run ending, say) is no error here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_stub: OpenAIStub

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        stub = self.server_stub
        with stub._lock:
            stub._in_flight += 1
            stub.peak_in_flight = max(stub.peak_in_flight, stub._in_flight)
        try:
            self._answer()
        finally:
            with stub._lock:
                stub._in_flight -= 1

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        embeddings = self.path.endswith("/embeddings") and self.server_stub.embed is not None
        if not (embeddings or self.path.endswith("/chat/completions")):
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send(400, b'{"error": {"message": "request is not JSON"}}')
            return
        stub = self.server_stub
        mode = stub._next_mode(body)
        if stub.delay > 0:
            stub._stopping.wait(stub.delay)
        if mode == "hang":
            stub._hold()
            self.close_connection = True
            return
        if mode in ("429", "500"):
            error = {"error": {"message": f"stub {mode}", "type": "stub", "code": mode}}
            self._send(int(mode), json.dumps(error).encode(), {"Retry-After": stub.retry_after})
            return
        if mode == "garbage":
            self._send(200, b"<html>this is not json {")
            return
        if mode == "wrong_shape":
            self._send(200, b'{"object": "list", "data": [1, 2, 3]}')
            return
        if embeddings:
            self._send(200, json.dumps(_embeddings(stub, body)).encode())
            return
        made = stub.reply(body)
        fields = made if isinstance(made, dict) else {"content": made}
        message: dict[str, Any] = {"role": "assistant", **fields}
        completion = {
            "id": f"chatcmpl-stub-{stub.requests}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "total_tokens": 120,
            },
        }
        self._send(200, json.dumps(completion).encode())


def _embeddings(stub: OpenAIStub, body: dict[str, Any]) -> dict[str, Any]:
    embed = stub.embed
    assert embed is not None
    texts = body.get("input", [])
    inputs = [texts] if isinstance(texts, str) else list(texts)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(inputs)
        ],
        "model": body.get("model", "stub"),
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }


def serve_keyed(monkeypatch: pytest.MonkeyPatch, key_env: str) -> Iterator[OpenAIStub]:
    """A running stub, with a test API key in the environment variable ``key_env``
    (for a fixture: ``yield from serve_keyed(monkeypatch, KEY_ENV)``)."""
    monkeypatch.setenv(key_env, "test-key")
    with OpenAIStub() as server:
        yield server
