"""The command line as a user meets it: the simulation report, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from actormem.runtime.cli import main
from tests.support import ROOT


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actormem.runtime.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.slow
def test_simulate_small_run_reports_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = run_cli(
        "simulate", "configs/town.toml", "--agents", "6", "--steps", "8", "--json", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "messages processed" in proc.stdout
    assert "planted facts" in proc.stdout
    report = json.loads(out.read_text())
    assert report["agents"] == 6 and report["steps"] == 8
    assert report["facts_planted"] == 6 * 3
    assert report["facts_found_by_search"] == report["facts_planted"]
    assert report["messages_processed"] > 6 * 8
    assert report["runtime"]["failures"] == 0
    # Knowledge spreads through the insight pool's feeds: at most 5 insights to each
    # agent at each of the 3 steps from the first share (step 5) on.
    assert report["insights_shared"] >= 6 * 2
    assert report["insights_shared"] < report["insights_delivered"] <= 6 * 5 * 3
    assert report["facts_known_after_sharing"] > report["facts_known_before_sharing"]
    for agent in report["per_agent"]:
        assert agent["known_after_sharing"] > agent["known_before_sharing"]
    for agent in report["per_agent"]:
        assert agent["context_tokens"] <= report["context_budget"]


@pytest.mark.slow
def test_same_seed_same_story(tmp_path: Path) -> None:
    reports = []
    for i in range(2):
        out = tmp_path / f"r{i}.json"
        proc = run_cli(
            "simulate",
            "--agents",
            "4",
            "--steps",
            "5",
            "--seed",
            "3",
            "--json",
            str(out),
            "--transport",
            "local",
        )
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(out.read_text()))
    keys = ("messages_processed", "tokens_stored", "tokens_in_final_contexts")
    assert [r[k] for k in keys for r in reports[:1]] == [r[k] for k in keys for r in reports[1:]]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["simulate", "configs/nope.toml"], "configs/nope.toml: config file not found"),
        (["simulate", "--agents", "0"], "expected a number >= 1"),
        (["simulate", "--agents", "many"], "expected a whole number"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_bad_input_gives_one_line(args: list[str], expected: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr


def test_bad_config_values_give_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[simulation]\nagents = 'ten'\n")
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"actormem: error: {bad}: key 'simulation.agents': expected int, got str"
    bad.write_text("[memory]\nmax_tokns = 5\n")
    assert main(["config", str(bad)]) == 2
    assert "unknown key 'memory.max_tokns'" in capsys.readouterr().err


def test_config_command_prints_the_full_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "configs/town.toml"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulation"]["agents"] == 50
    assert data["memory"]["max_tokens"] == 131072


def test_config_command_never_prints_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password, key = "s3cret-Pa55word", "inline-hmac-key-0123456789"
    path = tmp_path / "secret.toml"
    path.write_text(
        f'[redis]\nurl = "redis://worker:{password}@example:6379/0"\n'
        f'[pool]\nhmac_key = "{key}"\n'
        f'[compression.llm]\nbase_url = "https://u:{password}@llm.example/v1"\n'
    )
    assert main(["config", str(path)]) == 0
    out = capsys.readouterr().out
    assert password not in out and key not in out
    data = json.loads(out)
    assert data["redis"]["url"] == "redis://worker:***@example:6379/0"
    assert data["pool"]["hmac_key"] == "***"
    assert data["compression"]["llm"]["base_url"] == "https://u:***@llm.example/v1"


@pytest.mark.parametrize("name", ["local", "memory"])
def test_transport_local_and_its_older_name_run_in_process(tmp_path: Path, name: str) -> None:
    out = tmp_path / "report.json"
    args = ["simulate", "--agents", "1", "--steps", "1", "--no-progress", "--json", str(out)]
    assert main([*args, "--transport", name]) == 0
    assert json.loads(out.read_text())["transport"] == "local"


def test_default_toml_documents_the_real_defaults() -> None:
    from actormem.actors import AppConfig, load_app_config

    assert load_app_config(ROOT / "configs" / "default.toml") == AppConfig()


@pytest.mark.slow
def test_small_budget_town_stays_under_budget_and_keeps_facts(tmp_path: Path) -> None:
    out = tmp_path / "small.json"
    proc = run_cli(
        "simulate",
        "configs/town-small.toml",
        "--agents",
        "8",
        "--steps",
        "30",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["compressions"] > 0 and report["tokens_saved"] > 0
    assert report["agents_over_budget"] == 0
    assert report["peak_working_tokens"] <= report["compression_budget_tokens"]
    assert report["facts_found"] >= 0.9 * report["facts_planted"]


@pytest.mark.slow
def test_three_workers_give_the_in_process_planted_fact_results(tmp_path: Path) -> None:
    reports = {}
    for mode, extra in (("local", ["--transport", "local"]), ("workers", ["--workers", "3"])):
        out = tmp_path / f"{mode}.json"
        proc = run_cli(
            "simulate",
            "configs/town.toml",
            "--agents",
            "6",
            "--steps",
            "8",
            "--json",
            str(out),
            *extra,
        )
        assert proc.returncode == 0, proc.stderr
        reports[mode] = json.loads(out.read_text())
    assert reports["workers"]["transport"] == "redis"
    for key in ("facts_planted", "facts_found", "facts_found_in_context"):
        assert reports["workers"][key] == reports["local"][key], key
    known = [a["known_after_sharing"] for a in reports["workers"]["per_agent"]]
    assert known == [a["known_after_sharing"] for a in reports["local"]["per_agent"]]


@pytest.mark.slow
def test_a_worker_without_a_redis_url_is_one_line() -> None:
    proc = run_cli("worker", "configs/default.toml")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "actormem: error: configs/default.toml: a worker needs [redis] url "
        "(the Redis its agents live in)"
    ]
