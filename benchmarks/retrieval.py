"""Recall@5/10 of ranked search and retrieve on labelled long conversations, next to plain BM25.

Each conversation of --data (the LoCoMo format: see
actormem.benchmarks.retrieval_data) goes into one agent's memory through the
public API, on the transport --transport names: its turns added as user messages
named after their speaker, with the dia id and the session's date in metadata and
the time said as timestamp, then recorded to long-term memory. Every question is
then asked three ways: search(question, mode="ranked", k=10, scope="history"),
retrieve(question, k=10), and a plain Okapi BM25 written in the benchmark over the
same turns (speaker and text). No model is used unless --embedding-url
(embeddings fused into retrieve) or --facts-url (record() keeps the facts a chat
model extracts; a memory then counts for every turn it comes from) is given.
Reported per question category: recall@k (the share of a question's evidence
turns among the top k, averaged) and all-evidence@k (the share of questions with
every evidence turn in the top k), and each ask's round trip (p50, p99).

--latency-turns also times both on one memory of that many turns (the data's
turns, repeated as needed), in process: the ask round trip, the ranking inside
the actor, its processor time, and beside them an ask that does no work
(size()), what a round trip alone costs here; of the asks over 5 ms, how
many were switched out by another process or ran into a garbage collection.
--ablation reports the ranker's recall@10
with each of its steps turned off. --held-out checks the ranker's defaults
against overfitting: leave one conversation out, choose the ranker's parameters
on the others (from a small grid), report recall@10 on the one left out.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import resource
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import msgspec

from actormem.actors import LongTermConfig, MemoryRuntime, Message
from actormem.actors.memory.commands import Search
from actormem.actors.memory.handle import MemoryHandle
from actormem.benchmarks._common import (
    Row,
    at_least,
    bench_config,
    compared,
    percentile,
    plan,
    recorded_rows,
    step,
)
from actormem.benchmarks.retrieval_data import Conversation, load_conversations
from actormem.benchmarks.retrieval_eval import (
    CATEGORIES,
    GRID_SIZE,
    PlainBM25,
    Scores,
    ablation,
    held_out,
)

__all__ = (
    "DEFAULT_DATA",
    "NAME",
    "SLOW_ASK",
    "add_arguments",
    "run",
)

NAME = "retrieval"

#: Where the development split lies, seen from a checkout of the repository.
DEFAULT_DATA = "../shared/data/locomo-dev"
#: Messages per add and per record.
_BATCH = 50
_METHODS = ("search", "retrieve", "plain BM25")
_LABELS = {"search": "search ranked", "retrieve": "retrieve", "plain BM25": "plain BM25"}
_MEASURES = {"recall": "recall", "all": "all-evidence"}
_TARGET = ">= 0.70 and >= 1.3x plain BM25"
#: A search or retrieve ask slower than this (the target's p99) has its stalls counted.
SLOW_ASK = 5e-3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        metavar="PATH",
        default=DEFAULT_DATA,
        help="a directory of conversations in the LoCoMo format (or one such file)",
    )
    parser.add_argument(
        "--transport",
        choices=("local", "redis"),
        default="local",
        help="in-process, or a private redis-server with this process as the worker",
    )
    parser.add_argument(
        "--embedding-url",
        metavar="URL",
        help="an OpenAI-compatible endpoint whose embeddings retrieve fuses in "
        "([longterm] embedding_base_url; its key from OPENAI_API_KEY)",
    )
    parser.add_argument(
        "--embedding-model",
        metavar="NAME",
        default="text-embedding-3-small",
        help="its embedding model",
    )
    parser.add_argument(
        "--facts-url",
        metavar="URL",
        help="an OpenAI-compatible chat endpoint record() extracts facts through "
        "([longterm] facts_base_url; its key from OPENAI_API_KEY)",
    )
    parser.add_argument(
        "--facts-model", metavar="NAME", default="gpt-4o-mini", help="its chat model"
    )
    parser.add_argument(
        "--conversations",
        metavar="N",
        type=at_least(1),
        default=None,
        help="the first N conversations only",
    )
    parser.add_argument(
        "--latency-turns",
        metavar="N",
        type=at_least(0),
        default=10_000,
        help="turns of the memory the in-process latency is timed on (0 = skip)",
    )
    parser.add_argument(
        "--latency-queries",
        metavar="N",
        type=at_least(1),
        default=1_000,
        help="asks of each kind timed",
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also the ranker's recall@10 with each of its steps turned off",
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="also the leave-one-conversation-out check of the ranker's parameters",
    )


@contextlib.asynccontextmanager
async def _runtime(args: argparse.Namespace) -> AsyncIterator[MemoryRuntime]:
    longterm = LongTermConfig(
        embedding_base_url=args.embedding_url or "",
        embedding_model=args.embedding_model,
        facts_base_url=args.facts_url or "",
        facts_model=args.facts_model,
    )
    if args.transport == "local":
        config = msgspec.structs.replace(bench_config(), longterm=longterm)
        async with MemoryRuntime(config) as rt:
            yield rt
        return
    from actormem.benchmarks._redis import redis_app_config, server, worker_runtime

    async with server() as redis:
        config = msgspec.structs.replace(redis_app_config(redis.url), longterm=longterm)
        async with worker_runtime(config) as rt:
            yield rt


def _messages(conversation: Conversation, repeat: int = 0) -> list[Message]:
    marker = f" #{repeat}" if repeat else ""
    return [
        Message(
            role="user",
            name=t.speaker,
            content=t.text + marker,
            metadata={"dia_id": t.dia_id, "session_date": t.session_date},
            timestamp=t.said,
        )
        for t in conversation.turns
    ]


async def _feed(memory: MemoryHandle, messages: list[Message]) -> None:
    """Add the turns, then record them to long-term memory, in batches."""
    for i in range(0, len(messages), _BATCH):
        await memory.add(messages[i : i + _BATCH])
    for i in range(0, len(messages), _BATCH):
        await memory.record(messages[i : i + _BATCH])


async def _ask_all(
    memory: MemoryHandle,
    conversation: Conversation,
    scores: dict[str, Scores],
    times: dict[str, list[float]],
) -> None:
    messages = _messages(conversation)
    await _feed(memory, messages)
    dia_of = {m.id: m.metadata["dia_id"] for m in messages}
    baseline = PlainBM25([f"{t.speaker}: {t.text}" for t in conversation.turns])
    ids = [t.dia_id for t in conversation.turns]
    for q in conversation.questions:
        t0 = time.perf_counter()
        found = await memory.search(q.text, mode="ranked", k=10, scope="history")
        times["search"].append(time.perf_counter() - t0)
        scores["search"].add(q, [m.metadata["dia_id"] for m in found])
        t0 = time.perf_counter()
        recalled = await memory.retrieve(q.text, k=10)
        times["retrieve"].append(time.perf_counter() - t0)
        scores["retrieve"].add(
            q, [[dia_of.get(i, "") for i in r.entry.source_message_ids] for r in recalled]
        )
        t0 = time.perf_counter()
        top = baseline.top(q.text, 10)
        times["plain BM25"].append(time.perf_counter() - t0)
        scores["plain BM25"].add(q, [ids[i] for i in top])


def _quality_rows(scores: dict[str, Scores]) -> list[Row]:
    rows = []
    base = scores["plain BM25"]
    for measure, k in itertools.product(_MEASURES, (10, 5)):
        label = f"{_MEASURES[measure]}@{k}"
        for method in _METHODS:
            s = scores[method]
            by_category = {
                f"{c} {CATEGORIES.get(c, '')}".strip(): s.value(measure, k, c)
                for c in sorted(s.counts)
            }
            extra = {"method": method, "measure": measure, "k": k, "by_category": by_category}
            value, baseline = s.value(measure, k), base.value(measure, k)
            row = Row(name=f"{_LABELS[method]} {label}", value=value, unit="", extra=extra)
            if method != "plain BM25" and baseline > 0:
                row.baseline, row.baseline_value = "plain BM25", baseline
                row.ratio, row.better = value / baseline, "higher"
                row.target = _TARGET if (measure, k) == ("recall", 10) else None
            rows.append(row)
    for method in ("search", "retrieve"):
        s = scores[method]
        for c in sorted(s.counts):
            value, baseline = s.value("recall", 10, c), base.value("recall", 10, c)
            name = f"{_LABELS[method]} recall@10, category {c} {CATEGORIES.get(c, '')}".strip()
            extra = {"method": method, "category": c, "in_category": s.counts[c]}
            row = Row(name=name, value=value, unit="", extra=extra)
            if baseline > 0:
                row.baseline, row.baseline_value = "plain BM25", baseline
                row.ratio, row.better = value / baseline, "higher"
            rows.append(row)
    return rows


def _latency_rows(
    times: dict[str, list[float]],
    where: str,
    turns: str,
    what: str = "ask round trip",
    target_of: str = "ask round trip",
) -> list[Row]:
    rows = []
    for method in ("search", "retrieve"):
        for p in (50, 99):
            ours = percentile(times[method], p) * 1e3
            raw = percentile(times["plain BM25"], p) * 1e3
            name = f"{_LABELS[method]} {what} p{p}, {where}, {turns}"
            extra = {"method": method, "p": p, "latency": where}
            target = (
                "< 5 ms" if p == 99 and turns.startswith("10,000") and what == target_of else None
            )
            if raw > 0:
                rows.append(
                    compared(name, ours, "ms", "plain BM25 top 10", raw, target=target, extra=extra)
                )
            else:
                rows.append(Row(name=name, value=ours, unit="ms", target=target, extra=extra))
    return rows


async def _latency(conversations: list[Conversation], turns: int, queries: int) -> list[Row]:
    """Search and retrieve asks on one memory of ``turns`` turns, in process; beside
    them, an ask that does no work (``size()``): what a round trip alone costs."""
    messages: list[Message] = []
    for repeat in itertools.count():
        for conv in conversations:
            messages += _messages(conv, repeat)
        if len(messages) >= turns:
            break
    messages = messages[:turns]
    questions = [q.text for c in conversations for q in c.questions]
    asked = [questions[i % len(questions)] for i in range(queries)]
    times: dict[str, list[float]] = {m: [] for m in (*_METHODS, "size")}
    async with MemoryRuntime(bench_config()) as rt:
        memory = rt.memory("retrieval/latency")
        await _feed(memory, messages)
        # Each index is built by the first query that needs it.
        await memory.search(asked[0], mode="ranked", k=10, scope="history")
        await memory.retrieve(asked[0], k=10)
        with _Stalls() as stalls:
            for q in asked:
                await stalls.timed(
                    memory.search(q, mode="ranked", k=10, scope="history"), times["search"]
                )
                await stalls.timed(memory.retrieve(q, k=10), times["retrieve"])
                t0 = time.perf_counter()
                await memory.size()
                times["size"].append(time.perf_counter() - t0)
        # The same work inside the actor, without the ask: the ranking's own time,
        # and the processor time it takes (what the other processes of a busy
        # machine add to the first is not in the second).
        actor: Any = rt._cells["memory/retrieval/latency"].actor
        inside: dict[str, list[float]] = {m: [] for m in _METHODS}
        cpu: dict[str, list[float]] = {m: [] for m in _METHODS}
        for q in asked:
            c0, t0 = time.thread_time(), time.perf_counter()
            actor._queries.search(Search(query=q, mode="ranked", k=10, scope="history"))
            inside["search"].append(time.perf_counter() - t0)
            cpu["search"].append(time.thread_time() - c0)
            c0, t0 = time.thread_time(), time.perf_counter()
            await actor.recall.longterm.retrieve(q, 10)
            inside["retrieve"].append(time.perf_counter() - t0)
            cpu["retrieve"].append(time.thread_time() - c0)
    baseline = PlainBM25([f"{m.name}: {m.text()}" for m in messages])
    for q in asked:
        c0, t0 = time.thread_time(), time.perf_counter()
        baseline.top(q, 10)
        times["plain BM25"].append(time.perf_counter() - t0)
        cpu["plain BM25"].append(time.thread_time() - c0)
    inside["plain BM25"] = times["plain BM25"]
    where = f"{turns:,} turns"
    rows = _latency_rows(times, "in-process", where)
    rows += _latency_rows(inside, "in-process", where, what="ranking in the actor")
    rows += _latency_rows(cpu, "in-process", where, what="ranking CPU time in the actor")
    for p in (50, 99):
        name = f"size() ask round trip p{p} (an ask doing no work), in-process, {where}"
        rows.append(Row(name=name, value=percentile(times["size"], p) * 1e3, unit="ms"))
    return rows + stalls.rows(where)


class _Stalls:
    """What else happened during the timed asks: the garbage collector's runs, and
    the times the thread was switched out involuntarily (another process took its
    core), counted for the asks slower than ``SLOW_ASK``."""

    def __init__(self) -> None:
        self.asks = self.slow = self.switched = self.collected = self.collections = 0

    def __enter__(self) -> _Stalls:
        gc.callbacks.append(self._collecting)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._collecting)

    def _collecting(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.collections += 1

    async def timed(self, ask: Awaitable[object], times: list[float]) -> None:
        """Await ``ask``, append its round trip to ``times``, count its stalls."""
        switches, collections = _involuntary_switches(), self.collections
        t0 = time.perf_counter()
        await ask
        took = time.perf_counter() - t0
        times.append(took)
        self.asks += 1
        if took > SLOW_ASK:
            self.slow += 1
            self.switched += _involuntary_switches() > switches
            self.collected += self.collections > collections

    def rows(self, where: str) -> list[Row]:
        slow = f"search and retrieve asks over {SLOW_ASK * 1e3:.0f} ms"
        extra = {"asks": self.asks, "collections": self.collections}
        return [
            Row(name=f"{slow}, in-process, {where}", value=self.slow, unit="asks", extra=extra),
            Row(name=f"{slow} switched out by another process", value=self.switched, unit="asks"),
            Row(name=f"{slow} during a garbage collection", value=self.collected, unit="asks"),
        ]


def _involuntary_switches() -> int:
    """How often this thread was switched out while it could still run."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


