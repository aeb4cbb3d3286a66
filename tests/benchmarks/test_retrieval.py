"""bench retrieval on a tiny conversation in the LoCoMo format: its rows, the data
checks, and one-line errors for data it cannot read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actormem.benchmarks.__main__ import build_parser
from actormem.benchmarks.retrieval import run
from actormem.benchmarks.retrieval_data import DataError, load_conversations
from tests.actors.recall.embeddings import embed
from tests.benchmarks.helpers import check_rows
from tests.support.openai_server import OpenAIStub

pytestmark = pytest.mark.anyio

TURNS = [
    ("Ann", "Hi Bo! I adopted a puppy named Rex last week."),
    ("Bo", "Lovely! I started pottery classes yesterday."),
    ("Ann", "What do you make in the classes?"),
    ("Bo", "Bowls, mostly. [extra]"),
]


def write_conversation(folder: Path, name: str = "c1") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    session = [{"speaker": s, "dia_id": f"D1:{n + 1}", "text": t} for n, (s, t) in enumerate(TURNS)]
    session[3]["blip_caption"] = "a photo of clay bowls"
    data = {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": session,
        "qa": [
            {"question": "What is the name of Ann's puppy?", "evidence": ["D1:1"], "category": 1},
            {"question": "When did Bo start pottery?", "evidence": ["D1:2"], "category": 2},
            {"question": "What does Bo make?", "evidence": ["D1:3; D1:4"], "category": 4},
            {"question": "What is Bo's car?", "evidence": [], "category": 5},
            {"question": "Unknown evidence?", "evidence": ["D9:9"], "category": 1},
        ],
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_loader_reads_turns_dates_and_labelled_questions(tmp_path: Path) -> None:
    [conv] = load_conversations(write_conversation(tmp_path))
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert conv.turns[3].text.endswith("[shares a photo: a photo of clay bowls]")
    assert conv.turns[1].said - conv.turns[0].said == 1.0
    assert [(q.category, sorted(q.evidence)) for q in conv.questions] == [
        (1, ["D1:1"]),
        (2, ["D1:2"]),
        (4, ["D1:3", "D1:4"]),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file or directory"),
        ("[1, 2]", "a conversation is a JSON object"),
        ("{not json", "not JSON"),
        ('{"qa": []}', "no session_1 list of turns"),
        ('{"session_1": [], "session_1_date_time": "yesterday"}', "a session date like"),
    ],
)
def test_data_it_cannot_read_is_named(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "c.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_conversations(path)


async def test_the_benchmark_reports_every_method_side_by_side(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_conversation(data, "c1")
    write_conversation(data, "c2")
    argv = ["retrieval", "--data", str(data), "--latency-turns", "20", "--latency-queries", "5"]
    rows = await run(build_parser().parse_args([*argv, "--held-out", "--ablation"]))
    check_rows("retrieval", rows)
    names = {row.name for row in rows}
    for method in ("search ranked", "retrieve", "plain BM25"):
        for measure in ("recall@10", "recall@5", "all-evidence@10", "all-evidence@5"):
            assert f"{method} {measure}" in names
    search = next(row for row in rows if row.name == "search ranked recall@10")
    assert search.extra["questions"] == 6 and search.extra["turns"] == 8
    assert set(search.extra["by_category"]) == {"1 single-hop", "2 temporal", "4 multi-hop"}
    assert 0.0 <= search.value <= 1.0
    assert any("20 turns" in row.name and row.unit == "ms" for row in rows)
    # Beside the asks: the ranking's processor time, the floor, and what stalled.
    latency = {row.name: row for row in rows if "20 turns" in row.name}
    assert any("ranking CPU time in the actor p99" in name for name in latency)
    assert any(name.startswith("size() ask round trip p99") for name in latency)
    slow = next(r for n, r in latency.items() if n.startswith("search and retrieve asks over"))
    assert slow.extra["asks"] == 10 and 0 <= slow.value <= 10
    stalls = [row for row in rows if row.name.startswith("search and retrieve asks over")]
    assert len(stalls) == 3 and all(row.value <= slow.value for row in stalls)
    held = [row for row in rows if "held out" in row.name or "chosen on" in row.name]
    assert len(held) == 3 and held[0].extra["held_out"] == "c1"
    steps = [row.name for row in rows if row.name.startswith("ranker recall@10, w")]
    assert steps == [
        "ranker recall@10, without speakers",
        "ranker recall@10, without time",
        "ranker recall@10, without feedback",
        "ranker recall@10, without neighbours",
        "ranker recall@10, words alone",
    ]


def _one_fact_per_message(body: dict[str, Any]) -> str:
    lines = body["messages"][-1]["content"].split("Messages:\n", 1)[1].splitlines()
    facts = [{"text": f"Fact: {line}", "sources": [n]} for n, line in enumerate(lines, 1)]
    return json.dumps({"facts": facts})


async def test_the_benchmark_measures_embeddings_and_facts_when_given_endpoints(
    tmp_path: Path,
) -> None:
    write_conversation(tmp_path)
    with OpenAIStub(reply=_one_fact_per_message, embed=embed) as server:
        argv = ["retrieval", "--data", str(tmp_path), "--latency-turns", "0"]
        argv += ["--embedding-url", server.base_url, "--facts-url", server.base_url]
        rows = await run(build_parser().parse_args(argv))
        asked = {b.get("model") for b in server.bodies}
    check_rows("retrieval", rows)
    assert asked == {"text-embedding-3-small", "gpt-4o-mini"}  # both endpoints were used
    retrieve = next(row for row in rows if row.name == "retrieve recall@10")
    assert retrieve.value == 1.0  # every fact leads back to its turn


@pytest.mark.slow
async def test_the_benchmark_runs_over_redis(tmp_path: Path) -> None:
    write_conversation(tmp_path)
    argv = ["retrieval", "--data", str(tmp_path), "--transport", "redis", "--latency-turns", "0"]
    rows = await run(build_parser().parse_args(argv))
    check_rows("retrieval", rows)
    assert any("Redis" in row.name for row in rows)


@pytest.mark.slow
def test_a_missing_data_set_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    proc = subprocess.run(
        [sys.executable, "-m", "actormem.benchmarks", "retrieval", "--data", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line == f"actormem bench retrieval: error: {missing}: no such file or directory"
