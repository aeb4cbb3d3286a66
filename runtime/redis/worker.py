"""Worker processes: each owns shards of the Redis transport and hosts their actors.

:func:`run_worker` is a worker's whole life (the CLI's ``actormem worker`` calls
it); :class:`WorkerProcesses` launches N of them as subprocesses for a
simulation or a test, and stops or kills them. A subprocess runs
``python -m actormem.runtime.redis.worker``, which takes the ``[redis]`` section as
JSON and the actor kinds as ``module:function`` (a function that registers them on a
runtime), so ``runtime`` never imports ``actors``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Self

import anyio
import msgspec
import structlog

from actormem.runtime._loop import run as run_loop
from actormem.runtime._runtime import Runtime
from actormem.runtime.closing import AsyncClosing
from actormem.runtime.config import MetricsConfig, RuntimeConfig
from actormem.runtime.errors import ActormemError, ConfigError, TransportUnavailableError
from actormem.runtime.lifetime import die_with_parent, keeper
from actormem.runtime.redis._client import connect, redis_errors
from actormem.runtime.redis._counters import (
    WorkerCounters,
    counters_of,
    publish_counters,
    write_counters,
)
from actormem.runtime.redis._status_line import log_status
from actormem.runtime.redis.config import RedisConfig, check_namespace
from actormem.runtime.redis.keys import Keys
from actormem.runtime.redis.transport import RedisTransport

__all__ = (
    "REDIS_JSON_ENV",
    "WORKERS_PER_CPU",
    "WorkerProcesses",
    "load_register",
    "run_worker",
    "worker_limit",
)

log = structlog.get_logger("actormem.worker")

#: The environment variable that gives a worker subprocess its ``[redis]`` section (JSON).
REDIS_JSON_ENV: Final = "ACTORMEM_WORKER_REDIS_JSON"
#: How long a launched worker may take to register itself as live.
_READY_TIMEOUT: Final = 30.0
#: How long a worker may take to stop after SIGTERM before it is killed.
_STOP_TIMEOUT: Final = 15.0
#: How long a stopped worker may take to write its final counters (s).
_FINAL_WRITE_TIMEOUT: Final = 2.0
#: Worker processes per CPU core that :class:`WorkerProcesses` starts at most by default.
WORKERS_PER_CPU: Final = 4


def worker_limit() -> int:
    """How many worker processes this machine runs at most by default:
    :data:`WORKERS_PER_CPU` per CPU core this process may use."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return WORKERS_PER_CPU * max(cpus, 1)


