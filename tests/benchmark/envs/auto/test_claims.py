"""Auto-insurance claims tools on a real Environment (SQLite in memory).

Most cases run on the domain defaults (5 closed claims on 5 policies, POL-0012345678 with vehicle
VEH-00012345 and driver DRV-00012345); the months_back quirk also runs on a task whose patch holds a
claim created with a time part.
"""

from __future__ import annotations

import hashlib
from typing import Any

from benchmark.envs import Database, Domain, Environment
from benchmark.envs.auto import claims
from benchmark.tasks import BenchData, Task
from tests.support.envs import call, failed, failure_text, record, records, stored

DOMAIN = "sandbox_auto_insurance"
CLAIMS = claims.CLAIMS
POLICY = "POL-0012345678"
VEHICLE = "VEH-00012345"
DRIVER = "DRV-00012345"
FNOL = {
    "policy_id": POLICY,
    "vehicle_id": VEHICLE,
    "driver_id": DRIVER,
    "date_of_loss": "2025-09-30",
    "loss_location": "Oakland, CA",
    "claim_type": "Collision \u2013 Multi-Vehicle",
    "severity": "Major",
}


def open_major_claim(claim_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": claim_id,
        "policy_id": POLICY,
        "vehicle_id": VEHICLE,
        "driver_id": DRIVER,
        "date_of_loss": "2025-09-01",
        "loss_location": "Fresno, CA",
        "claim_type": "Comprehensive \u2013 Theft",
        "claim_stage": "Open \u2013 Investigation",
        "severity": "Major",
        "created_date": "2025-09-02",
        **fields,
    }


def test_read_only_lists_exactly_the_tools_that_never_write(domain: Domain) -> None:
    assert set(claims.TOOLS) - claims.READ_ONLY == {"claims_create_fnol"}
    for name in claims.TOOLS:
        assert domain.tools[name].writes == (name not in claims.READ_ONLY)


def test_create_fnol_makes_deterministic_open_claim(env: Environment) -> None:
    seed = f"{POLICY}_2025-09-30_{VEHICLE}"
    expected_id = "CLM-2" + hashlib.sha256(seed.encode()).hexdigest()[:9].upper()
    text = env.call_tool("claims_create_fnol", {**FNOL, "has_bodily_injury": None})
    assert text == f'{{"claim_id": "{expected_id}", "claim_stage": "Open \\u2013 Initial Review"}}'
    row = stored(env, CLAIMS, expected_id)
    assert row["created_date"] == row["date_of_loss"] == "2025-09-30"
    assert (row["siu_flag"], row["has_bodily_injury"], row["police_report_required"]) == (
        "None",
        False,
        False,
    )
    assert row["vehicle_vin"] is None and row["driver_id"] == DRIVER


def test_create_fnol_is_idempotent_on_policy_date_and_vehicle(env: Environment) -> None:
    first = call(env, "claims_create_fnol", FNOL)
    count = env.table(CLAIMS).count()
    again = call(env, "claims_create_fnol", {**FNOL, "claim_type": "Liability Only", "severity": "Minor"})
    assert again == first
    assert env.table(CLAIMS).count() == count
    assert record(env, CLAIMS, first["claim_id"])["severity"].value == "Major"


def test_create_fnol_without_vehicle_uses_vin_then_placeholder(env: Environment) -> None:
    by_vin = call(env, "claims_create_fnol", {**FNOL, "vehicle_id": None, "vehicle_vin": "VIN123"})
    bare = call(env, "claims_create_fnol", {**FNOL, "vehicle_id": None})
    assert by_vin["claim_id"] == claims.claim_id_for(POLICY, "2025-09-30", "VIN123")
    assert bare["claim_id"] == claims.claim_id_for(POLICY, "2025-09-30", None)
    assert (
        bare["claim_id"]
        == "CLM-2" + hashlib.sha256(f"{POLICY}_2025-09-30_no_vehicle".encode()).hexdigest()[:9].upper()
    )


def test_create_fnol_unknown_policy_writes_nothing(env: Environment) -> None:
    before = env.state_hash()
    assert (
        failed(env, "claims_create_fnol", {**FNOL, "policy_id": "POL-NOPE"}) == "Policy 'POL-NOPE' not found."
    )
    assert env.state_hash() == before


def test_create_fnol_rejects_unknown_severity(env: Environment) -> None:
    assert (
        failed(env, "claims_create_fnol", {**FNOL, "severity": "Huge"})
        == "Input validation failed: severity: Input should be 'Minor', 'Moderate' or 'Major'"
    )


