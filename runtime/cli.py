"""The ``actormem`` command line.

``runtime`` owns the frame: argument parsing, logging setup, and turning every
error a user can cause into one line on stderr (exit status 2) instead of a
traceback. The commands themselves come from *command modules*, found through the
``actormem.commands`` entry-point group (the application's ``simulate``, ``worker``
and ``config``; the benchmarks' ``bench``), so that ``runtime`` imports neither the
domain nor the benchmarks. ``ACTORMEM_APP`` may name one module to use instead. A
command module defines ``add_commands(subparsers)``; each command sets ``func``
(called with the parsed arguments, returning the exit code).

A long-running command stops the same way on SIGINT (Ctrl-C) and SIGTERM (what
``kill``, ``timeout``, ``docker stop`` and Slurm send): :class:`StopSignals` prints
one line saying what it does now, the command winds down (drains, writes what it
has, stops its children), and it exits with 128 + the signal's number (130, 143).
A second signal ends it at once; its children and temp dirs still go with it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version
from types import ModuleType
from typing import NoReturn, TypeVar

import anyio
from anyio.abc import TaskStatus

from actormem.runtime._loop import run as run_loop
from actormem.runtime.config import LoggingConfig
from actormem.runtime.errors import ActormemError, first_error
from actormem.runtime.logging import configure_logging

__all__ = (
    "OneLineParser",
    "StopSignals",
    "chosen_logging",
    "main",
    "package_version",
    "parser",
    "port_number",
    "positive_int",
    "run_loop",
)

#: The entry-point group whose modules add the commands.
COMMANDS_GROUP = "actormem.commands"
EXIT_USAGE = 2
#: Seconds within which the first stop signal, received again, is the same request.
ECHO_WINDOW = 0.25

T = TypeVar("T")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage; a user wants the one line that matters.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class StopSignals:
    """SIGINT and SIGTERM as a request to stop, for a command's event loop.

    :meth:`run` runs a command's work while watching for the signals. The first
    signal prints ``PROG: stopping (SIGTERM): <doing()>`` on stderr, records the
    signal and sets :attr:`requested`; the command then winds down and returns
    :attr:`exit_code`. A second signal prints one more line and ends the process at
    once with that code.

    Args:
        doing: what the command does now that it stops ("draining 3 workers...").
        prog: how the line starts.
        say: where the line goes (a live progress display's console, say).
    """

    def __init__(
        self,
        doing: Callable[[], str],
        *,
        prog: str = "actormem",
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.doing = doing
        self.prog = prog
        self.say = say or _say
        self.signum = 0
        self._first_at = 0.0
        self.requested = anyio.Event()

    @property
    def exit_code(self) -> int:
        """128 + the first signal's number (130 for SIGINT, 143 for SIGTERM); 0 if none."""
        return 128 + self.signum if self.signum else 0

    async def watch(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Receive SIGINT and SIGTERM until cancelled."""
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            async for signum in signals:
                name = signal.Signals(signum).name
                now = time.monotonic()
                if signum == self.signum and now - self._first_at < ECHO_WINDOW:
                    continue
                if self.signum:
                    self.say(f"{self.prog}: stopping at once ({name} again)")
                    sys.stdout.flush()
                    os._exit(self.exit_code)
                self.signum = signum
                self._first_at = now
                self.say(f"{self.prog}: stopping ({name}): {self.doing()}")
                self.requested.set()

    async def run(
        self, func: Callable[[], Awaitable[T]], *, cancel_with: Callable[[], T] | None = None
    ) -> T:
        """Return ``await func()``, watching for the signals until it returns (so a
        second signal during its cleanup still ends the process at once).

        With ``cancel_with``, ``func`` is cancelled once a stop is requested, and
        ``cancel_with()`` is returned if that ended it; without, ``func`` is expected
        to wind down by itself when :attr:`requested` is set.
        """
        done: list[T] = []
        error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            await tg.start(self.watch)
            try:
                with anyio.CancelScope() as work:
                    if cancel_with is not None:
                        tg.start_soon(self._cancel_on_request, work)
                    done.append(await func())
            except (Exception, SystemExit) as exc:
                error = exc  # raised below as itself, not inside the task group's group
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        if not done:
            assert cancel_with is not None  # only then is func cancelled here
            return cancel_with()
        return done[0]

    async def _cancel_on_request(self, scope: anyio.CancelScope) -> None:
        await self.requested.wait()
        scope.cancel()


def positive_int(text: str) -> int:
    """An argument type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def port_number(text: str) -> int:
    """An argument type: a TCP port, 0..65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port within 0..65535, got {value}")
    return value


def chosen_logging(args: argparse.Namespace, given: LoggingConfig | None) -> LoggingConfig:
    """Configure logging as the command line (``--log-format``, ``--log-level``) and
    then the config's ``given`` choice say; return that choice, for the config (which
    the runtime applies again)."""
    given = given or LoggingConfig()
    chosen = LoggingConfig(
        format=args.log_format or given.format, level=args.log_level or given.level
    )
    configure_logging(chosen.format, chosen.level)
    return chosen


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    """Build the parser with the app module's commands."""
    top = OneLineParser(
        prog="actormem",
        description="An actor-based memory runtime for multi-agent LLM systems.",
    )
    top.add_argument("--version", action="version", version=f"actormem {package_version()}")
    top.add_argument(
        "--log-format",
        choices=("console", "json"),
        default=None,
        help="how log events look (default: the config's, else console)",
    )
    top.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=None,
        help="the lowest level logged (default: the config's, else info)",
    )
    subs = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    subs.required = True
    for module in command_modules():
        module.add_commands(subs)
    return top


def package_version() -> str:
    """The installed package's version (``0+unknown`` when it is not installed)."""
    try:
        return version("actormem")
    except PackageNotFoundError:
        return "0+unknown"


def command_modules() -> list[ModuleType]:
    """The command modules: ``ACTORMEM_APP``'s, else the entry points', by name."""
    named = os.environ.get("ACTORMEM_APP")
    if named:
        return [importlib.import_module(named)]
    points = sorted(entry_points(group=COMMANDS_GROUP), key=lambda point: point.name)
    return [importlib.import_module(point.value) for point in points]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 bad input)."""
    try:
        args = parser().parse_args(argv)
    except ModuleNotFoundError as exc:
        print(f"actormem: error: cannot load the app module: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Commands that read a config configure logging again with its settings.
    configure_logging(args.log_format or "console", args.log_level or "warning")
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ActormemError as exc:
        print(f"actormem: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BaseExceptionGroup as group:
        # Tasks that failed together: the first one's error, when it is actormem's.
        first = first_error(group)
        if not isinstance(first, ActormemError):
            raise
        print(f"actormem: error: {first}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("actormem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
