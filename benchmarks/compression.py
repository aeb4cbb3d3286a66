"""Compression: tokens saved, planted-fact retention and latency of the offline
summarizer on simulation-style conversations."""

from __future__ import annotations

import argparse
import json
import random
import time

from actormem.actors import CompressionConfig, Message, ToolCall, compress
from actormem.actors.app.simulation import agent_names, plant_facts
from actormem.actors.compression import OfflineSummarizer
from actormem.benchmarks._common import Row, at_least, message_texts, percentile
from actormem.runtime import get_counter

NAME = "compression"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--conversations", type=at_least(1), default=30, help="conversations compressed"
    )
    parser.add_argument(
        "--messages", type=at_least(1), default=300, help="messages per conversation"
    )
    parser.add_argument(
        "--max-tokens", type=at_least(1), default=4_000, help="compression max_tokens"
    )


def conversation(seed: int, size: int, facts: list[str]) -> list[Message]:
    rng = random.Random(seed)
    texts = message_texts(size, chars=160, seed=seed + 1)
    counter = get_counter()
    out = [Message(role="system", content="You are a townsperson.")]
    spots = sorted(rng.sample(range(1, size - 5), len(facts)))
    for i in range(1, size):
        if spots and i == spots[0]:
            spots.pop(0)
            out.append(Message(role="user", name="narrator", content=facts.pop(0)))
        elif i % 7 == 0:
            call = ToolCall(f"c{i}", "look_up", json.dumps({"q": texts[i][:30]}))
            out.append(Message(role="assistant", tool_calls=(call,)))
            out.append(Message(role="tool", tool_call_id=call.id, content=texts[i] * 3))
        else:
            out.append(Message(role="user" if i % 2 else "assistant", content=texts[i]))
    return [m.with_tokens(counter.count_message(m.to_openai())) for m in out]


async def run(args: argparse.Namespace) -> list[Row]:
    counter = get_counter()
    config = CompressionConfig(max_tokens=args.max_tokens, msg_threshold=100)
    summarizer = OfflineSummarizer(counter)
    names = agent_names(args.conversations)
    facts = plant_facts(names, 3, seed=7)
    saved: list[float] = []
    latencies: list[float] = []
    kept_in_view = reachable = planted = 0
    for n, name in enumerate(names):
        mine = [f for f in facts if f.agent == name]
        view = conversation(n, args.messages, [f.statement for f in mine])
        t0 = time.perf_counter()
        outcome = await compress(view, config=config, counter=counter, summarizer=summarizer)
        latencies.append(time.perf_counter() - t0)
        saved.append(outcome.tokens_saved / max(1, outcome.tokens_before))
        text = "\n".join(m.text() for m in outcome.messages)
        offloaded = "\n".join(m.text() for ms in outcome.offloaded.values() for m in ms)
        for fact in mine:
            planted += 1
            kept_in_view += fact.answer in text
            reachable += fact.answer in text or fact.answer in offloaded
    return [
        Row(name="tokens saved (share of the view)", value=100 * sum(saved) / len(saved), unit="%"),
        Row(
            name="planted facts kept in the compressed view",
            value=100 * kept_in_view / planted,
            unit="%",
        ),
        Row(
            name="planted facts reachable (view or reload)",
            value=100 * reachable / planted,
            unit="%",
        ),
        Row(name="compression latency p50", value=percentile(latencies, 50) * 1e3, unit="ms"),
        Row(name="compression latency p99", value=percentile(latencies, 99) * 1e3, unit="ms"),
    ]