def test_check_open_major_claims_counts_only_open_major(env: Environment) -> None:
    assert call(env, "claims_check_open_major_claims", {"policy_id": POLICY}) == {
        "has_major_claim": False,
        "major_claim_count": 0,
    }
    env.apply_patch(
        {
            CLAIMS: [
                open_major_claim("CLM-A"),
                open_major_claim("CLM-B"),
                open_major_claim("CLM-C", severity="Moderate"),
                open_major_claim("CLM-D", claim_stage="Closed \u2013 Paid"),
            ]
        }
    )
    assert call(env, "claims_check_open_major_claims", {"policy_id": POLICY}) == {
        "has_major_claim": True,
        "major_claim_count": 2,
    }


def test_check_open_major_claims_unknown_policy(env: Environment) -> None:
    assert (
        failed(env, "claims_check_open_major_claims", {"policy_id": "POL-NOPE"})
        == "Policy 'POL-NOPE' not found."
    )


def test_get_policy_claims_lists_claims_of_the_policy(env: Environment) -> None:
    text = env.call_tool("claims_get_policy_claims", {"policy_id": POLICY})
    assert text == (
        '{"claims": [{"claim_id": "CLM-1000000001", "date_of_loss": "2023-05-20", '
        '"claim_type": "Collision \\u2013 Single Vehicle", "claim_stage": "Closed \\u2013 Paid", '
        '"severity": "Minor", "created_date": "2023-05-21"}], "total_count": 1}'
    )


def test_get_policy_claims_months_back_counts_from_newest_claim_anywhere(env: Environment) -> None:
    # The newest default claim (any policy) was created 2024-02-10: 6 months back is 2023-08-14.
    assert call(env, "claims_get_policy_claims", {"policy_id": POLICY, "months_back": 6})["total_count"] == 0
    assert call(env, "claims_get_policy_claims", {"policy_id": POLICY, "months_back": 9})["total_count"] == 1
    assert call(env, "claims_get_policy_claims", {"policy_id": POLICY, "months_back": 0})["total_count"] == 1


def test_get_policy_claims_unknown_policy(env: Environment) -> None:
    assert (
        failed(env, "claims_get_policy_claims", {"policy_id": "POL-NOPE", "months_back": 6})
        == "Policy 'POL-NOPE' not found."
    )


def _task_with_timestamped_claim(tasks: list[Task]) -> tuple[Task, dict[str, Any]]:
    for task in tasks:
        for row in task.data_patch.get(CLAIMS, []):
            if "T" in row.get("created_date", ""):
                return task, row
    raise AssertionError("no task patches a claim whose created_date has a time part")


def test_get_policy_claims_months_back_fails_on_timestamped_created_date(
    bench: BenchData, domain: Domain, sqlite_db: Database
) -> None:
    task, claim = _task_with_timestamped_claim(bench.tasks([DOMAIN]))
    with Environment(domain, sqlite_db) as env:
        env.apply_patch(task.data_patch)
        plain = call(env, "claims_get_policy_claims", {"policy_id": claim["policy_id"]})
        assert claim["id"] in [c["claim_id"] for c in plain["claims"]]
        newest = max(c["created_date"] for c in records(env, CLAIMS))
        text = env.call_tool("claims_get_policy_claims", {"policy_id": claim["policy_id"], "months_back": 6})
    assert text == failure_text("claims_get_policy_claims", f"unconverted data remains: {newest[10:]}")


def test_get_vehicle_claims_filters_open_only(env: Environment) -> None:
    env.apply_patch({CLAIMS: [open_major_claim("CLM-OPEN")]})
    every = call(env, "claims_get_vehicle_claims", {"vehicle_id": VEHICLE})
    assert [c["claim_id"] for c in every["claims"]] == ["CLM-1000000001", "CLM-OPEN"]
    assert every["has_open_claims"] is True
    opened = call(env, "claims_get_vehicle_claims", {"vehicle_id": VEHICLE, "open_only": True})
    assert [c["claim_id"] for c in opened["claims"]] == ["CLM-OPEN"]


def test_get_vehicle_claims_unknown_vehicle(env: Environment) -> None:
    assert (
        failed(env, "claims_get_vehicle_claims", {"vehicle_id": "VEH-NOPE"})
        == "Vehicle 'VEH-NOPE' not found."
    )


def test_get_driver_claims_closed_only_history(env: Environment) -> None:
    out = call(env, "claims_get_driver_claims", {"driver_id": DRIVER})
    assert [c["claim_id"] for c in out["claims"]] == ["CLM-1000000001"]
    assert out["has_open_claims"] is False
    assert call(env, "claims_get_driver_claims", {"driver_id": DRIVER, "open_only": True}) == {
        "claims": [],
        "has_open_claims": False,
    }


def test_get_driver_claims_unknown_driver(env: Environment) -> None:
    assert (
        failed(env, "claims_get_driver_claims", {"driver_id": "DRV-NOPE"}) == "Driver 'DRV-NOPE' not found."
    )