async def run_worker(
    redis: RedisConfig,
    register: Callable[[Runtime], None],
    *,
    runtime: RuntimeConfig | None = None,
    worker_id: str | None = None,
    stop: anyio.Event | None = None,
    signals: bool = True,
    metrics: MetricsConfig | None = None,
) -> None:
    """Run a worker until SIGTERM or SIGINT (or ``stop`` is set), then leave cleanly.

    The worker takes its fair share of the shards, serves their actors, and on
    the way out drains its mailboxes and gives its leases back, so other
    workers take the shards over at once. It writes its counters to Redis every
    second and once more when it has stopped (see ``_counters``).

    Args:
        redis: where Redis is (None ``url`` = an embedded server, for one process).
        register: registers the actor kinds on the runtime.
        runtime: the runtime section.
        worker_id: this worker's name in leases (1-64 letters, digits, ``_``,
            ``.`` or ``-``), kept across its restarts so that it takes its shards
            back at once; two live workers must never share one (by default a new
            one per process: host, pid and a random part).
        stop: set it to stop the worker (instead of a signal).
        signals: stop on SIGTERM and SIGINT; False leaves the signals to the
            caller, which sets ``stop``.
        metrics: the ``[metrics]`` section: the Prometheus endpoint (``port``) and
            the ``worker_status`` log line every ``status_interval`` seconds.

    Raises:
        ConfigError: ``worker_id`` cannot name a worker, or the metrics port is taken.
        TransportUnavailableError: Redis cannot be reached at start.
        TransportError: Redis is not suitable (it may evict keys).
    """
    if worker_id is not None:
        try:
            check_namespace(worker_id, "a worker id")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    metrics = metrics or MetricsConfig()
    transport = RedisTransport(None, redis, worker=True, worker_id=worker_id)
    # The signals are watched from before the start, so that one sent while the worker
    # connects and takes its shards stops it the same way (not by the default action).
    watched = (signal.SIGTERM, signal.SIGINT) if signals else ()
    with anyio.open_signal_receiver(*watched) as received:
        async with Runtime(runtime, transport=transport, metrics=metrics) as rt:
            register(rt)
            log.info("worker_started", worker=transport.id, shards=redis.shards)
            async with anyio.create_task_group() as tg:

                async def on_signal() -> None:
                    async for signum in received:
                        log.info("worker_stopping", worker=transport.id, signal=signum)
                        tg.cancel_scope.cancel()

                async def on_stop() -> None:
                    if stop is not None:
                        await stop.wait()
                        tg.cancel_scope.cancel()

                tg.start_soon(on_signal)
                tg.start_soon(on_stop)
                tg.start_soon(publish_counters, rt, transport)
                if metrics.status_interval:
                    tg.start_soon(log_status, rt, transport, metrics.status_interval)
            log.info("worker_stopped", worker=transport.id, processed=rt.stats().processed)
        # After the runtime closed: its final counters include what it drained.
        await _write_final_counters(redis, counters_of(rt, transport, stopped=True))


async def _write_final_counters(redis: RedisConfig, counters: WorkerCounters) -> None:
    """Write a stopped worker's counters (what it handled while draining too), through a
    client of its own: the transport's closed with the runtime. Redis being away (or
    embedded, and gone) leaves the last figures written while it ran."""
    if not redis.url:
        return
    client = connect(redis, connections=1)
    try:
        with anyio.move_on_after(_FINAL_WRITE_TIMEOUT, shield=True):
            await write_counters(client, Keys(redis.prefix), counters, redis.lease_ms)
    except ActormemError as exc:
        log.warning("worker_counters_unwritten", worker=counters.worker, reason=str(exc))
    finally:
        with anyio.CancelScope(shield=True):
            await client.aclose()


def load_register(spec: str) -> Callable[[Runtime], None]:
    """Import ``module:function``, the function that registers a worker's actor kinds.

    Raises:
        ConfigError: the module or the function cannot be found.
    """
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ConfigError(f"register must be 'module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} (from register={spec!r}): {exc}") from exc
    func = getattr(module, name, None)
    if not callable(func):
        raise ConfigError(f"{module_name!r} has no function {name!r} (from register={spec!r})")
    return func  # type: ignore[no-any-return]


