"""``shadowguard check PACK``: a valid pack's summary line, an invalid one's exit 1 naming the spot,
usage errors (the retail pack against its benchmark domain, so this needs the data bundle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmark.tasks import BenchData
from proxy.cli import _mount_benchmark, app

ROOT = Path(__file__).resolve().parents[2]
RETAIL_PACK = ROOT / "policies" / "sandbox_external_retail" / "policy.yaml"
EXAMPLE_PACK = ROOT / "policies" / "example" / "policy.yaml"
RETAIL = "sandbox_external_retail"


def _check(*args: str) -> Any:
    _mount_benchmark()
    return CliRunner().invoke(app, ["check", *args])


def test_cli_check_valid_packs(bench: BenchData) -> None:
    result = _check(str(RETAIL_PACK), "--domain", RETAIL, "--data", str(bench.bundle))
    assert result.exit_code == 0, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"{RETAIL_PACK}: ok: pack 'sandbox_external_retail' (format v2): ")
    assert f"checked against {RETAIL}" in line
    result = _check(str(EXAMPLE_PACK))
    assert result.exit_code == 0, result.output
    (line,) = result.output.strip().splitlines()
    assert "pack 'example': 3 checks (1 before_call, 1 after_call, 1 at_commit)" in line
    assert "no --domain" in line


def test_cli_check_invalid_pack_exits_1_with_the_spot(tmp_path: Path, bench: BenchData) -> None:
    text = RETAIL_PACK.read_text(encoding="utf-8")
    broken = text.replace(
        "that: o.status IN ('pending_payment'",
        "that: o.state IN ('pending_payment'",
        1,
    )
    assert broken != text
    line = broken.splitlines().index("      that: o.state IN ('pending_payment', 'processing')") + 1
    path = tmp_path / "policy.yaml"
    path.write_text(broken, encoding="utf-8")
    (tmp_path / "checks.py").write_text(
        RETAIL_PACK.with_name("checks.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    result = _check(str(path), "--domain", RETAIL, "--data", str(bench.bundle))
    assert result.exit_code == 1
    assert f"error: {path}: line {line}: rule retail.cancel_order.eligible_status: Unknown column: state" in (
        result.output
    )
    assert _check(str(path)).exit_code == 0  # without --domain the columns are not known


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["--domain", "nope"], 2, "unknown domain"),
        (["--domain", "external_booking_v1"], 1, "the pack is for domain 'sandbox_external_retail'"),
    ],
)
def test_cli_check_usage_errors(bench: BenchData, args: list[str], code: int, fragment: str) -> None:
    result = _check(str(RETAIL_PACK), *args, "--data", str(bench.bundle))
    assert result.exit_code == code and fragment in result.output


def test_cli_check_missing_pack(tmp_path: Path) -> None:
    result = _check(str(tmp_path / "absent.yaml"))
    assert result.exit_code == 1 and "cannot read" in result.output


def test_cli_check_accepts_the_pack_folder(bench: BenchData) -> None:
    result = _check(str(RETAIL_PACK.parent), "--domain", RETAIL, "--data", str(bench.bundle))
    assert result.exit_code == 0, result.output
    assert f"checked against {RETAIL}" in result.output
