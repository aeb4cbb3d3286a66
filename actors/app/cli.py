"""The ``actormem`` commands (the CLI frame is ``actormem.runtime.cli``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import msgspec
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from actormem.actors.app import ops
from actormem.actors.app.runs import for_run, new_run_id, open_run
from actormem.actors.app.simulation import (
    LLMUsage,
    SimulationReport,
    check_brain,
    report_dict,
    run_simulation,
)
from actormem.actors.app.simulation.display import ModelRateColumn, print_report
from actormem.actors.app.simulation.plots import draw_plots
from actormem.actors.app.simulation.rundir import RunDir, check_runs_dir, write_json
from actormem.actors.app.simulation.scenario import check_scenario
from actormem.actors.app.wiring import CONFIG_ENV, MemoryRuntime
from actormem.actors.config import AppConfig, load_app_config
from actormem.actors.integrations import cli as integrations
from actormem.runtime.cli import StopSignals, chosen_logging, run_loop
from actormem.runtime.cli import port_number as _port
from actormem.runtime.cli import positive_int as _positive
from actormem.runtime.config import decode_config, redacted
from actormem.runtime.errors import ConfigError
from actormem.runtime.redis import EmbeddedRedis
from actormem.runtime.redis.config import check_namespace
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WORKERS_PER_CPU, WorkerProcesses, worker_limit

__all__ = ("RUNS_DIR_ENV", "add_commands")

#: The environment variable naming the runs directory (below ``--runs-dir``, above
#: ``[simulation] runs_dir``).
RUNS_DIR_ENV = "ACTORMEM_RUNS_DIR"


def add_commands(subs: Any) -> None:
    """Add the app's commands to the CLI's subparsers."""
    sim = subs.add_parser(
        "simulate",
        help="run the offline multi-agent simulation and print its report",
        description="Run N agents for T steps through their memory actors, offline.",
    )
    sim.add_argument("config", nargs="?", default=None, help="a TOML config (configs/town.toml)")
    sim.add_argument("--agents", type=_positive, help="override simulation.agents")
    sim.add_argument("--steps", type=_positive, help="override simulation.steps")
    sim.add_argument("--seed", type=int, help="override simulation.seed")
    sim.add_argument(
        "--scenario",
        metavar="PATH",
        help="the scenario file to play (override simulation.scenario; "
        "configs/scenarios/rumour.toml, say)",
    )
    sim.add_argument(
        "--transport",
        choices=("local", "redis", "memory"),
        metavar="{local,redis}",
        help="override runtime.transport (redis: embedded unless [redis] url is set; "
        "memory: an older name of local)",
    )
    sim.add_argument(
        "--workers",
        type=_positive,
        help="run the agents in N worker processes against one Redis (implies redis)",
    )
    sim.add_argument(
        "--run-id",
        type=_name("a run id"),
        metavar="ID",
        help="resume the run ID: its agents' memories on a configured Redis (default: a new "
        "run id, printed at start; overrides simulation.run_id)",
    )
    sim.add_argument(
        "--fresh",
        action="store_true",
        help="clear the run's own keys on the configured Redis first (its namespace only)",
    )
    sim.add_argument(
        "--max-workers",
        type=_positive,
        metavar="N",
        help="allow up to N worker processes (override simulation.max_workers; "
        f"default: {WORKERS_PER_CPU} per CPU core)",
    )
    sim.add_argument(
        "--brain",
        type=_brain_spec,
        metavar="scripted|llm|module:callable",
        help="what drives the agents (override simulation.brain.kind; module:callable is "
        "your own, an async step(turn) or a brain class)",
    )
    sim.add_argument(
        "--base-url", metavar="URL", help="the OpenAI-compatible API (simulation.brain.base_url)"
    )
    sim.add_argument("--model", metavar="NAME", help="the chat model (simulation.brain.model)")
    sim.add_argument(
        "--max-in-flight",
        type=_positive,
        metavar="N",
        help="model requests in flight at once, over all agents (simulation.brain.max_in_flight)",
    )
    sim.add_argument(
        "--max-retries",
        type=_whole,
        metavar="N",
        help="retries of one model call after a 429, a 5xx, a timeout or a lost connection "
        "(simulation.brain.max_retries)",
    )
    sim.add_argument(
        "--retry-budget",
        type=_whole,
        metavar="N",
        help="retries the whole run may spend over all its model calls "
        "(simulation.brain.retry_budget)",
    )
    recording = sim.add_mutually_exclusive_group()
    recording.add_argument(
        "--record",
        metavar="DIR",
        help="record every model request and answer in DIR (simulation.brain.record)",
    )
    recording.add_argument(
        "--replay",
        metavar="DIR",
        help="answer the model requests from the recording in DIR, with no network "
        "(simulation.brain.replay)",
    )
    _metrics_port_option(sim, " (with --workers, worker i serves on PORT + i)")
    sim.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    sim.add_argument(
        "--runs-dir",
        metavar="DIR",
        help="write the run directory in DIR/<run id>/ (override simulation.runs_dir and "
        f"${RUNS_DIR_ENV}; default: runs)",
    )
    sim.add_argument("--no-run-dir", action="store_true", help="write no run directory")
    sim.add_argument(
        "--plot",
        action="store_true",
        help="draw PNG plots of the run's time series into its run directory (needs matplotlib)",
    )
    sim.add_argument("--no-progress", action="store_true", help="no progress bar")
    sim.set_defaults(func=_simulate)

    worker = subs.add_parser(
        "worker",
        help="run a worker process that owns shards of the agents, until SIGTERM/SIGINT",
        description="Serve agents from Redis streams; start several on one Redis to scale out.",
    )
    worker.add_argument("config", nargs="?", default=None, help="a TOML config with [redis] url")
    worker.add_argument("--config", dest="config_opt", default=None, help=argparse.SUPPRESS)
    worker.add_argument(
        "--worker-id",
        type=_name("a worker id"),
        help="this worker's name in the shard leases; keep it across restarts (one per "
        "host or slot) and a restarted worker takes its shards back at once "
        "(default: a new one per process)",
    )
    _metrics_port_option(worker, "")
    worker.set_defaults(func=_worker)

    cfg = subs.add_parser(
        "config",
        help="check a config file and print it with every default filled in",
    )
    cfg.add_argument("config", nargs="?", default=None, help="a TOML config")
    cfg.set_defaults(func=_show_config)
    ops.add_commands(subs)
    integrations.add_commands(subs)


def _metrics_port_option(parser: argparse.ArgumentParser, note: str) -> None:
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (override [metrics] port; "
        f"HOST is [metrics] host, default 127.0.0.1; 0: off){note}",
    )


def _brain_spec(text: str) -> dict[str, str]:
    """``--brain``: a built-in kind, or ``module:callable`` (kind python)."""
    if text in ("scripted", "llm"):
        return {"kind": text}
    module, sep, attr = text.partition(":")
    if sep and module and attr:
        return {"kind": "python", "callable": text}
    raise argparse.ArgumentTypeError(f"expected scripted, llm or module:callable, got {text!r}")


def _whole(text: str) -> int:
    """An argument type: a whole number >= 0."""
    if text.strip() == "0":
        return 0
    try:
        return _positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None


def _name(what: str) -> Callable[[str], str]:
    """An argument type: a name checked like a namespace, ``what`` naming it."""

    def check(text: str) -> str:
        try:
            return check_namespace(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def _load(args: argparse.Namespace) -> AppConfig:
    config = load_app_config(args.config)
    overrides: dict[str, dict[str, Any]] = {}
    for key in ("agents", "steps", "seed", "run_id"):
        value = getattr(args, key, None)
        if value is not None:
            overrides.setdefault("simulation", {})[key] = value
    if getattr(args, "scenario", None):
        overrides.setdefault("simulation", {})["scenario"] = os.path.abspath(args.scenario)
    brain = dict(getattr(args, "brain", None) or {})
    for key in ("base_url", "model", "record", "replay", "max_in_flight"):
        if getattr(args, key, None):
            brain[key] = getattr(args, key)
    for key in ("max_retries", "retry_budget"):  # 0 is a choice too
        if getattr(args, key, None) is not None:
            brain[key] = getattr(args, key)
    if brain.get("record"):
        brain["replay"] = ""  # the command line's choice wins over the file's
    elif brain.get("replay"):
        brain["record"] = ""
    transport = getattr(args, "transport", None)
    if getattr(args, "workers", None):
        if transport in ("local", "memory"):
            raise ConfigError(f"--workers needs the redis transport, not --transport {transport}")
        transport = "redis"
    if transport:
        overrides.setdefault("runtime", {})["transport"] = transport
    if getattr(args, "metrics_port", None) is not None:
        overrides.setdefault("metrics", {})["port"] = args.metrics_port
    if brain:
        given = msgspec.to_builtins(config.simulation.brain)
        overrides.setdefault("simulation", {})["brain"] = given | brain
    if overrides:
        data = msgspec.to_builtins(config)
        for section, values in overrides.items():
            data[section].update(values)
        config = decode_config(data, AppConfig, source="command line")
    # The command line's choice becomes the config's, which MemoryRuntime applies again.
    return msgspec.structs.replace(config, logging=chosen_logging(args, config.logging))


def _worker(args: argparse.Namespace) -> int:
    args.config = args.config_opt or args.config
    config = _load(args)
    if not config.redis.url:
        raise ConfigError(
            f"{args.config or 'the default config'}: a worker needs [redis] url "
            "(the Redis its agents live in)"
        )
    from actormem.actors.app.wiring import register_actors
    from actormem.runtime.redis.worker import run_worker

    stops = StopSignals(lambda: "draining its mailboxes and handing its shards back...")
    run_loop(
        stops.run,
        lambda: run_worker(
            config.redis,
            lambda rt: register_actors(rt, config),
            runtime=config.runtime,
            worker_id=args.worker_id,
            stop=stops.requested,
            signals=False,
            metrics=config.metrics,
        ),
    )
    return stops.exit_code


def _show_config(args: argparse.Namespace) -> int:
    config = _load(args)
    shown = msgspec.json.encode(redacted(config))
    sys.stdout.write(msgspec.json.format(shown).decode() + "\n")
    return 0


def _start_run(config: AppConfig, fresh: bool) -> AppConfig:
    """Give the run its id and namespace and say so in one line (one more if the run
    finds data of its own on the configured Redis, or clears it)."""
    config = for_run(config, config.simulation.run_id or new_run_id())
    notice = anyio.run(lambda: open_run(config, fresh=fresh))
    where = ""
    if config.runtime.transport == "redis" and config.redis.url:
        where = f" (Redis keys under {config.redis.prefix}:*)"
    print(f"actormem: run {config.simulation.run_id}{where}", file=sys.stderr)
    if notice:
        print(f"actormem: {notice}", file=sys.stderr)
    return config


def _runs_dir(args: argparse.Namespace, config: AppConfig) -> Path | None:
    """Where the run directory goes: ``--runs-dir``, else ``$ACTORMEM_RUNS_DIR``, else
    ``[simulation] runs_dir``; None for ``--no-run-dir`` or an empty one."""
    if args.no_run_dir:
        return None
    chosen = args.runs_dir
    if chosen is None:
        chosen = os.environ.get(RUNS_DIR_ENV) or config.simulation.runs_dir
    return Path(chosen) if chosen else None


def _simulate(args: argparse.Namespace) -> int:
    config = _load(args)
    check_brain(config)
    check_scenario(config)
    if args.json:
        _check_output(Path(args.json))
    runs = _runs_dir(args, config)
    if runs is not None:
        check_runs_dir(runs)
    elif args.plot:
        raise ConfigError("--plot draws into the run directory: it cannot go with no run directory")
    workers = args.workers or 0
    _check_workers(workers, args.max_workers or config.simulation.max_workers)
    config = _start_run(config, args.fresh)
    run_dir = RunDir.create(runs, config.simulation.run_id) if runs is not None else None
    err = Console(stderr=True, soft_wrap=True)
    show = not args.no_progress and err.is_terminal
    usage = LLMUsage()
    brain = config.simulation.brain
    model = [ModelRateColumn(usage)] if brain.replay or (brain.base_url and brain.model) else []
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(),
        *model,
        console=err,
        disable=not show,
    )
    stops = StopSignals(
        lambda: _stopping(config, workers),
        say=lambda line: err.print(line, markup=False, highlight=False),
    )
    with progress:
        agents = config.simulation.agents
        task = progress.add_task("simulating", total=config.simulation.steps, unit="steps")
        measuring = progress.add_task(
            "measuring", total=agents, unit="agents", visible=False, start=False
        )

        def step(n: int) -> None:
            progress.update(task, completed=n)

        def moved(phase: str, done: int, total: int) -> None:
            # Within a step the bar moves with the agents' turns (a large run's
            # step takes a while); then the agents are measured for the report.
            if phase == "turns":
                progress.update(task, completed=done / agents)
            else:
                progress.start_task(measuring)  # its clock starts with the first agent
                progress.update(measuring, completed=done, total=total, visible=True)

        config_path = str(Path(args.config).resolve()) if args.config else None
        report = run_loop(
            stops.run,
            lambda: _run(
                config, config_path, workers, (step, moved), stops.requested, (usage, run_dir)
            ),
        )
    print_report(report)
    partial = "partial " if report.partial else ""
    if args.json:
        path = Path(args.json)
        write_json(path, report_dict(report))
        print(f"{partial}report written to {path}")
    if run_dir is not None:
        print(f"{partial}run directory written: {run_dir.path}")
        if args.plot:
            drawn = draw_plots(run_dir.path)
            if drawn:
                print(f"plots written: {', '.join(p.name for p in drawn)}")
    return stops.exit_code


def _check_output(path: Path) -> None:
    """Refuse a ``--json`` path the report could not be written to, before the run."""
    parent = path.parent
    if path.is_dir():
        raise ConfigError(f"cannot write the report to {path}: it is a directory")
    if not parent.is_dir():
        raise ConfigError(f"cannot write the report to {path}: no directory {parent}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"cannot write the report to {path}: permission denied")


def _check_workers(workers: int, limit: int) -> None:
    """Refuse more worker processes than the limit (0: the default, per CPU core)."""
    most = limit or worker_limit()
    if workers > most:
        default = f" ({WORKERS_PER_CPU} per CPU core)" if not limit else ""
        raise ConfigError(
            f"--workers {workers} is over the limit of {most} worker processes{default}; "
            "raise it with --max-workers N or [simulation] max_workers"
        )


def _stopping(config: AppConfig, workers: int) -> str:
    """What the simulation does once it is asked to stop, for the line that says so."""
    doing = ["finishing the turns in flight", "writing the partial report"]
    if workers:
        doing.append(f"draining {workers} worker{'s' if workers > 1 else ''}")
    if config.runtime.transport == "redis" and not config.redis.url:
        doing.append("stopping the embedded Redis")
    return ", ".join(doing) + "..."


async def _run(
    config: AppConfig,
    path: str | None,
    workers: int,
    watch: tuple[Callable[[int], None], Callable[[str, int, int], None]],
    stop: anyio.Event,
    record: tuple[LLMUsage, RunDir | None],
) -> SimulationReport:
    """Run in this process, or drive ``workers`` worker processes over one Redis.

    ``path`` (absolute) is the config file the workers load too; ``watch`` is the
    progress display's ``on_step`` and ``on_progress``; ``record`` is where the model
    calls are counted for it, and the run directory to write (if any). Once ``stop`` is
    set (SIGINT or SIGTERM) the simulation stops taking steps and returns a partial
    report; the runtime, the workers and the embedded Redis then close as usual. A
    signal while the workers start is seen once they have: the run then takes no
    step.
    """
    async with AsyncExitStack() as stack:
        config, rt = await _open(stack, config, path, workers)
        return await run_simulation(
            config,
            on_step=watch[0],
            on_progress=watch[1],
            runtime=rt,
            stop=stop,
            llm_usage=record[0],
            run_dir=record[1],
            workers=workers,
        )


async def _open(
    stack: AsyncExitStack, config: AppConfig, path: str | None, workers: int
) -> tuple[AppConfig, MemoryRuntime]:
    """Open the runtime on ``stack``: with ``workers``, a client of that many worker
    processes (and of an embedded Redis if the config names none)."""
    transport = None
    if workers:
        redis = config.redis
        if not redis.url:
            server = await stack.enter_async_context(EmbeddedRedis())
            redis = msgspec.structs.replace(redis, url=server.url)
        env = {CONFIG_ENV: path} if path else {}
        await stack.enter_async_context(
            WorkerProcesses(
                workers,
                redis,
                "actormem.actors.app.wiring:worker_register",
                runtime=config.runtime,
                env=env,
                limit=workers,  # _check_workers has held it to the limit
                metrics=config.metrics,
            )
        )
        config = msgspec.structs.replace(config, redis=redis)
        transport = RedisTransport(redis.url, redis, worker=False)
    rt = await stack.enter_async_context(MemoryRuntime(config, transport=transport))
    return config, rt
