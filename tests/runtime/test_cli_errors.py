"""The command line's last word on an error: one line, also for tasks that failed together."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from actormem.runtime import cli
from actormem.runtime.errors import AskTimeoutError, first_error


def _failing(error: BaseException) -> Any:
    def parser() -> argparse.ArgumentParser:
        made = argparse.ArgumentParser()

        def func(args: argparse.Namespace) -> int:
            raise error

        made.set_defaults(func=func, log_format=None, log_level=None)
        return made

    return parser


def test_tasks_that_failed_together_print_the_first_error_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    timeout = AskTimeoutError("pool/main-5", "no reply to FeedTick within 30s")
    group = ExceptionGroup("tasks", [ExceptionGroup("inner", [timeout]), ValueError("x")])
    monkeypatch.setattr(cli, "parser", _failing(group))
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err == "actormem: error: actor pool/main-5: no reply to FeedTick within 30s\n"


def test_a_group_of_errors_not_actormem_s_is_raised_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = ExceptionGroup("tasks", [ValueError("a bug")])
    monkeypatch.setattr(cli, "parser", _failing(group))
    with pytest.raises(ExceptionGroup):
        cli.main([])


def test_first_error_looks_inside_nested_groups() -> None:
    inner = KeyError("k")
    assert first_error(ExceptionGroup("a", [ExceptionGroup("b", [inner])])) is inner
