"""`shadowguard check PACK --test`: table-driven pack tests in tests.yaml beside the pack."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from proxy.cli import _mount_benchmark, app

ROOT = Path(__file__).resolve().parents[2]
RETAIL = ROOT / "policies" / "sandbox_external_retail"


def _check(*args: str) -> tuple[int, str]:
    _mount_benchmark()
    result = CliRunner().invoke(app, ["check", *args])
    return result.exit_code, result.output


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "pack"
    shutil.copytree(RETAIL, folder)
    return folder


def test_retail_pack_tests_pass_from_folder_or_file() -> None:
    for target in (RETAIL, RETAIL / "policy.yaml"):
        code, output = _check(str(target), "--test")
        assert code == 0, output
        assert "cases 34 passed 34 failed 0; rules covered 35/35" in output.strip().splitlines()[-1]


def test_a_removed_rule_fails_its_case(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    pack = yaml.safe_load((folder / "policy.yaml").read_text())
    pack["rules"] = [c for c in pack["rules"] if c["id"] != "retail.cancel_order.eligible_status"]
    (folder / "policy.yaml").write_text(yaml.safe_dump(pack, sort_keys=False))
    code, output = _check(str(folder), "--test")
    assert code == 1
    assert "FAIL a shipped order cannot be cancelled" in output
    assert "expected ['retail.cancel_order.eligible_status'], got allowed" in output


def test_coverage_can_be_required(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    tests = yaml.safe_load((folder / "tests.yaml").read_text())
    tests["cases"] = [c for c in tests["cases"] if c["name"] != "no ticket comments"]
    (folder / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    code, output = _check(str(folder), "--test", "--require-coverage")
    assert code == 1 and "rules no case expects (1): retail.tickets.no_comments" in output


def test_bad_tests_file_names_file_and_field(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "tests.yaml").write_text(
        "cases:\n  - name: x\n    calls:\n      - tool: cancel_everything\n        expect: []\n"
    )
    code, output = _check(str(folder), "--test")
    assert code == 1
    assert f"{folder / 'tests.yaml'}: field cases.0.calls.0.tool" in " ".join(output.split())
    (folder / "tests.yaml").write_text("cases:\n  - name: x\n    calls: []\n    expected: []\n")
    code, output = _check(str(folder), "--test")
    assert code == 1 and "field cases.0.expected: Extra inputs are not permitted" in " ".join(output.split())


def test_world_rows_lie_under_every_case_and_a_patch_row_replaces_them(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    tests = yaml.safe_load((RETAIL / "tests.yaml").read_text())
    orders = "external_retail_toolset_oms_models_orders"
    shipped = tests["cases"][0]["patch"][orders][0]
    tests["world"] = {orders: [shipped]}
    tests["cases"] = [
        {
            "name": "the world's shipped order",
            "calls": [
                {
                    "tool": "cancel_order",
                    "arguments": {"order_id": shipped["id"], "cancellation_reason": "customer_request"},
                    "expect": ["retail.cancel_order.eligible_status"],
                }
            ],
        },
        {
            "name": "the case's processing order replaces it",
            "patch": {orders: [{**shipped, "status": "processing"}]},
            "calls": [
                {
                    "tool": "cancel_order",
                    "arguments": {"order_id": shipped["id"], "cancellation_reason": "customer_request"},
                    "expect": [],
                }
            ],
        },
    ]
    (folder / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    code, output = _check(str(folder), "--test")
    assert code == 0, output
    tests["world"] = {"no_such_table": []}
    (folder / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    code, output = _check(str(folder), "--test")
    assert code == 1 and "field world: sandbox_external_retail has no table(s) no_such_table" in " ".join(
        output.split()
    )
