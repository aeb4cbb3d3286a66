"""What ``actormem simulate`` shows: the report's tables and the model's rates
beside the progress bar."""

from __future__ import annotations

from rich.console import Console
from rich.progress import ProgressColumn, Task
from rich.table import Table
from rich.text import Text

from actormem.actors.app.simulation.brains.llm_client import LLMUsage
from actormem.actors.app.simulation.report import SimulationReport
from actormem.actors.app.simulation.spread import SpreadReport

__all__ = ("ModelRateColumn", "print_report")


class ModelRateColumn(ProgressColumn):
    """The model calls so far, and the calls and tokens per second, beside the bar."""

    def __init__(self, usage: LLMUsage) -> None:
        super().__init__()
        self.usage = usage

    def render(self, task: Task) -> Text:
        """The column's text for ``task`` (its elapsed time is the run's)."""
        if task.fields.get("unit") != "steps":
            return Text("")
        u, elapsed = self.usage, task.elapsed or 0.0
        text = f"{u.calls:,} model calls"
        if elapsed > 0:
            tokens = u.tokens_in + u.tokens_out
            text += f", {u.calls / elapsed:,.1f}/s, {tokens / elapsed:,.0f} tokens/s"
        return Text(text)


def print_report(report: SimulationReport) -> None:
    """Print the report's tables on stdout: the run's figures, then the worst agents."""
    out = Console()
    table = Table(title="actormem simulation", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    rows = [
        ("run id", report.run_id),
        ("scenario", report.scenario),
        ("agents x steps", f"{report.agents} x {report.steps} (seed {report.seed})"),
        *_partial_rows(report),
        ("transport", report.transport),
        ("brain", report.brain),
        *_model_rows(report),
        *_time_rows(report),
        ("messages processed", f"{report.messages_processed:,}"),
        ("commands", f"{report.commands:,}"),
        ("elapsed", f"{report.elapsed_s:.2f} s"),
        ("messages/s", f"{report.messages_per_s:,.0f}"),
        ("tokens stored (history)", f"{report.tokens_stored:,}"),
        (
            "tokens in final contexts",
            f"{report.tokens_in_final_contexts:,} (budget {report.context_budget:,}/agent)",
        ),
        ("planted facts", f"{report.facts_planted}"),
        ("  found by search", _share(report.facts_found_by_search, report.facts_planted)),
        ("  found in final context", _share(report.facts_found_in_context, report.facts_planted)),
        *_reload_rows(report),
        ("  found either way", _share(report.facts_found, report.facts_planted)),
        ("compressions / tokens saved", f"{report.compressions:,} / {report.tokens_saved:,}"),
        (
            "compressions in flight when the steps ended",
            f"{report.compressions_in_flight_after_steps:,} "
            f"({report.compressions_queued_at_end:,} still queued after "
            f"{report.compressions_wait_s:.1f} s waiting)",
        ),
        (
            "peak working view (any agent)",
            f"{report.peak_working_tokens:,} tokens, {report.peak_working_messages} messages "
            f"(budget {report.compression_budget_tokens:,} tokens; "
            f"compresses past {report.compression_budget_messages} messages)",
        ),
        ("agents ever over their token budget", f"{report.agents_over_budget}"),
        (
            "insights shared / deduplicated",
            f"{report.insights_shared} / {report.insights_deduplicated}",
        ),
        (
            "insights delivered",
            f"{report.insights_delivered:,} ({report.deliveries_per_share:,.1f} per share, "
            f"{'ranked feeds' if report.pool_delivery == 'feed' else 'broadcast'})",
        ),
        (
            "facts known per agent",
            f"{report.facts_known_before_sharing:.0%} before sharing, "
            f"{report.facts_known_after_sharing:.0%} after",
        ),
        _failure_row(report),
    ]
    for what, value in rows:
        table.add_row(what, value)
    out.print(table)
    # The worst first: the smallest share of their own facts found, then the fewest
    # of all facts known.
    worst = sorted(
        report.per_agent,
        key=lambda a: (a.found / a.facts if a.facts else 1.0, a.known_after_sharing, a.agent),
    )[:5]
    agents = Table(title="agents knowing the fewest of their facts", title_justify="left")
    for col in ("agent", "messages", "history tokens", "context tokens", "facts found"):
        agents.add_column(col, justify="right" if col != "agent" else "left")
    for a in worst:
        agents.add_row(
            a.agent,
            f"{a.messages:,}",
            f"{a.history_tokens:,}",
            f"{a.context_tokens:,}",
            f"{a.found}/{a.facts}",
        )
    out.print(agents)
    if report.goals:
        out.print(_goal_table(report))
    if report.spread is not None and report.spread.per_fact:
        out.print(_spread_table(report.spread))


#: The facts the printed report shows one by one (the medians cover them all).
SPREAD_SHOWN = 5


def _spread_table(spread: SpreadReport) -> Table:
    """How the first facts spread, one row each, and the medians over all the facts."""
    sample = ", a sample" if spread.sampled else ""
    table = Table(
        title=f"how the facts spread ({spread.agents_measured} agents measured{sample}): "
        "agents knowing of those who could, how (n/a/f: by the narrator, an agent, a "
        "feed), the who-heard-from-whom tree, steps to 50% / 90% of those who could",
        title_justify="left",
        caption=f"{spread.reached_half} of {spread.facts_measured} facts reached 50%, "
        f"{spread.reached_90} reached 90%",
        caption_justify="left",
    )
    table.add_column("fact", overflow="ellipsis", no_wrap=True, max_width=24)
    for col in ("step", "known", "n/a/f", "depth", "breadth", "50%", "90%"):
        table.add_column(col, justify="right")
    for f in spread.per_fact[:SPREAD_SHOWN]:
        table.add_row(
            f"{f.answer} ({f.agent})",
            str(f.step),
            f"{f.known}/{f.could}",
            f"{f.by_narrator}/{f.by_agent}/{f.by_feed}",
            _maybe(f.depth),
            _maybe(f.breadth),
            _maybe(f.steps_to_half),
            _maybe(f.steps_to_90),
        )
    table.add_row(
        f"median of {spread.facts_measured}",
        "",
        f"{spread.known_share_median:.0%}",
        "",
        _maybe(spread.depth_median),
        _maybe(spread.breadth_median),
        _maybe(spread.steps_to_half_median),
        _maybe(spread.steps_to_90_median),
        style="bold",
    )
    return table


def _maybe(value: float | None) -> str:
    """A figure, or a dash for none."""
    return "-" if value is None else f"{value:g}"


def _goal_table(report: SimulationReport) -> Table:
    """Each goal question: of the agents asked, how many answered it, and how."""
    table = Table(
        title="goal questions: agents whose memory holds the answer "
        "(in the top k results of a ranked search / of retrieve)",
        title_justify="left",
    )
    for col in ("question", "answer", "k", "asked", "by search", "by retrieve", "either"):
        table.add_column(col, justify="left" if col in ("question", "answer") else "right")
    for g in report.goals:
        table.add_row(
            g.question,
            g.answer,
            str(g.k),
            f"{g.asked:,}",
            _share(g.by_search, g.asked),
            _share(g.by_retrieve, g.asked),
            _share(g.answered, g.asked),
        )
    asked = report.goals_asked
    table.add_row(
        "total",
        "",
        "",
        f"{asked:,}",
        _share(report.goals_answered_by_search, asked),
        _share(report.goals_answered_by_retrieve, asked),
        _share(report.goals_answered, asked),
        style="bold",
    )
    return table


def _failure_row(report: SimulationReport) -> tuple[str, str]:
    """Actor failures and restarts, summed over this process and its workers."""
    counts = f"{report.actor_failures} / {report.actor_restarts}"
    if not report.workers:
        return ("actor failures / restarts", counts)
    workers = f"{report.workers} worker{'s' if report.workers > 1 else ''}"
    return ("actor failures / restarts", f"{counts} (this process and {workers})")


def _reload_rows(report: SimulationReport) -> list[tuple[str, str]]:
    """The facts found by reload: only when compression offloaded something."""
    if not report.compressions:
        return []
    found = _share(report.facts_found_by_reload, report.facts_planted)
    return [("  found by reload (offloaded)", found)]


def _model_rows(report: SimulationReport) -> list[tuple[str, str]]:
    if not report.llm_calls:
        return []
    return [
        ("model calls (retries)", f"{report.llm_calls:,} ({report.llm_retries:,})"),
        ("model tokens in / out", f"{report.llm_tokens_in:,} / {report.llm_tokens_out:,}"),
        (
            "runtime's own time per model call",
            f"p50 {report.own_ms_per_model_call_p50:,.2f} ms, "
            f"p99 {report.own_ms_per_model_call_p99:,.2f} ms",
        ),
    ]


def _time_rows(report: SimulationReport) -> list[tuple[str, str]]:
    """Where the agents' turns spent their time: memory commands, the model, the rest."""
    turns = report.turn_seconds
    if turns <= 0:
        return []
    shares = f"{report.memory_share:.0%} memory, {report.pool_share:.0%} pool"
    if report.llm_calls:
        shares += f", {report.llm_share:.0%} model"
    rest = max(0.0, 1.0 - report.memory_share - report.pool_share - report.llm_share)
    shares += f", {rest:.0%} other"
    rows = [("turn time spent on", f"{shares} (of {turns:,.2f} s, summed over the turns)")]
    if report.pool_delivery == "feed":
        rows.append(("feeds, at the ends of steps", f"{report.feed_seconds:,.2f} s"))
    return rows


def _partial_rows(report: SimulationReport) -> list[tuple[str, str]]:
    if not report.partial:
        return []
    return [
        (
            "PARTIAL (stopped)",
            f"{report.steps_completed} of {report.steps} steps, "
            f"{len(report.per_agent)} of {report.agents} agents measured",
        )
    ]


def _share(part: int, whole: int) -> str:
    return f"{part} ({100 * part / whole:.0f}%)" if whole else "0"
