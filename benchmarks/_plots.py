"""PNG plots of benchmark results (``--plot``), drawn with matplotlib.

matplotlib is an optional extra (``pip install 'actormem[plots]'``): the runner
checks for it before a run that asks for plots, and it is imported only then.

A plot is drawn from the run's own result and the earlier results given with
``--compare FILE...`` (``throughput`` with a ``redis_throughput`` result, say, or
two runs of one benchmark), never from whatever else lies in the output
directory. :data:`PLOTS` maps each benchmark to its plot; results of benchmarks
a plot does not show are left out of it, and two results of one benchmark are told
apart by their start time.
"""

from __future__ import annotations

import datetime
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from actormem.actors.app.simulation.plots import pyplot
from actormem.benchmarks._common import BenchResult, Row

__all__ = ("PLOTS", "draw")

#: matplotlib's pyplot on the file-only Agg backend, or None (and a line on stderr).
_pyplot = pyplot

Plot = Callable[[list[BenchResult], Path], list[Path]]


def draw(result: BenchResult, compare: list[BenchResult], path: Path) -> list[Path]:
    """Draw ``result``'s plot (with ``compare`` on it) to ``path``; the files written."""
    return PLOTS[result.name]([result, *compare], path)


def _named(results: list[BenchResult], *names: str) -> list[BenchResult]:
    return [r for r in results if r.name in names]


def _tag(result: BenchResult, results: list[BenchResult]) -> str:
    """`` (run of 12:00:00)`` when other results of the same benchmark are drawn too."""
    if sum(r.name == result.name for r in results) < 2:
        return ""
    stamp = datetime.datetime.fromtimestamp(result.started, datetime.UTC)
    return f" (run of {stamp:%Y-%m-%d %H:%M:%S} UTC)"


def _save(plt: Any, fig: Any, path: Path) -> list[Path]:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _finish(ax: Any, title: str) -> None:
    """Agents on a log x axis, a grid, a title and a legend."""
    ax.set(xscale="log", xlabel="agents")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _series(rows: list[Row], prefix: str) -> tuple[list[int], list[float]]:
    """(agents, value) of the rows whose name starts with ``prefix``, by agents."""
    points = sorted(
        (int(r.extra["agents"]), r.value)
        for r in rows
        if r.name.startswith(prefix) and "agents" in r.extra
    )
    return [a for a, _ in points], [v for _, v in points]


def throughput_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """Add msg/s vs agents, in-process and Redis, with the baselines."""
    plt = _pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(8, 5))
    for local in _named(results, "throughput"):
        tag = _tag(local, results)
        for prefix, label, style in (
            ("actormem add, in-process", "actormem add, in-process", "o-"),
            ("raw anyio send", "raw anyio send, 1 -> N streams", "s--"),
        ):
            xs, ys = _series(local.rows, prefix)
            if xs:
                ax.plot(xs, ys, style, label=label + tag)
        for row in local.rows:
            if row.name.startswith("raw tiktoken"):
                ax.axhline(row.value, color="grey", linestyle=":", label="raw tiktoken" + tag)
    for redis in _named(results, "redis_throughput"):
        tag = _tag(redis, results)
        xs, ys = _series(redis.rows, "actormem add over Redis")
        if xs:
            ax.plot(xs, ys, "^-", label="actormem add, Redis, 1 worker" + tag)
        xs, ys = _series(redis.rows, "least work for the same adds")
        if xs:
            ax.plot(xs, ys, "v:", label="least work for those adds, no runtime" + tag)
        for row in redis.rows:
            if row.name.startswith("raw redis-py"):
                ax.axhline(row.value, linestyle="--", label="raw redis-py XADD/XREADGROUP" + tag)
    ax.set(yscale="log", ylabel="messages / s (higher is better)")
    _finish(ax, "add throughput vs agents (baselines measured in the same run)")
    return _save(plt, fig, path)


