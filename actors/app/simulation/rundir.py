"""The run directory: what one simulation run leaves behind, in ``<runs_dir>/<run id>/``.

``run.json`` says what ran (written when the run starts, rewritten when it ends),
``events.jsonl`` and ``timeseries.jsonl`` grow as it goes (see
:mod:`actormem.actors.app.simulation.timeline`), and ``report.json`` is the final
report, the same as ``--json`` writes. A stopped run writes them all, marked
partial; a failed one writes all but the report, with its error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

import msgspec

from actormem.actors.app.simulation.timeline import Event, StepRow
from actormem.runtime.errors import ConfigError

__all__ = (
    "EVENTS",
    "REPORT",
    "RUN",
    "TIMESERIES",
    "RunDir",
    "RunInfo",
    "check_runs_dir",
    "write_json",
)

RUN: Final = "run.json"
REPORT: Final = "report.json"
EVENTS: Final = "events.jsonl"
TIMESERIES: Final = "timeseries.jsonl"

Status = Literal["running", "finished", "stopped", "failed"]


class RunInfo(msgspec.Struct, kw_only=True):
    """``run.json``: what ran, and how it ended.

    ``status`` is ``running`` until the run ends, then ``finished``, ``stopped``
    (asked to stop: ``partial``) or ``failed`` (with ``error``). Times are UTC, ISO 8601;
    ``config`` is the resolved config with secrets as ``***``.
    """

    run_id: str
    status: Status
    partial: bool
    version: str
    seed: int
    agents: int
    steps: int
    steps_completed: int
    transport: str
    workers: int
    brain: str
    started_at: str
    ended_at: str = ""
    error: str = ""
    config: dict[str, Any] = msgspec.field(default_factory=dict)


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON to ``path``.

    Raises:
        ConfigError: the file cannot be written (one line naming it).
    """
    try:
        path.write_bytes(msgspec.json.format(msgspec.json.encode(value)) + b"\n")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from exc


def check_runs_dir(base: Path) -> None:
    """Refuse a runs directory that could not be made or written, before a run starts.

    Raises:
        ConfigError: naming the directory and what is wrong with it.
    """
    existing = base
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        what = "it is a file" if existing == base else f"{existing} is not a directory"
        raise ConfigError(f"cannot write the run directory under {base}: {what}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write the run directory under {base}: permission denied")


class RunDir:
    """One run's directory, its ``events.jsonl`` and ``timeseries.jsonl`` open for
    appending (a :class:`~actormem.actors.app.simulation.timeline.Sink`).

    Make one with :meth:`create`; :meth:`close` it when the run is over (the run does).

    Attributes:
        path: the directory.
        steps_written: the steps whose rows are in ``timeseries.jsonl`` (a run's
            ``steps_completed``, whether it finished, stopped or failed).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.steps_written = 0
        self._encoder = msgspec.json.Encoder()
        self._events: BinaryIO = (path / EVENTS).open("ab")
        self._rows: BinaryIO = (path / TIMESERIES).open("ab")

    @classmethod
    def create(cls, base: Path, run_id: str) -> RunDir:
        """Make ``base/<run_id>/`` (``<run_id>.1``, ``.2``... when a run of that id, a
        resumed one, left its directory there already).

        Raises:
            ConfigError: the directory cannot be made or written (one line naming it).
        """
        path = base / run_id
        n = 0
        while (path / RUN).exists():
            n += 1
            path = base / f"{run_id}.{n}"
        try:
            path.mkdir(parents=True, exist_ok=True)
            return cls(path)
        except OSError as exc:
            raise ConfigError(f"cannot write the run directory {path}: {exc.strerror}") from exc

    def event(self, event: Event) -> None:
        """Append one line to ``events.jsonl``."""
        self._events.write(self._encoder.encode(event) + b"\n")

    def row(self, row: StepRow) -> None:
        """Append one line to ``timeseries.jsonl`` (and flush both files)."""
        self._rows.write(self._encoder.encode(row) + b"\n")
        self._events.flush()
        self._rows.flush()
        self.steps_written += 1

    def info(self, info: RunInfo) -> None:
        """Write ``run.json``."""
        write_json(self.path / RUN, info)

    def report(self, report: Any) -> None:
        """Write ``report.json`` (the report as ``--json`` writes it)."""
        write_json(self.path / REPORT, report)

    def close(self) -> None:
        """Flush and close the files (idempotent)."""
        for file in (self._events, self._rows):
            if not file.closed:
                file.close()
