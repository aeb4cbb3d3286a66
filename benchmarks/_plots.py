"""PNG plots of the benchmark results (``--plot``), drawn with matplotlib.

matplotlib is an optional extra (``pip install 'actormem[plots]'``): it is
imported only when a plot is asked for, and when it is missing the runner says
so in one line and writes the JSON as usual.

Each figure combines the results of related benchmarks found in the output
directory (``throughput.json`` and ``redis_throughput.json``, say), so running
the in-process and the Redis benchmark with ``--plot`` draws both on one chart.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from actormem.benchmarks._common import BenchResult, Row

__all__ = ("distributed_plot", "latency_plot", "memory_plot", "throughput_plot")

#: What to install for plots.
_HINT = "plots need matplotlib: pip install 'actormem[plots]' (or pip install matplotlib)"


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None (and a message)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plots: {_HINT}", file=sys.stderr)
        return None
    return plt


def _load(out_dir: Path, name: str, current: BenchResult) -> BenchResult | None:
    """The result of benchmark ``name``: ``current`` if it is that one, else its JSON."""
    if current.name == name:
        return current
    path = out_dir / f"{name}.json"
    if not path.exists():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=BenchResult)
    except msgspec.DecodeError as exc:
        print(f"plots: ignoring {path}: {exc}", file=sys.stderr)
        return None


def _save(plt: Any, fig: Any, path: Path) -> list[Path]:
    fig.tight_layout()
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


def throughput_plot(current: BenchResult, out_dir: Path) -> list[Path]:
    """``throughput.png``: add msg/s vs agents, in-process and Redis, with baselines."""
    plt = _pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(8, 5))
    local = _load(out_dir, "throughput", current)
    redis = _load(out_dir, "redis_throughput", current)
    if local is not None:
        for prefix, label, style in (
            ("actormem add, in-process", "actormem add, in-process", "o-"),
            ("raw anyio send", "raw anyio send, 1 -> N streams", "s--"),
        ):
            xs, ys = _series(local.rows, prefix)
            if xs:
                ax.plot(xs, ys, style, label=label)
        for row in local.rows:
            if row.name.startswith("raw tiktoken"):
                ax.axhline(row.value, color="grey", linestyle=":", label="raw tiktoken encode")
    if redis is not None:
        xs, ys = _series(redis.rows, "actormem add over Redis")
        if xs:
            ax.plot(xs, ys, "^-", color="tab:red", label="actormem add, Redis, 1 worker")
        xs, ys = _series(redis.rows, "least work for the same adds")
        if xs:
            ax.plot(xs, ys, "v:", color="tab:red", label="least work for those adds, no runtime")
        for row in redis.rows:
            if row.name.startswith("raw redis-py"):
                ax.axhline(
                    row.value, color="tab:red", linestyle="--", label="raw redis-py XADD/XREADGROUP"
                )
    ax.set(yscale="log", ylabel="messages / s")
    _finish(ax, "add throughput vs agents (baselines measured in the same run)")
    return _save(plt, fig, out_dir / "throughput.png")


def latency_plot(current: BenchResult, out_dir: Path) -> list[Path]:
    """``latency.png``: ask p50/p95/p99 vs offered load, one panel per transport."""
    plt = _pyplot()
    if plt is None:
        return []
    results = [r for r in (_load(out_dir, n, current) for n in ("latency", "redis_latency")) if r]
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
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
            ax.axhline(2.0, color="grey", linestyle=":", label="target p99 2 ms at 5k/s")
        ax.set(xlabel="offered load (asks / s)", ylabel="round trip (ms)", yscale="log")
        ax.set_title(f"ask latency vs load, {where or result.name}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return _save(plt, fig, out_dir / "latency.png")


def memory_plot(current: BenchResult, out_dir: Path) -> list[Path]:
    """``memory.png``: bytes per agent vs agents (idle in-process, passivated, raw task)."""
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
        result = _load(out_dir, name, current)
        if result is None:
            continue
        xs, ys = _series(result.rows, prefix)
        if xs:
            ax.plot(xs, [y / 1024 for y in ys], style, label=label)
    ax.axhline(4, color="grey", linestyle=":", label="target: idle < 4 KB")
    ax.axhline(1, color="grey", linestyle="-.", label="target: passivated < 1 KB")
    ax.set(ylabel="KB per agent")
    _finish(ax, "memory per agent vs agents")
    return _save(plt, fig, out_dir / "memory.png")


def distributed_plot(current: BenchResult, out_dir: Path) -> list[Path]:
    """``distributed.png``: add msg/s vs worker processes, with the raw baseline."""
    plt = _pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(6, 4.5))
    points = sorted(
        (int(r.extra["workers"]), r.value) for r in current.rows if "workers" in r.extra
    )
    bars = ax.bar([str(w) for w, _ in points], [v for _, v in points], label="actormem add")
    ax.bar_label(bars, fmt="{:,.0f}")
    for row in current.rows:
        if row.name.startswith("raw redis-py"):
            ax.axhline(row.value, color="tab:red", linestyle="--", label="raw redis-py")
    ax.set(xlabel="worker processes", ylabel="messages / s")
    ax.set_title("add throughput vs workers, one Redis")
    ax.legend(fontsize=8)
    return _save(plt, fig, out_dir / "distributed.png")
