"""Malformed configs and command lines: one clear line on stderr each, exit status 2.

Every case runs through ``actormem.runtime.cli.main`` in this process (fast), and a few
also through ``python -m actormem.runtime.cli`` in subprocesses, as a user runs them
(concurrently: each pays the interpreter's start-up of about a second).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import structlog

from actormem.runtime.cli import main
from tests.support import ROOT

pytestmark = pytest.mark.faults


#: Config files by name, and their text.
CONFIGS: dict[str, bytes] = {
    "unknown.toml": b"[runtime]\nmailbox_size = 10\nmailbox_sise = 10\n",
    "type.toml": b'[runtime]\nmailbox_size = "big"\n',
    "section.toml": b"runtime = 3\n",
    "range.toml": b"[redis]\nshards = 0\n",
    "bad.toml": b"[runtime\ntransport = 'memory'\n",
    "binary.toml": b"\xff\xfe[runtime]\n",
    "badurl.toml": b'[redis]\nurl = "localhost:6379"\n',
}

#: argv -> what the one line must say.
CASES: dict[tuple[str, ...], str] = {
    ("config", "unknown.toml"): "unknown.toml: unknown key 'runtime.mailbox_sise'",
    ("config", "type.toml"): "type.toml: key 'runtime.mailbox_size': expected int, got str",
    ("config", "section.toml"): "section.toml: key 'runtime': expected object, got int",
    ("config", "range.toml"): "shards must be >= 1, got 0",
    ("config", "bad.toml"): "bad.toml: not valid TOML",
    ("config", "missing.toml"): "missing.toml: config file not found",
    ("config", "."): "cannot read config file",
    ("worker",): "a worker needs [redis] url",
    ("worker", "--worker-id", "w 1"): "a worker id must be 1-64 letters, digits",
    ("simulate", "--agents", "zero"): "argument --agents: expected a whole number, got 'zero'",
    ("simulate", "--steps", "0"): "argument --steps: expected a number >= 1, got 0",
    ("simulate", "--bogus"): "unrecognized arguments: --bogus",
    ("simulate", "--workers", "2", "--transport", "local"): "--workers needs the redis transport",
    ("simulate", "--workers", "2", "--transport", "memory"): "--workers needs the redis transport",
    ("frobnicate",): "invalid choice: 'frobnicate'",
    ("--log-level", "loud", "config"): "argument --log-level: invalid choice: 'loud'",
    (): "the following arguments are required: COMMAND",
}


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    for name, text in CONFIGS.items():
        (tmp_path / name).write_bytes(text)
    return tmp_path


def run_all(argvs: Sequence[tuple[str, ...]], cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    """Run ``actormem`` with each argv at once; their results in the same order."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "actormem.runtime.cli", *argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    results = []
    for argv, proc in zip(argvs, procs, strict=True):
        out, err = proc.communicate(timeout=60)
        results.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return results


def assert_one_line(result: subprocess.CompletedProcess[str], says: str) -> None:
    what = f"actormem {' '.join(result.args)}"
    assert result.returncode == 2, f"{what}: exit {result.returncode}\n{result.stderr}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"{what}: not one line:\n{result.stderr}"
    assert lines[0].startswith("actormem"), lines[0]
    assert says in lines[0], f"{what}: {lines[0]!r} does not say {says!r}"
    assert result.stdout == ""


def run_here(
    argv: tuple[str, ...], configs: Path, capsys: pytest.CaptureFixture[str]
) -> subprocess.CompletedProcess[str]:
    """Run ``actormem argv`` through ``main`` in this process, in ``configs``."""
    cwd = Path.cwd()
    logging = structlog.get_config()
    os.chdir(configs)
    try:
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(cwd)
        structlog.configure(**logging)  # main() set its own; restore the tests'
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


@pytest.mark.parametrize("argv", list(CASES), ids=" ".join)
def test_bad_configs_and_arguments_are_one_clear_line_each(
    argv: tuple[str, ...], configs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_one_line(run_here(argv, configs, capsys), CASES[argv])


def test_the_installed_entry_point_says_the_same_one_line(configs: Path) -> None:
    argvs = [("config", "unknown.toml"), ("simulate", "--agents", "zero"), ("worker",)]
    for result in run_all(argvs, configs):
        assert_one_line(result, CASES[result.args])


def test_a_config_file_that_is_not_text_is_one_line(
    configs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_one_line(run_here(("config", "binary.toml"), configs, capsys), "binary.toml: ")


def test_a_malformed_redis_url_is_one_line(
    configs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_one_line(run_here(("worker", "badurl.toml"), configs, capsys), "url")
