"""A minimal OpenAI-compatible embeddings endpoint on loopback, for the embedding path.

Vectors are bags of words over a tiny vocabulary of concepts, where synonyms share
a dimension ("car" and "automobile" are one concept), so the tests can tell
embedding relevance (which sees synonyms) from BM25 (which does not). Set
``fail = True`` to answer every request with HTTP 500.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from actors._bm25 import tokenize

CONCEPTS = [
    {"car", "automobile", "vehicle", "sedan"},
    {"doctor", "physician", "medic"},
    {"cat", "kitten", "feline"},
    {"money", "cash", "coins", "funds"},
    {"boat", "ship", "vessel"},
]


def embed(text: str) -> list[float]:
    """Return the concept-count vector of ``text`` (plus one dimension for the rest)."""
    vec = [0.0] * (len(CONCEPTS) + 1)
    for word in tokenize(text):
        for n, concept in enumerate(CONCEPTS):
            if word in concept:
                vec[n] += 1.0
                break
        else:
            vec[-1] += 0.1
    return vec


class EmbeddingServer:
    """``with EmbeddingServer() as s:`` serves ``POST {s.base_url}/embeddings``."""

    def __init__(self) -> None:
        self.fail = False
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
                server.requests += 1
                if server.fail or not self.path.endswith("/embeddings"):
                    self._send(500, {"error": {"message": "boom", "type": "server_error"}})
                    return
                inputs = body["input"]
                inputs = [inputs] if isinstance(inputs, str) else inputs
                data = [
                    {"object": "embedding", "index": i, "embedding": embed(t)}
                    for i, t in enumerate(inputs)
                ]
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": body.get("model", "test"),
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
