"""Hand-made campaign rows for the analysis tests (no benchmark data bundle needed)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from benchmark.campaign.results import DecodeResult, TestResult, TestTags, TokenDetails, Usage

DATA = Path(__file__).parent / "data"

RowFactory = Callable[..., DecodeResult]


def _make_row(
    uid: str,
    *,
    arm: str = "off",
    agent: str = "llm:test-model",
    rep: int = 0,
    outcome: str | None = "success",
    passed: bool | None = None,
    domain: str = "retail",
    signature: str | None = None,
    guard: dict[str, Any] | None = None,
    twin_passed: bool | None = None,
    open_loop: str | None = None,
    upper_bound: bool = False,
    usage: Iterable[tuple[int, int, int]] = (),
) -> DecodeResult:
    """One row of ours. ``passed`` defaults to ``outcome == "success"``; ``outcome=None`` is a system
    error (no test result); ``usage`` is (input, cached, output) per agent call."""
    ok = outcome == "success" if passed is None else passed
    error = outcome is None
    if signature is None and not ok:
        signature = "harness_error" if error else "wrong_state_update"
    metadata: dict[str, Any] = {
        "scenario": domain,
        "agent": agent,
        "test_case_file": uid.split(":")[0],
        "test_case_name": uid.split(":")[-1],
        "repetition": rep,
        "arm": arm,
        "seed": 7,
        "outcome": outcome,
        "judge": {} if error else {"db": "pass" if ok else "fail"},
        "guard": guard,
        "twin_passed": twin_passed,
        "open_loop": open_loop,
        "faults": 0,
        "signature": signature,
        "upper_bound": upper_bound,
    }
    return DecodeResult(
        uid=uid,
        test_result=None if error else TestResult(result=ok, reward=1.0 if ok else 0.0),
        test_tags=TestTags(domain=domain),
        usage=[
            Usage(input_tokens=i, input_tokens_details=TokenDetails(cached_tokens=c), output_tokens=o)
            for i, c, o in usage
        ],
        metadata=metadata,
        is_system_error=error,
    )


@pytest.fixture
def make_row() -> RowFactory:
    return _make_row


def _write_rows(path: Path, rows: Iterable[DecodeResult]) -> Path:
    path.write_text("".join(r.line() + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def write_rows() -> Callable[[Path, Iterable[DecodeResult]], Path]:
    """Writes rows as a results JSONL file and returns its path."""
    return _write_rows


@pytest.fixture
def tb_rows_file() -> Path:
    """Three plain ``tb infer`` rows (no campaign keys under metadata)."""
    return DATA / "tb_infer_rows.jsonl"
