"""``shadowguard bench chaos``: the kill trials' checker finds what it counts, and the quick suite (real
kill -9 trials of ``shadowguard serve`` over a file-backed SQLite upstream and every other trial kind)
ends with every counter at 0."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from benchmark.chaos_kills import (
    Counters,
    KillTrialError,
    Round,
    SessionLog,
    check_database,
    note_id,
    prepare_database,
    run_kills,
)
from benchmark.chaos_suite import run_suite
from tests.support.services import require_redis_server


def _database(tmp_path: Path, notes: list[str]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "notes.sqlite"
    prepare_database(db)
    conn = sqlite3.connect(str(db))
    with conn:
        conn.executemany("INSERT INTO notes VALUES (?, 'x', 'published')", [(n,) for n in notes])
    conn.close()
    return db


def _logs() -> list[SessionLog]:
    """Session 0: round 0 acknowledged, round 1 commit sent, no answer. Session 1: round 0 open."""
    committed = SessionLog(7, 0, "s0", [Round(2, 1.0, True), Round(2, 2.0, False)])
    open_round = SessionLog(7, 1, "s1", [Round(1, None, False)])
    return [committed, open_round]


def _check(db: Path) -> tuple[Counters, list[str], int]:
    counters, problems = Counters(), list[str]()
    rounds = check_database(db, _logs(), counters, problems)
    return counters, problems, rounds


def test_the_checker_counts_nothing_when_the_database_holds_what_the_clients_saw(tmp_path: Path) -> None:
    db = _database(tmp_path, [note_id(7, 0, 0, "a"), note_id(7, 0, 0, "b")])
    assert _check(db) == (Counters(), [], 1)
    # A round whose commit was sent but not answered may have landed, whole.
    db2 = _database(tmp_path / "2", [note_id(7, 0, r, p) for r in (0, 1) for p in "ab"])
    assert _check(db2) == (Counters(), [], 2)


def test_the_checker_finds_a_deleted_acknowledged_commit(tmp_path: Path) -> None:
    db = _database(tmp_path, [])
    counters, problems, _ = _check(db)
    assert counters == Counters(lost_commits=1)
    assert problems == ["lost commit: session 0 round 0 was acknowledged and is not in the database"]


def test_the_checker_finds_half_commits_leaks_double_writes_and_orphans(tmp_path: Path) -> None:
    db = _database(tmp_path, [note_id(7, 0, 0, "a"), note_id(7, 0, 0, "b"), note_id(7, 0, 1, "a")])
    conn = sqlite3.connect(str(db))
    with conn:
        conn.execute("INSERT INTO notes VALUES (?, 'x', 'draft')", (note_id(7, 1, 0, "a"),))
        conn.execute("UPDATE notes SET body = 'again' WHERE id = ?", (note_id(7, 0, 0, "b"),))
        conn.execute('CREATE TRIGGER "sg_insert_notes" AFTER INSERT ON notes BEGIN SELECT 1; END')
    conn.close()
    counters, problems, rounds = _check(db)
    assert rounds == 1
    assert counters == Counters(partial_commits=3, leaks=1, double_writes=1), problems
    assert problems == [
        "partial commit: session 0 round 1 has one of its two rows",
        "partial commit: session 1 round 0 has one of its two rows",
        "leak: session 1 round 0 never sent its commit and has rows in the database",
        f"double write: {note_id(7, 0, 0, 'b')} was applied 2 times",
        "orphaned capture objects in the upstream: sg_insert_notes",
    ]


def test_parameters_out_of_range_are_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(KillTrialError, match="at least 1"):
        run_kills(0, 3, out=tmp_path)
    with pytest.raises(KillTrialError, match="unknown upstream"):
        run_kills(1, 3, out=tmp_path, upstream="mysql")
    with pytest.raises(KillTrialError, match="kill window"):
        run_kills(1, 3, out=tmp_path, kill_window_s=(2.0, 1.0))
    assert list(tmp_path.iterdir()) == []


def test_the_quick_suite_counts_nothing_over_every_trial_kind(tmp_path: Path) -> None:
    """``shadowguard bench chaos --quick``: kill -9 of the proxy (real SIGKILL, restart), kill -9 of the
    upstream, the approval store (its own Redis) going away, concurrent sessions, hostile input. The
    counters, not the timings, are asserted."""
    require_redis_server()
    result = run_suite(quick=True, out=tmp_path)
    assert result.line() == (
        "chaos: partial-commits 0 lost-commits 0 leaks 0 double-writes 0 5xx 0 hangs 0 (6 trials)"
    )
    assert {r.kind: r.problems for r in result.records} == {
        "kill-proxy-sqlite": [],
        "upstream-kill": [],
        "approval-store-redis": [],
        "isolation": [],
        "hostile-input": [],
    }
    kills = [r for r in result.records if r.kind == "kill-proxy-sqlite"]
    assert [r.trial for r in kills] == [0, 1]
    for trial in kills:
        details = trial.details
        answered = details["refused_as_lost"] + details["committed_before_kill"] + details["interrupted"]
        assert details["rounds_open_at_kill"] == answered, "one answer per open round"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"] == result.line()
    assert [t["kind"] for t in report["trials"]] == [r.kind for r in result.records]
    assert result.line() in (tmp_path / "report.md").read_text()
    kill_lines = (tmp_path / "kills-sqlite" / "kills.jsonl").read_text().splitlines()
    assert [json.loads(line)["trial"] for line in kill_lines] == [0, 1]
