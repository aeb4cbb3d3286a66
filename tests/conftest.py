"""Shared fixtures: the anyio backend, and the transports every actor test runs on."""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import ModuleType

import pytest

from actormem.actors import AppConfig, MemoryRuntime
from actormem.runtime import LocalTransport, Transport
from actormem.runtime.logging import configure_logging

pytest_plugins = ["tests.support.redis", "tests.faults.report"]


class _OnlyThePackage(importlib.abc.MetaPathFinder):
    """The repository's folders are importable from its root (pytest puts it on
    sys.path for ``tests``); installed, they exist only under ``actormem``. A
    reference to the bare names would pass here and fail for every user."""

    BARE = frozenset({"runtime", "actors", "benchmarks"})

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> None:
        if name.partition(".")[0] in self.BARE:
            raise ModuleNotFoundError(f"{name}: import it as actormem.{name}", name=name)
        return None


sys.meta_path.insert(0, _OnlyThePackage())


@pytest.fixture(autouse=True)
def _every_level_is_logged() -> None:
    """Every level reaches the processors, so structlog.testing.capture_logs sees info
    events too (a CLI test may have configured less); pytest keeps the output and
    shows it only for failing tests."""
    configure_logging("console", "debug")


@pytest.fixture(autouse=True, scope="session")
def _runs_in_a_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``actormem simulate`` (in process or as a child) writes its run directories in
    the session's temp dir, not in the checkout it runs from."""
    before = os.environ.get("ACTORMEM_RUNS_DIR")
    os.environ["ACTORMEM_RUNS_DIR"] = str(tmp_path_factory.mktemp("runs"))
    yield
    if before is None:
        os.environ.pop("ACTORMEM_RUNS_DIR", None)
    else:
        os.environ["ACTORMEM_RUNS_DIR"] = before


@pytest.fixture
def anyio_backend() -> str:
    # redis-py's asyncio client needs asyncio; anyio runs on it.
    return "asyncio"


@pytest.fixture(params=["local", "redis"])
def make_transport(request: pytest.FixtureRequest) -> Callable[[], Transport]:
    """A factory for the transport under test: every actor test runs on both.

    Redis is a private server the session starts (or ``REDIS_URL``), each test
    under its own key prefix.
    """
    if request.param == "local":
        return LocalTransport
    factory: Callable[[], Transport] = request.getfixturevalue("make_redis_transport")
    return factory


@pytest.fixture
async def memory_rt(make_transport: Callable[[], Transport]) -> AsyncIterator[MemoryRuntime]:
    """An open MemoryRuntime on the transport under test."""
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as rt:
        yield rt
