"""The event loop actormem's own processes run on: uvloop unless told otherwise."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from actormem.runtime.cli import run_loop
from actormem.runtime.errors import ConfigError


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_the_command_line_runs_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTORMEM_EVENT_LOOP", raising=False)
    assert issubclass(run_loop(_loop_type), uvloop.Loop)


def test_plain_asyncio_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORMEM_EVENT_LOOP", "asyncio")
    assert not issubclass(run_loop(_loop_type), uvloop.Loop)


def test_an_unknown_loop_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORMEM_EVENT_LOOP", "trio")
    with pytest.raises(ConfigError, match="ACTORMEM_EVENT_LOOP='trio': expected one of uvloop"):
        run_loop(_loop_type)