class WorkerProcesses(AsyncClosing):
    """Launches ``count`` worker subprocesses against one Redis; stops them on exit.

    The workers do not outlive this process: each gets SIGTERM when it dies, even
    by SIGKILL (see :mod:`actormem.runtime.lifetime`). Their logs stay readable
    after :meth:`aclose` and their temp dir is removed when this process ends,
    however it ends. Each runs in a process group of its own, so a terminal's
    Ctrl-C reaches only this process, which then stops them in order.

    Args:
        count: how many workers.
        redis: the ``[redis]`` section; ``url`` must be set (workers share it).
        register: ``module:function`` registering the actor kinds in each worker.
        runtime: the runtime section for the workers.
        log_level: the workers' log level (their logs go to files, see ``log_path``).
        env: extra environment variables for the workers (the path of the app's
            config for its register function to read, say).
        limit: the most workers allowed (default: :func:`worker_limit`).
        metrics: the workers' ``[metrics]`` section; with a ``port``, worker ``i``
            serves its metrics on ``port + i``.

    Raises:
        ValueError: ``count`` < 1 or no Redis URL.
        ConfigError: ``count`` is over ``limit``.

    Example::

        async with WorkerProcesses(3, config, "myapp.kinds:register") as workers:
            ...  # talk to the actors through a RedisTransport(worker=False)
    """

    def __init__(
        self,
        count: int,
        redis: RedisConfig,
        register: str,
        *,
        runtime: RuntimeConfig | None = None,
        log_level: str = "info",
        env: Mapping[str, str] | None = None,
        limit: int | None = None,
        metrics: MetricsConfig | None = None,
    ) -> None:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if not redis.url:
            raise ValueError("worker processes need a shared Redis: set the config's url")
        most = worker_limit() if limit is None else limit
        if count > most:
            raise ConfigError(
                f"{count} worker processes is over the limit of {most}"
                + (f" ({WORKERS_PER_CPU} per CPU core)" if limit is None else "")
                + ": ask for fewer, or raise the limit"
            )
        self.count = count
        self.redis = redis
        self.register = register
        self.runtime = runtime or RuntimeConfig()
        self.log_level = log_level
        self.metrics = metrics or MetricsConfig()
        self.env = {**os.environ, **(env or {})}
        # One id per slot, kept when a worker is started again in it: the new
        # process takes the dead one's shards back at once.
        self.ids = [f"w{i}-{secrets.token_hex(4)}" for i in range(count)]
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self._dir = Path(tempfile.mkdtemp(prefix="actormem-workers-"))
        keeper().track_dir(self._dir)

    async def __aenter__(self) -> Self:
        try:
            for i in range(self.count):
                self.start(i)
            await self.wait_ready()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        return self

    def log_path(self, index: int) -> Path:
        """Where worker ``index`` writes its log (removed when this process ends)."""
        return self._dir / f"{self.ids[index]}.log"

    def metrics_of(self, index: int) -> MetricsConfig:
        """Worker ``index``'s ``[metrics]`` section: its own port, ``port + index``."""
        port = self.metrics.port
        return msgspec.structs.replace(self.metrics, port=port + index if port else 0)

    def pid(self, index: int) -> int | None:
        """The process id of worker ``index`` (None if not running)."""
        proc = self._procs[index]
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self, index: int) -> None:
        """Start worker ``index`` (again, after it was killed: under the same id, so it
        takes back the shards its previous process held without waiting for their
        leases to expire).

        Call it from the thread that runs the event loop: the worker's
        parent-death signal is tied to the thread that starts it.
        """
        args = [
            sys.executable,
            "-m",
            "actormem.runtime.redis.worker",
            "--register",
            self.register,
            "--worker-id",
            self.ids[index],
            "--runtime-json",
            msgspec.json.encode(self.runtime).decode(),
            "--log-level",
            self.log_level,
            "--metrics-json",
            msgspec.json.encode(self.metrics_of(index)).decode(),
        ]
        with self.log_path(index).open("ab") as logfile:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                env={**self.env, REDIS_JSON_ENV: msgspec.json.encode(self.redis).decode()},
                process_group=0,
                preexec_fn=die_with_parent(),
            )
        self._procs[index] = proc
        keeper().track_pid(proc.pid)

    async def wait_ready(self, indexes: Sequence[int] | None = None) -> None:
        """Wait until the workers have registered as live in Redis.

        Raises:
            TransportUnavailableError: a worker exited, or did not register in time
                (the message holds the end of its log).
        """
        wanted = list(range(self.count)) if indexes is None else list(indexes)
        client = connect(self.redis)
        key = Keys(self.redis.prefix).workers()
        deadline = time.monotonic() + _READY_TIMEOUT
        try:
            while wanted:
                for i in list(wanted):
                    proc = self._procs[i]
                    if proc is None or proc.poll() is not None:
                        raise TransportUnavailableError(
                            f"worker {self.ids[i]} exited at start: {self._log_tail(i)}"
                        )
                    with redis_errors("waiting for the workers"):
                        if await client.zscore(key, self.ids[i]) is not None:
                            wanted.remove(i)
                if time.monotonic() > deadline:
                    raise TransportUnavailableError(
                        f"worker {self.ids[wanted[0]]} did not start within "
                        f"{_READY_TIMEOUT:g}s: {self._log_tail(wanted[0])}"
                    )
                await anyio.sleep(0.05)
        finally:
            await client.aclose()

    def _log_tail(self, index: int) -> str:
        path = self.log_path(index)
        lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
        return lines[-1] if lines else "no output"

    def kill(self, index: int) -> None:
        """SIGKILL worker ``index`` (a crash: no cleanup, its leases just expire)."""
        proc = self._procs[index]
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
            keeper().untrack_pid(proc.pid)

    def signal(self, index: int, signum: int) -> None:
        """Send ``signum`` to worker ``index`` (SIGSTOP/SIGCONT to pause it, say)."""
        proc = self._procs[index]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signum)

    async def stop(self, index: int) -> int | None:
        """SIGTERM worker ``index`` and wait (SIGKILL after a while); its exit code."""
        proc = self._procs[index]
        if proc is None:
            return None
        self._terminate(proc)
        return await self._wait(index)

    async def _wait(self, index: int) -> int | None:
        """Wait for worker ``index`` to exit (SIGKILL after a while); its exit code."""
        proc = self._procs[index]
        if proc is None:
            return None
        code = await anyio.to_thread.run_sync(_wait_or_kill, proc)
        keeper().untrack_pid(proc.pid)
        return code

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused worker cannot handle SIGTERM
            proc.terminate()

    async def aclose(self) -> None:
        """Stop every worker at once (each drains and hands its shards back);
        idempotent."""
        with anyio.CancelScope(shield=True):
            for proc in self._procs:
                if proc is not None:
                    self._terminate(proc)
            # One SIGTERM each: a second one, once a worker has stopped watching for
            # signals and gives its leases back, would end it before it has.
            async with anyio.create_task_group() as tg:
                for i in range(self.count):
                    tg.start_soon(self._wait, i)


