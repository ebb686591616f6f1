"""`shadowguard bench faults`: the fault corpus (kept only when the unguarded replay fails) and variants."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from benchmark.campaign.agents import load_trajectories
from benchmark.campaign.corpus import FAMILIES, VARIANTS, CorpusStats, _replay, build_corpus
from benchmark.envs import Database, load_domain
from benchmark.tasks import BenchData, Task
from proxy.cli import _mount_benchmark, app

RETAIL = "sandbox_external_retail"


def _tasks(bench: BenchData) -> list[Task]:
    return bench.tasks([RETAIL])[:12]


def test_kept_faults_fail_and_variants_pass_unguarded(bench: BenchData) -> None:
    domain, database = load_domain(RETAIL, bench.bundle), Database()
    tasks = {t.id: t for t in _tasks(bench)}
    stats = CorpusStats()
    entries = list(build_corpus(domain, database, list(tasks.values()), 0, stats))
    assert {e.family for e in entries if e.kind == "fault"} >= {
        "wrong_value",
        "missing_write",
        "premature_stop",
    }
    assert {e.family for e in entries} <= set(FAMILIES) | set(VARIANTS)
    for e in entries:
        golden = [
            {"tool": c.tool, "arguments": c.parameters} for c in tasks[e.uid].answer.golden_tool_interactions
        ]
        assert e.calls != golden or e.kind == "variant"
        assert _replay(domain, database, tasks[e.uid], e.calls) is (e.kind == "variant"), e
    kept = sum(stats.kept.values())
    assert kept == len(entries) and sum(stats.tried.values()) >= kept
    again = list(build_corpus(domain, database, list(tasks.values()), 0, CorpusStats()))
    assert [e.line() for e in again] == [e.line() for e in entries]
    other = list(build_corpus(domain, database, list(tasks.values()), 1, CorpusStats()))
    assert [e.line() for e in other] != [e.line() for e in entries]
    database.dispose()


def test_corpus_replays_and_is_measured(tmp_path: Path, bench: BenchData) -> None:
    _mount_benchmark()
    corpus = tmp_path / "corpus.jsonl"
    result = CliRunner().invoke(app, ["bench", "faults", "--domain", RETAIL, "--out", str(corpus)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"faults: corpus {corpus} faults ")
    lines = [json.loads(x) for x in corpus.read_text().splitlines()]
    assert all(set(x) == {"uid", "kind", "family", "golden_call", "note", "calls"} for x in lines)
    trajectories = load_trajectories(corpus, {t.id for t in bench.tasks([RETAIL])})
    assert len(trajectories) == len(lines)
    # replay a slice of it (the first few tasks' lines) through the guard, then measure
    first = {x["uid"] for x in lines[:40]}
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(x) + "\n" for x in lines if x["uid"] in first))
    run = tmp_path / "run.jsonl"
    args = [
        "bench",
        "run",
        "--agent",
        "replay",
        "--trajectories",
        str(small),
        "--arms",
        "guard",
        "--out",
        str(run),
    ]
    assert CliRunner().invoke(app, args).exit_code == 0
    measured = CliRunner().invoke(app, ["bench", "faults", "--measure", str(run), "--corpus", str(small)])
    assert measured.exit_code == 0, measured.output
    last = measured.output.strip().splitlines()[-1]
    faults = sum(1 for x in small.read_text().splitlines() if json.loads(x)["kind"] == "fault")
    assert last.startswith("faults: caught ") and f"/{faults} (" in last, last
    variants = sum(1 for x in small.read_text().splitlines() if json.loads(x)["kind"] == "variant")
    assert last.endswith(f"false-blocks 0/{variants}"), last


def test_bad_faults_input(tmp_path: Path) -> None:
    _mount_benchmark()
    out = tmp_path / "c.jsonl"
    result = CliRunner().invoke(app, ["bench", "faults", "--domain", "retail", "--out", str(out)])
    assert result.exit_code == 2 and "unknown domain(s) retail" in result.output
    assert not out.exists()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"uid": "x", "kind": "fault", "family": "missing_write", "calls": []}\n')
    results = tmp_path / "r.jsonl"
    results.write_text(
        json.dumps({"uid": "x", "metadata": {"open_loop": "caught", "trajectory": "other:9"}}) + "\n"
    )
    result = CliRunner().invoke(app, ["bench", "faults", "--measure", str(results), "--corpus", str(corpus)])
    assert result.exit_code == 2
    assert f"{results}:1: field metadata.trajectory" in " ".join(result.output.split())