def latency_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """Ask p50/p95/p99 vs offered load, one panel per result."""
    plt = _pyplot()
    if plt is None:
        return []
    shown = _named(results, "latency", "redis_latency")
    fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4.5), squeeze=False)
    for ax, result in zip(axes[0], shown, strict=True):
        curves: dict[tuple[str, int], list[tuple[float, float]]] = {}
        raw: dict[float, float] = {}
        where = ""
        for row in result.rows:
            if "percentile" in row.extra and "ask" in row.extra:
                where = row.extra.get("transport", "")
                key = (row.extra["ask"], int(row.extra["percentile"]))
                curves.setdefault(key, []).append((row.extra["rate"], row.value))
                if key[1] == 99 and row.baseline_value:
                    raw[row.extra["rate"]] = row.baseline_value
        for (ask, p), points in sorted(curves.items()):
            points.sort()
            style = {"context()": "-", "add": "--"}.get(ask, ":")
            marker = {50: "o", 95: "s", 99: "^"}.get(p, ".")
            color = {50: "tab:blue", 95: "tab:orange", 99: "tab:red"}.get(p, "black")
            ax.plot(
                [x for x, _ in points],
                [y for _, y in points],
                style,
                marker=marker,
                color=color,
                label=f"{ask} p{p}",
            )
        if raw:
            rates = sorted(raw)
            ax.plot(rates, [raw[r] for r in rates], ":", marker="x", color="black", label="raw p99")
            if where == "Redis":
                target = [3 * raw[r] for r in rates]
                ax.plot(rates, target, ":", color="grey", label="target p99: 3x raw")
        ax.set(xlabel="offered load (asks / s)", ylabel="round trip, ms (lower is better)")
        ax.set(yscale="log")
        ax.set_title(f"ask latency vs load, {where or result.name}{_tag(result, results)}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return _save(plt, fig, path)


def memory_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """Bytes per agent vs agents (idle in-process, passivated, raw task)."""
    plt = _pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, prefix, label, style in (
        ("scale", "actormem idle agent", "idle in-process agent (RSS)", "o-"),
        ("scale", "raw anyio task", "raw anyio task + stream (RSS)", "s--"),
        ("redis_scale", "passivated agent in Redis", "passivated agent, Redis used_memory", "^-"),
        ("redis_scale", "passivated agent's keys", "passivated agent's keys in Redis", "x-"),
        ("redis_scale", "passivated agent, worker RSS", "passivated agent, worker RSS", "v-"),
    ):
        for result in _named(results, name):
            xs, ys = _series(result.rows, prefix)
            if xs:
                ax.plot(xs, [y / 1024 for y in ys], style, label=label + _tag(result, results))
    ax.axhline(4, color="grey", linestyle=":", label="target: idle < 4 KB")
    ax.axhline(1, color="grey", linestyle="-.", label="target: passivated < 1 KB")
    ax.set(ylabel="KB per agent (lower is better)")
    _finish(ax, "memory per agent vs agents")
    return _save(plt, fig, path)


def distributed_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """Add msg/s vs worker processes, with the raw baseline."""
    plt = _pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for result in _named(results, "distributed"):
        tag = _tag(result, results)
        points = sorted(
            (int(r.extra["workers"]), r.value) for r in result.rows if "workers" in r.extra
        )
        ax.plot([w for w, _ in points], [v for _, v in points], "o-", label="actormem add" + tag)
        for row in result.rows:
            if row.name.startswith("raw redis-py"):
                ax.axhline(row.value, linestyle="--", label="raw redis-py" + tag)
    ax.set(xlabel="worker processes", ylabel="messages / s (higher is better)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("add throughput vs workers, one Redis")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _entries(result: BenchResult, keep: Callable[[Row], bool], baselines: bool) -> Iterator[Any]:
    """(label, value) of the rows ``keep`` takes, each followed by its baseline's."""
    for row in result.rows:
        if keep(row):
            yield row.name, row.value
            if baselines and row.baseline_value:
                yield f"baseline: {row.baseline}", row.baseline_value


def _bars(
    ax: Any,
    results: list[BenchResult],
    keep: Callable[[Row], bool],
    xlabel: str,
    *,
    baselines: bool = True,
    log: bool = False,
) -> None:
    """Horizontal bars of the rows ``keep`` takes (and their baselines), one colour
    per result."""
    labels: list[str] = []
    for result in results:
        labels += [label for label, _ in _entries(result, keep, baselines) if label not in labels]
    height = 0.8 / max(1, len(results))
    for k, result in enumerate(results):
        values = dict(_entries(result, keep, baselines))
        ys = [i + k * height for i, label in enumerate(labels) if label in values]
        xs = [values[label] for label in labels if label in values]
        colors = [
            "lightgrey" if label.startswith("baseline: ") else f"C{k}"
            for label in labels
            if label in values
        ]
        tag = _tag(result, results).strip(" ()") or result.name
        ax.barh(ys, xs, height=height, color=colors, label=tag)
    ticks = [i + (len(results) - 1) * height / 2 for i in range(len(labels))]
    ax.set_yticks(ticks, labels=[textwrap.fill(label, 44) for label in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("log")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    if len(results) > 1:
        ax.legend(fontsize=7)


def context_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """``context()`` latencies (in the actor, after an add, as an ask) and token
    counting next to raw tiktoken."""
    plt = _pyplot()
    if plt is None:
        return []
    shown = _named(results, "context")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=(3, 2))
    _bars(left, shown, lambda r: r.unit == "ms", "ms, log scale (lower is better)", log=True)
    left.set_title("context() latency on a long conversation")
    _bars(
        right,
        shown,
        lambda r: r.unit == "msg/s",
        "messages / s (higher is better)",
        baselines=False,
    )
    right.set_title("token counting")
    return _save(plt, fig, path)


def compression_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """Tokens saved and facts kept (%), and the compression's latency and the longest
    stall of another task (ms) next to their baselines."""
    plt = _pyplot()
    if plt is None:
        return []
    shown = _named(results, "compression")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    _bars(left, shown, lambda r: r.unit == "%", "% (higher is better)")
    left.set_xlim(0, 100)
    left.set_title("tokens saved and planted facts kept")
    _bars(right, shown, lambda r: r.unit == "ms", "ms (lower is better; grey: baseline)")
    right.set_title("compression latency and stalls")
    return _save(plt, fig, path)


def _bar_plot(
    results: list[BenchResult],
    path: Path,
    name: str,
    keep: Callable[[Row], bool],
    xlabel: str,
    title: str,
    **bars: bool,
) -> list[Path]:
    """One panel of horizontal bars of the ``name`` results' rows ``keep`` takes."""
    plt = _pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    _bars(ax, _named(results, name), keep, xlabel, **bars)
    ax.set_title(title)
    return _save(plt, fig, path)


def peers_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """The same workloads on actormem, Pykka and autogen-core, side by side."""
    return _bar_plot(
        results,
        path,
        "peers",
        lambda r: r.unit.endswith("/s"),
        "operations / s, log scale (higher is better)",
        "actormem next to Pykka and autogen-core (same run)",
        baselines=False,
        log=True,
    )


def load_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """Per second of a load run: offered and completed commands/s, and p50/p99."""
    plt = _pyplot()
    if plt is None:
        return []
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for k, result in enumerate(_named(results, "load")):
        tag = _tag(result, results)
        series: list[dict[str, Any]] = next(
            (r.extra["series"] for r in result.rows if "series" in r.extra), []
        )
        ts = [s["t"] for s in series]
        top.plot(ts, [s["target_rate"] for s in series], ":", color=f"C{k}", label="offered" + tag)
        top.plot(ts, [s["done"] for s in series], "o-", color=f"C{k}", label="completed" + tag)
        for key, style in (("p50_ms", "o-"), ("p99_ms", "^--")):
            points = [(s["t"], s[key]) for s in series if s.get(key) is not None]
            bottom.plot(
                [t for t, _ in points],
                [v for _, v in points],
                style,
                color=f"C{k}",
                label=key.replace("_ms", "") + tag,
            )
    top.set(ylabel="commands / s")
    top.set_ylim(bottom=0)
    top.set_title("load: offered and completed per second")
    bottom.set(xlabel="second of the run", ylabel="latency, ms (lower is better)", yscale="log")
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return _save(plt, fig, path)


def retrieval_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """Recall@10 per question category of ranked search, retrieve and plain BM25, and
    the asks' round trips next to plain BM25's."""
    plt = _pyplot()
    if plt is None:
        return []
    shown = _named(results, "retrieval")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=(3, 2))
    methods = ("search", "retrieve", "plain BM25")
    width = 0.8 / max(1, len(methods) * len(shown))
    labels: list[str] = []
    for n, result in enumerate(shown):
        tag = _tag(result, results)
        for m, method in enumerate(methods):
            row = next(
                (
                    r
                    for r in result.rows
                    if r.extra.get("method") == method
                    and r.extra.get("measure") == "recall"
                    and r.extra.get("k") == 10
                ),
                None,
            )
            if row is None:
                continue
            values = {"all questions": row.value, **row.extra.get("by_category", {})}
            labels = labels or list(values)
            offset = (n * len(methods) + m) * width
            left.bar(
                [i + offset for i in range(len(labels))],
                [values.get(label, 0.0) for label in labels],
                width=width,
                color=f"C{m}",
                alpha=1.0 if n == 0 else 0.5,
                label=f"{method}{tag}",
            )
    left.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels=labels, fontsize=8)
    left.axhline(0.70, color="grey", linestyle=":", label="target 0.70")
    left.set(ylabel="recall@10 (higher is better)", ylim=(0, 1))
    left.set_title("evidence among the top 10, per question category")
    left.grid(True, axis="y", alpha=0.3)
    left.legend(fontsize=7)
    names: list[str] = []
    for n, result in enumerate(shown):
        timed = [r for r in result.rows if r.unit == "ms"]
        names = names or [textwrap.fill(r.name, 44) for r in timed]
        height = 0.8 / (2 * max(1, len(shown)))
        ys = [i + 2 * n * height for i in range(len(timed))]
        right.barh(ys, [r.value for r in timed], height=height, color=f"C{n}", label=result.name)
        right.barh(
            [y + height for y in ys],
            [r.baseline_value or 0.0 for r in timed],
            height=height,
            color="lightgrey",
            label="plain BM25 top 10" if n == 0 else None,
        )
    right.set_yticks(range(len(names)), labels=names, fontsize=7)
    right.invert_yaxis()
    right.set(xscale="log", xlabel="ms, log scale (lower is better)")
    right.grid(True, axis="x", which="both", alpha=0.3)
    right.axvline(5.0, color="grey", linestyle=":", label="target p99 5 ms at 10,000 turns")
    right.legend(fontsize=7)
    right.set_title("latency, next to plain BM25 (grey)")
    return _save(plt, fig, path)


def simulation_plot(results: list[BenchResult], path: Path) -> list[Path]:
    """The simulation's messages/s over Redis per pair, each next to its in-process run."""
    return _bar_plot(
        results,
        path,
        "simulation",
        lambda r: r.unit == "msg/s",
        "messages / s (higher is better; grey: in process)",
        "the simulation over Redis next to in process (same seed)",
    )


#: The plot of each benchmark (every benchmark has one).
PLOTS: dict[str, Plot] = {
    "throughput": throughput_plot,
    "redis_throughput": throughput_plot,
    "latency": latency_plot,
    "redis_latency": latency_plot,
    "scale": memory_plot,
    "redis_scale": memory_plot,
    "distributed": distributed_plot,
    "context": context_plot,
    "compression": compression_plot,
    "peers": peers_plot,
    "load": load_plot,
    "retrieval": retrieval_plot,
    "simulation": simulation_plot,
}
