"""PNG plots of a run's time series (``actormem simulate --plot``), drawn with matplotlib.

matplotlib is an optional extra (``pip install 'actormem[plots]'``), imported only
when plots are asked for; when it is missing, :func:`draw_plots` says so in one line
and draws nothing (the run itself has succeeded).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Any, Final

import msgspec

from actormem.actors.app.simulation.rundir import REPORT, TIMESERIES
from actormem.actors.app.simulation.timeline import StepRow

__all__ = ("CURVES", "PLOTS", "draw_plots", "pyplot", "read_timeseries")

#: The files :func:`draw_plots` writes, in the run directory.
PLOTS: Final = ("knowledge.png", "tokens.png", "compressions.png", "latency.png")
#: The most facts ``knowledge.png`` draws one curve each; past it, their median and bands.
CURVES: Final = 8
_HINT: Final = "plots need matplotlib: pip install 'actormem[plots]' (or pip install matplotlib)"


def read_timeseries(run_dir: Path) -> list[StepRow]:
    """The rows of ``run_dir``'s ``timeseries.jsonl``, in step order."""
    decoder = msgspec.json.Decoder(StepRow)
    with (run_dir / TIMESERIES).open("rb") as lines:
        return [decoder.decode(line) for line in lines if line.strip()]


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None (and a line on stderr)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plots: {_HINT}", file=sys.stderr)
        return None
    return plt


def draw_plots(run_dir: Path) -> list[Path]:
    """Draw :data:`PLOTS` from ``run_dir``'s time series into ``run_dir``; return the
    files written (none when matplotlib is missing)."""
    plt = pyplot()
    if plt is None:
        return []
    rows = read_timeseries(run_dir)
    steps = [r.step for r in rows]
    written = []
    knowledge = partial(_knowledge, names=_fact_names(run_dir))
    draws: tuple[Callable[[Any, list[StepRow], list[int]], Any], ...] = (
        knowledge,
        _tokens,
        _compressions,
        _latency,
    )
    for name, draw in zip(PLOTS, draws, strict=True):
        fig = draw(plt, rows, steps)
        path = run_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _axes(plt: Any, title: str, ylabel: str) -> tuple[Any, Any]:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _fact_names(run_dir: Path) -> dict[int, str]:
    """Each fact's answer and origin, from the report when the run wrote one."""
    try:
        spread = json.loads((run_dir / REPORT).read_bytes()).get("spread") or {}
    except (OSError, ValueError):
        return {}
    return {f["fact"]: f"{f['answer'][:40]} ({f['agent']})" for f in spread.get("per_fact", ())}


def _knowledge(plt: Any, rows: list[StepRow], steps: list[int], names: dict[int, str]) -> Any:
    """How far each fact spread: the share of the agents who could know it who do.

    One curve per fact, from the step a measured agent first knew it; past
    :data:`CURVES` facts, their median and bands, by the steps since then."""
    curves: dict[int, tuple[list[int], list[float]]] = {}
    for r in rows:
        for f in r.spread:
            xs, ys = curves.setdefault(f.fact, ([], []))
            xs.append(r.step)
            ys.append(min(1.0, f.known / f.could) if f.could else 0.0)
    measured = rows[-1].facts_known_agents if rows else 0
    title = f"how far each fact spread ({measured} agents measured)"
    ylabel = "share of the agents who could know it"
    if len(curves) <= CURVES:
        fig, ax = _axes(plt, title, ylabel)
        for fact, (xs, ys) in curves.items():
            ax.plot(xs, ys, "o-", markersize=3, label=names.get(fact, f"fact {fact}"))
        if not curves:
            ax.text(0.5, 0.5, "no fact known", ha="center", transform=ax.transAxes)
    else:
        fig, ax = _axes(plt, f"{title}: {len(curves)} facts, median and bands", ylabel)
        ax.set_xlabel("steps since a measured agent first knew the fact")
        by_age: list[list[float]] = []
        for _, ys in curves.values():
            for age, y in enumerate(ys):
                if age == len(by_age):
                    by_age.append([])
                by_age[age].append(y)
        for column in by_age:
            column.sort()
        ages = list(range(len(by_age)))
        for low, high, alpha, label in (
            (0.0, 1.0, 0.15, "min - max"),
            (0.1, 0.9, 0.3, "p10 - p90"),
        ):
            ax.fill_between(
                ages,
                [_nearest(c, low) for c in by_age],
                [_nearest(c, high) for c in by_age],
                alpha=alpha,
                label=f"{label} of the facts",
            )
        ax.plot(ages, [_nearest(c, 0.5) for c in by_age], "o-", markersize=3, label="median")
    ax.set_ylim(0, 1.02)
    if curves:
        ax.legend(fontsize=8)
    return fig


def _nearest(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of the sorted, non-empty ``ordered``, by nearest rank."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _tokens(plt: Any, rows: list[StepRow], steps: list[int]) -> Any:
    """Tokens stored (the whole history) against the tokens in the working views."""
    fig, ax = _axes(plt, "tokens stored vs in context (all agents)", "tokens")
    ax.plot(steps, [r.tokens_stored for r in rows], "o-", label="stored (history)")
    ax.plot(steps, [r.tokens_working for r in rows], "s-", label="in context (working views)")
    ax.legend(fontsize=8)
    return fig


def _compressions(plt: Any, rows: list[StepRow], steps: list[int]) -> Any:
    """Compressions per step, and the tokens they saved so far."""
    fig, ax = _axes(plt, "compressions", "compressions in the step")
    ax.bar(steps, [r.compressions for r in rows], color="tab:blue", alpha=0.6)
    saved = ax.twinx()
    saved.plot(steps, list(accumulate(r.tokens_saved for r in rows)), "-", color="tab:red")
    saved.set_ylabel("tokens saved so far", color="tab:red")
    if not any(r.compressions for r in rows):
        ax.text(0.5, 0.5, "no compressions", ha="center", transform=ax.transAxes)
    return fig


def _latency(plt: Any, rows: list[StepRow], steps: list[int]) -> Any:
    """Memory-operation latency per step; the model's, or a note that it was not called."""
    fig, (mem, llm) = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, title in ((mem, "memory operations"), (llm, "model calls")):
        ax.set(title=title, xlabel="step", ylabel="ms")
        ax.grid(True, alpha=0.3)
    mem.plot(steps, [r.memory_p50_ms for r in rows], "o-", label="p50")
    mem.plot(steps, [r.memory_p99_ms for r in rows], "^-", label="p99")
    mem.legend(fontsize=8)
    if any(r.llm_calls for r in rows):
        llm.plot(steps, [r.llm_mean_ms for r in rows], "o-", label="mean per call")
        llm.legend(fontsize=8)
    else:
        llm.text(0.5, 0.5, "no LLM calls", ha="center", transform=llm.transAxes)
    return fig
