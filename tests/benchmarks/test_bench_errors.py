"""``actormem bench`` meets a closed port, a Redis that wants a password, or a missing
extra with one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from actormem.benchmarks.__main__ import main
from tests.benchmarks.test_load_deployment import bench, deployment_file
from tests.faults.test_redis_access import ADMIN_PASSWORD, private_redis


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.slow
def test_load_against_a_closed_port_is_one_line_without_the_password(tmp_path: Path) -> None:
    url = f"redis://:hunter2@127.0.0.1:{closed_port()}/0"
    proc = bench("--config", str(deployment_file(tmp_path, url, "am")))
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("actormem bench load: error: connecting to Redis: ")
    assert "Redis unavailable" in line and "hunter2" not in line


@pytest.mark.slow
def test_load_against_a_redis_that_wants_a_password_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTORMEM_REDIS_PASSWORD", raising=False)
    with private_redis(tmp_path, "--requirepass", ADMIN_PASSWORD) as port:
        none = deployment_file(tmp_path, f"redis://127.0.0.1:{port}/0", "am")
        missing = bench("--config", str(none))
        wrong = deployment_file(tmp_path, f"redis://:not-it@127.0.0.1:{port}/0", "am")
        refused = bench("--config", str(wrong))
    assert missing.returncode == refused.returncode == 2
    [line] = missing.stderr.splitlines()
    assert "Redis requires a password and none was given" in line, line
    assert "ACTORMEM_REDIS_PASSWORD" in line
    [line] = refused.stderr.splitlines()
    assert line.startswith("actormem bench load: error: connecting to Redis: ")
    assert "invalid username-password pair" in line and "not-it" not in line


def test_a_benchmark_without_its_extra_says_which_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pykka", None)  # as if it were not installed
    assert main(["peers", "--messages", "1"], "actormem bench") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "actormem bench peers: error: needs the bench-peers extra (no module named "
        "'pykka'): pip install 'actormem[bench-peers]'\n"
    )
