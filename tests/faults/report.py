"""The fault report: one row per fault a test injected, printed as a table at the end.

A fault test takes the ``fault_report`` fixture and calls :meth:`FaultReport.row`
with the checker's verdict, the load it held and how long recovery took. After
the run pytest prints the rows as a table (the one docs/reliability.md
shows) and writes them to ``reports/faults.json``. ``make faults`` runs
the whole suite at full size (``ACTORMEM_FAULTS=full``); ``make test`` runs the
same tests at a smaller size.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from tests.support import ROOT
from tests.support.history import Verdict

__all__ = ("FaultReport", "Recorder", "Row", "full_size")

REPORT = ROOT / "reports" / "faults.json"


def full_size() -> bool:
    """True under ``make faults``: the fault tests run at their full sizes."""
    return os.environ.get("ACTORMEM_FAULTS", "") == "full"


@dataclass(frozen=True)
class Row:
    """One fault: what was done, under what load, and what the checker found."""

    fault: str
    load: str
    sent: int
    lost: int
    duplicated: int
    reordered: int
    recovery_s: float | None
    passed: bool
    test: str
    #: Asks that timed out although their command was applied (None: not measured).
    applied_timed_out: int | None = None


class FaultReport:
    """The rows recorded by the tests of one pytest run."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    @staticmethod
    def make_row(
        fault: str,
        load: str,
        verdict: Verdict,
        *,
        recovery_s: float | None = None,
        applied_timed_out: int | None = None,
        test: str = "",
    ) -> Row:
        """One fault's outcome; ``applied_timed_out``: the asks that timed out although
        their command was applied, for a row that counts them (a row with any fails)."""
        return Row(
            fault=fault,
            load=load,
            sent=verdict.sent,
            lost=verdict.lost,
            duplicated=verdict.duplicated,
            reordered=verdict.reordered,
            recovery_s=None if recovery_s is None else round(recovery_s, 2),
            passed=verdict.ok and not applied_timed_out,
            test=test,
            applied_timed_out=applied_timed_out,
        )

    def table(self) -> list[str]:
        """The rows as a Markdown table, the way docs/reliability.md shows them."""
        head = (
            "| fault | load held | sent | lost | duplicated | reordered "
            "| applied but timed out | recovery |"
        )
        lines = [head, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in self.rows:
            recovery = "-" if r.recovery_s is None else f"{r.recovery_s:.1f} s"
            timed_out = "-" if r.applied_timed_out is None else str(r.applied_timed_out)
            mark = "" if r.passed else " **FAILED**"
            lines.append(
                f"| {r.fault}{mark} | {r.load} | {r.sent:,} | {r.lost} | {r.duplicated} "
                f"| {r.reordered} | {timed_out} | {recovery} |"
            )
        return lines


_REPORT = FaultReport()


class Recorder:
    """What a test gets from ``fault_report``: rows that name the test.

    A row travels with the test's report (its ``user_properties``), so that the rows
    of tests run in pytest-xdist's worker processes reach the table too.
    """

    def __init__(self, node: pytest.Item) -> None:
        self._node = node

    def row(self, fault: str, load: str, verdict: Verdict, **measured: Any) -> None:
        """Record one fault's outcome (call it before asserting on the verdict, so a
        failing row is in the table too); see :meth:`FaultReport.make_row` for
        ``measured`` (``recovery_s``, ``applied_timed_out``)."""
        row = FaultReport.make_row(fault, load, verdict, test=self._node.nodeid, **measured)
        self._node.user_properties.append((_PROPERTY, asdict(row)))


_PROPERTY = "fault_row"


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> Recorder:
    """Records this test's rows in the run's fault report."""
    assert isinstance(request.node, pytest.Item)
    return Recorder(request.node)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Each phase's report carries every property recorded so far: take the last's.
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == _PROPERTY:
                _REPORT.rows.append(Row(**value))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _REPORT.rows:
        return
    size = "full size (ACTORMEM_FAULTS=full)" if full_size() else "the make test size"
    terminalreporter.section(f"fault report, {size}")
    for line in _REPORT.table():
        terminalreporter.write_line(line)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(
        json.dumps({"full_size": full_size(), "rows": [asdict(r) for r in _REPORT.rows]}, indent=2)
        + "\n"
    )
    terminalreporter.write_line(f"(written to {REPORT.relative_to(ROOT)})")
