"""The audit log: JSON lines, arguments redacted to a digest unless opted in, safe across threads."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from guard.models import ChangeSet, CommitOutcome, EffectClass, RowChange, ToolOutcome, Verdict, Violation
from proxy.audit import AuditLog, arguments_digest
from tests.support.proxy import tool_outcome, violation

SECRET: dict[str, Any] = {
    "from_account": "acc-alice",
    "to_account": "acc-bob",
    "amount": 500,
    "memo": "rent for flat 3B",
}


def transfer(verdict: Verdict = Verdict.ROLLED_BACK, **arguments: Any) -> ToolOutcome:
    changes = ChangeSet(
        changes=[
            RowChange(
                table="accounts", key="acc-bob", op="update", before={"balance_cents": 100}, after={"b": -1}
            ),
            RowChange(table="transfers", key="7", op="insert", after={"memo": "rent for flat 3B"}),
        ]
    )
    return tool_outcome(
        "transfer_funds",
        verdict,
        call={"id": "call-1", "session_id": "s-9", "principal": "agent-a", "arguments": arguments},
        effect=EffectClass.IRREVERSIBLE,
        result='{"secret": "result text"}',
        changes=changes,
        violations=[
            violation(
                "example.no_overdraft",
                "negative balance",
                rows=[{"account_id": "acc-bob", "balance": -190.0}],
            )
        ],
        retries=1,
        duration_ms=12.34567,
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_call_record_has_the_decision_and_a_digest_not_the_data(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "audit.jsonl"
    with AuditLog(path, include_arguments=False) as audit:
        audit.record_call(transfer(**SECRET), "s-1")
    [record] = lines(path)
    assert datetime.fromisoformat(record.pop("ts")).tzinfo is not None
    assert record == {
        "kind": "call",
        "session": "s-1",
        "call_id": "call-1",
        "principal": "agent-a",
        "tool": "transfer_funds",
        "effect": "irreversible",
        "verdict": "rolled_back",
        "error_class": None,
        "retries": 1,
        "duration_ms": 12.346,
        "changes": 2,
        "tables": ["accounts", "transfers"],
        "violations": [
            {"rule": "example.no_overdraft", "message": "negative balance", "source": "terms §3.1", "rows": 1}
        ],
        "arguments_digest": arguments_digest(SECRET),
    }
    text = path.read_text(encoding="utf-8")
    for private in ("rent for flat", "acc-alice", "result text", "-190"):
        assert private not in text


def test_arguments_are_recorded_only_when_opted_in(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, include_arguments=True) as audit:
        audit.record_call(transfer(**SECRET), None)
    [record] = lines(path)
    assert record["arguments"] == SECRET
    assert record["arguments_digest"] == arguments_digest(SECRET)
    assert record["session"] == "s-9"  # the call's own session when none is given


def test_the_digest_is_canonical() -> None:
    assert arguments_digest({"a": 1, "b": [1, 2]}) == arguments_digest({"b": [1, 2], "a": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 2})
    assert arguments_digest({}).startswith("sha256:") and len(arguments_digest({})) == 7 + 64


def test_commit_and_rollback_records(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    refused = CommitOutcome(
        committed=False, violations=[Violation(rule_id="example.accounts_named", message="blank name")]
    )
    with AuditLog(path, include_arguments=False) as audit:
        audit.record_commit(refused, "s-2", duration_ms=4.0)
        audit.record_commit(CommitOutcome(committed=True, changes=transfer().changes), "s-2")
        audit.record_rollback("s-3", "idle", changes=5)
    refused_line, committed_line, rollback_line = lines(path)
    assert (refused_line["kind"], refused_line["committed"], refused_line["duration_ms"]) == (
        "commit",
        False,
        4.0,
    )
    assert refused_line["violations"][0]["rule"] == "example.accounts_named"
    assert (committed_line["committed"], committed_line["changes"], committed_line["tables"]) == (
        True,
        2,
        ["accounts", "transfers"],
    )
    assert {k: rollback_line[k] for k in ("kind", "session", "reason", "changes")} == {
        "kind": "rollback",
        "session": "s-3",
        "reason": "idle",
        "changes": 5,
    }


def test_appends_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as audit:
        audit.record_rollback("a", "agent")
    with AuditLog(path) as audit:
        audit.record_rollback("b", "agent")
    assert [r["session"] for r in lines(path)] == ["a", "b"]


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, include_arguments=True)
    big = {"memo": "x" * 20_000}

    def write(worker: int) -> None:
        for i in range(50):
            audit.record_call(transfer(Verdict.ALLOWED, n=i, **big), f"w{worker}")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    audit.close()
    records = lines(path)
    assert len(records) == 400
    assert sorted(r["arguments"]["n"] for r in records if r["session"] == "w3") == list(range(50))


def test_without_a_path_records_go_to_the_audit_logger(caplog: pytest.LogCaptureFixture) -> None:
    audit = AuditLog(None, include_arguments=False)
    with caplog.at_level(logging.INFO, logger="shadowguard.audit"):
        audit.record_call(transfer(**SECRET), "s-log")
    [entry] = [r for r in caplog.records if r.name == "shadowguard.audit"]
    record = json.loads(entry.getMessage())
    assert (record["kind"], record["session"], record["verdict"]) == ("call", "s-log", "rolled_back")
    assert "rent for flat" not in entry.getMessage()


def test_a_call_record_is_not_built_when_nothing_writes_it(caplog: pytest.LogCaptureFixture) -> None:
    audit = AuditLog(None, include_arguments=True)
    with caplog.at_level(logging.WARNING, logger="shadowguard.audit"):
        assert not audit.writes
        assert audit.record_call(transfer(**SECRET), "s-quiet") == {}
    assert [r for r in caplog.records if r.name == "shadowguard.audit"] == []
    with caplog.at_level(logging.INFO, logger="shadowguard.audit"):
        assert audit.writes and audit.record_call(transfer(**SECRET), "s-loud")["session"] == "s-loud"


def test_writing_after_close_is_an_error(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.close()
    with pytest.raises(ValueError, match="closed"):
        audit.record_rollback("s", "agent")
