"""``actormem mcp``'s errors are one line each, and the ``mcp`` package is needed
only once a server is built."""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys

import pytest

from actormem.runtime.cli import main


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("actormem: error: "), err
    return err


def test_without_the_extra_the_command_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.lowlevel", None)
    err = _one_line_error(capsys, ["mcp", "--agent", "alice"])
    assert "pip install 'actormem[mcp]'" in err


def test_another_major_version_of_mcp_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.26.0")
    err = _one_line_error(capsys, ["mcp", "--agent", "alice"])
    assert "needs mcp 2.x, not 1.26.0: pip install 'actormem[mcp]'" in err


def test_host_and_port_go_with_http(capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(capsys, ["mcp", "--port", "9000"])
    assert "--host and --port go with --transport http" in err


def test_a_port_in_use_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        err = _one_line_error(capsys, ["mcp", "--transport", "http", "--port", str(port)])
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err


def test_a_bad_agent_name_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(capsys, ["mcp", "--transport", "http", "--port", "0", "--agent", " "])
    assert "agent name" in err


@pytest.mark.slow
def test_actormem_imports_without_the_mcp_package() -> None:
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"  # as if it were not installed
        "import actormem, actormem.actors.app.cli, actormem.actors.integrations.mcp\n"
        "from actormem.runtime.cli import main\n"
        "sys.exit(main(['mcp']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "actormem: error: the MCP server needs the optional extra 'mcp': "
        "pip install 'actormem[mcp]' (in a clone: pip install -e '.[mcp]')"
    ]
