"""Scraping a metrics endpoint as Prometheus does (plain HTTP GET), and reading it."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
from prometheus_client.parser import text_string_to_metric_families

__all__ = ("Samples", "parse", "scrape", "taken_port", "value")

#: Every sample of a scrape, by name and labels.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _get(url: str, accept: str) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
            return response.status, response.headers["Content-Type"], body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


async def scrape(port: int, path: str = "/metrics", accept: str = "") -> tuple[int, str, str]:
    """GET ``path`` on 127.0.0.1:``port`` (with an ``Accept`` header, if given): the
    status, the content type and the body."""
    return await anyio.to_thread.run_sync(_get, f"http://127.0.0.1:{port}{path}", accept)


def parse(text: str) -> Samples:
    """The samples of an exposition in Prometheus's text format."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when absent: a counter nothing has counted yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


@contextmanager
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that a socket listens on (another server's, say)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]