async def run(args: argparse.Namespace) -> list[Row]:
    conversations = load_conversations(Path(args.data), args.conversations)
    rows = recorded_rows()
    held = GRID_SIZE if args.held_out else 0
    extra = (1 if args.latency_turns else 0) + (1 if args.ablation else 0)
    plan(len(conversations) + extra + held)
    scores = {m: Scores() for m in _METHODS}
    times: dict[str, list[float]] = {m: [] for m in _METHODS}
    where = "in-process" if args.transport == "local" else "Redis"
    async with _runtime(args) as rt:
        for conv in conversations:
            step(
                f"conversation {conv.name}: {len(conv.turns):,} turns, "
                f"{len(conv.questions):,} questions ({where})"
            )
            await _ask_all(rt.memory(f"retrieval/{conv.name}"), conv, scores, times)
    turns = sum(len(c.turns) for c in conversations)
    questions = sum(len(c.questions) for c in conversations)
    quality = _quality_rows(scores)
    for row in quality:
        row.extra.update(conversations=len(conversations), turns=turns, questions=questions)
    rows += quality
    rows += _latency_rows(times, where, f"conversations of {turns / len(conversations):,.0f} turns")
    if args.latency_turns:
        step(f"latency on one memory of {args.latency_turns:,} turns (in-process)")
        rows += await _latency(conversations, args.latency_turns, args.latency_queries)
    if args.ablation:
        step("ablation: the ranker with each step turned off")
        found = ablation(conversations)
        for label, value in found.items():
            name = f"ranker recall@10, {label}"
            rows.append(_versus_defaults(name, value, found["all steps"]))
    if args.held_out:
        rows += _held_out_rows(conversations)
    return rows


def _held_out_rows(conversations: list[Conversation]) -> list[Row]:
    folds = held_out(conversations, step)
    rows = []
    for fold in folds:
        name = f"ranker recall@10 on {fold.held_out}, parameters chosen on the others"
        rows.append(_versus_defaults(name, fold.held_out_recall10, fold.default_recall10))
        rows[-1].extra = msgspec.structs.asdict(fold)
    total = sum(f.questions for f in folds)
    mean = sum(f.held_out_recall10 * f.questions for f in folds) / total
    default = sum(f.default_recall10 * f.questions for f in folds) / total
    name = "ranker recall@10, each conversation held out in turn (all questions)"
    rows.append(_versus_defaults(name, mean, default))
    return rows


def _versus_defaults(name: str, value: float, default: float) -> Row:
    return Row(
        name=name,
        value=value,
        unit="",
        baseline="the defaults",
        baseline_value=default,
        ratio=value / default if default else None,
        better="higher",
    )
