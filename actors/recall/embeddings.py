"""Text embeddings from an OpenAI-compatible endpoint, for long-term memory relevance.

Optional: long-term memory ranks by BM25 offline unless an embeddings endpoint is
configured. This module only turns texts into vectors and compares them; what to
do when the endpoint fails (fall back to BM25 for a while) is the caller's call.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Final, Protocol, Self

from actormem.runtime.config import redact_url
from actormem.runtime.errors import ActormemError

__all__ = ("Embedder", "EmbeddingError", "OpenAIEmbedder", "OpenAIEndpoint", "cosine")

#: Texts sent per request; a first retrieval over a large memory is split up.
BATCH_SIZE: Final = 256


class EmbeddingError(ActormemError):
    """The endpoint failed or answered with something that is not one vector per text."""


class Embedder(Protocol):
    """Anything that embeds texts (the OpenAI client below, or a test double)."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one vector per text, in order."""
        ...


class OpenAIEndpoint:
    """A client of an OpenAI-compatible endpoint, ``openai.AsyncOpenAI`` underneath
    (the embedder here, the fact extractor of :mod:`actormem.actors.recall.facts`).

    Args:
        base_url: the endpoint (``http://127.0.0.1:8000/v1``, say).
        model: the model's name.
        api_key: the key; local servers usually take anything.
        timeout: seconds per request.
        max_retries: the client's own retries on connection errors, 429 and 5xx.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 1,
    ) -> None:
        import openai  # here, not at the top: it is slow to import, and optional to use

        self.model = model
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "unused",
            timeout=timeout,
            max_retries=max_retries,
        )

    @classmethod
    def from_env(cls, base_url: str, model: str, api_key_env: str, timeout: float) -> Self:
        """The endpoint with its key read from the environment variable ``api_key_env``."""
        return cls(base_url, model, api_key=os.environ.get(api_key_env), timeout=timeout)

    def __repr__(self) -> str:
        base_url = redact_url(str(self._client.base_url))
        return f"{type(self).__name__}(base_url={base_url!r}, model={self.model!r})"

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()


class OpenAIEmbedder(OpenAIEndpoint):
    """Embeds texts with ``openai.AsyncOpenAI(...).embeddings.create`` (the
    arguments are :class:`OpenAIEndpoint`'s)."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one vector per text.

        Raises:
            EmbeddingError: the request failed, or the answer is not one
                same-sized vector per text.
        """
        import openai

        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH_SIZE):
            batch = list(texts[start : start + BATCH_SIZE])
            try:
                response: Any = await self._client.embeddings.create(model=self.model, input=batch)
                items = sorted(response.data, key=lambda d: d.index)
                vectors = [list(map(float, d.embedding)) for d in items]
            except openai.OpenAIError as exc:
                raise EmbeddingError(f"embeddings request failed: {exc}") from exc
            except (AttributeError, TypeError, ValueError) as exc:
                raise EmbeddingError(f"embeddings endpoint answered garbage: {exc}") from exc
            if len(vectors) != len(batch):
                raise EmbeddingError(f"asked for {len(batch)} embeddings, got {len(vectors)}")
            out.extend(vectors)
        if out and len({len(v) for v in out}) != 1:
            raise EmbeddingError("embeddings of different lengths in one answer")
        return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Return the cosine similarity of two vectors (0.0 if either is zero or sizes differ)."""
    if len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0