def _wait_or_kill(proc: subprocess.Popen[bytes]) -> int:
    try:
        return proc.wait(_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m actormem.runtime.redis.worker``: one worker process (see
    :class:`WorkerProcesses`)."""
    from actormem.runtime.logging import configure_logging

    parser = argparse.ArgumentParser(prog="python -m actormem.runtime.redis.worker")
    parser.add_argument("--register", required=True, help="module:function")
    parser.add_argument(
        "--redis-json",
        default=None,
        help=f"the [redis] section as JSON (default: ${REDIS_JSON_ENV}; the environment "
        "keeps a password in its url off the command line)",
    )
    parser.add_argument("--runtime-json", default="{}")
    parser.add_argument("--worker-id", default=None)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--metrics-json", default="{}", help="the [metrics] section as JSON")
    args = parser.parse_args(argv)
    # Read once and dropped, so the worker's own subprocesses do not inherit it.
    redis_json = args.redis_json or os.environ.pop(REDIS_JSON_ENV, None)
    if not redis_json:
        parser.error(f"the [redis] section is needed: set ${REDIS_JSON_ENV} or --redis-json")
    configure_logging("json", args.log_level)
    try:
        redis = msgspec.json.decode(redis_json, type=RedisConfig)
        runtime = msgspec.json.decode(args.runtime_json, type=RuntimeConfig)
        metrics = msgspec.json.decode(args.metrics_json, type=MetricsConfig)
        register = load_register(args.register)
        run_loop(
            lambda: run_worker(
                redis, register, runtime=runtime, worker_id=args.worker_id, metrics=metrics
            )
        )
    except (ConfigError, TransportUnavailableError, msgspec.ValidationError) as exc:
        print(f"actormem worker: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
