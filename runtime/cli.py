"""The ``actormem`` command line.

``runtime`` owns the frame: argument parsing, logging setup, and turning every
error a user can cause into one line on stderr (exit status 2) instead of a
traceback. The commands themselves come from *command modules*, found through the
``actormem.commands`` entry-point group (the application's ``simulate``, ``worker``
and ``config``; the benchmarks' ``bench``), so that ``runtime`` imports neither the
domain nor the benchmarks. ``ACTORMEM_APP`` may name one module to use instead. A
command module defines ``add_commands(subparsers)``; each command sets ``func``
(called with the parsed arguments, returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from types import ModuleType
from typing import NoReturn

from actormem.runtime.errors import ActormemError
from actormem.runtime.logging import configure_logging

__all__ = ("OneLineParser", "main", "parser")

#: The entry-point group whose modules add the commands.
COMMANDS_GROUP = "actormem.commands"
EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage; a user wants the one line that matters.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def parser() -> argparse.ArgumentParser:
    """Build the parser with the app module's commands."""
    top = OneLineParser(
        prog="actormem",
        description="An actor-based memory runtime for multi-agent LLM systems.",
    )
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
    except KeyboardInterrupt:
        print("actormem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
