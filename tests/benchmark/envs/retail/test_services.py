"""Retail warranty, installation and returns tools on a real Environment."""

from __future__ import annotations

import json
from typing import Any

from benchmark.envs import Environment
from benchmark.tasks import Task
from tests.support.envs import call, record, records, stored

CONTRACTS = "external_retail_toolset_extend_models_warranty_contracts"
CLAIMS = "external_retail_toolset_extend_models_warranty_claims"
JOBS = "external_retail_toolset_jobber_models_installation_jobs"
RMAS = "external_retail_toolset_loop_returns_models_rma_records"


def _contract(contract_id: str, start: str, end: str, sku: str = "SKU-T") -> dict[str, Any]:
    return {
        "id": contract_id,
        "order_id": "ORD-T",
        "sku": sku,
        "customer_id": "CUS-T",
        "warranty_type": "extended_warranty",
        "start_date": start,
        "end_date": end,
        "coverage_details": "Covers defects",
    }


def _job(job_id: str, status: str, order_id: str = "ORD-J") -> dict[str, Any]:
    return {
        "id": job_id,
        "order_id": order_id,
        "customer_id": "CUS-J",
        "service_type": "tv_mounting",
        "scheduled_date": "2025-10-05T10:00:00Z",
        "technician_id": None,
        "status": status,
        "completion_date": "2025-10-05T12:00:00Z" if status == "completed" else None,
        "workmanship_warranty_end": "2025-12-05T23:59:59Z" if status == "completed" else None,
        "service_cost": 149,
    }


def _rma_args(**over: Any) -> dict[str, Any]:
    args = {
        "order_id": "ORD-R",
        "line_item_id": "LIN-R",
        "customer_id": "CUS-R",
        "return_reason": "changed_mind",
        "refund_amount": 100,
        "restocking_fee": 15,
        "return_shipping_cost": 8.99,
        "removal_fee": 0,
    }
    return {**args, **over}


def test_warranty_coverage_uses_the_frozen_now(env: Environment) -> None:
    env.apply_patch(
        {
            CONTRACTS: [
                _contract("WCT-OLD", "2020-01-01T00:00:00Z", "2025-10-01T12:59:59Z", sku="SKU-OLD"),
                _contract("WCT-NOW", "2025-10-01T13:00:00Z", "2026-10-01T00:00:00Z"),
            ]
        }
    )
    assert call(env, "check_warranty_coverage", {"order_id": "ORD-T", "sku": "SKU-T"}) == {
        "has_coverage": True,
        "contract_id": "WCT-NOW",
        "warranty_type": "extended_warranty",
        "start_date": "2025-10-01T13:00:00+00:00",
        "end_date": "2026-10-01T00:00:00+00:00",
        "coverage_details": "Covers defects",
    }
    assert call(env, "check_warranty_coverage", {"order_id": "ORD-T", "sku": "SKU-OLD"}) == {
        "has_coverage": False
    }
    assert call(env, "check_warranty_coverage", {"order_id": "ORD-T", "sku": "NOPE"}) == {
        "has_coverage": False
    }


def test_warranty_coverage_validates_input(env: Environment) -> None:
    out = call(env, "check_warranty_coverage", {"order_id": "ORD-T"})
    assert out["error"] == "Tool execution failed: Input validation failed: sku: Field required"


def test_file_warranty_claim_creates_pending_claim_and_bumps_taken_ids(env: Environment) -> None:
    contract = records(env, CONTRACTS)[0]
    count = env.table(CLAIMS).count()
    taken = f"WCL-2{count + 1:07d}"
    env.apply_patch({CLAIMS: [{**env.table(CLAIMS).all()[0].model_dump(mode="json"), "id": taken}]})
    out = call(
        env,
        "file_warranty_claim",
        {"contract_id": contract["id"], "customer_id": "CUS-ANY", "warranty_issue_type": "component_failed"},
    )
    claim_id = f"WCL-2{count + 2:07d}"
    assert out == {"claim_id": claim_id, "status": "pending", "claim_date": "2025-10-01T13:00:05+00:00"}
    row = stored(env, CLAIMS, claim_id)
    assert row["contract_id"] == contract["id"]
    assert row["customer_id"] == "CUS-ANY"
    assert row["issue_description"] == "Component failed"
    assert row["claim_date"] == "2025-10-01T13:00:05Z"
    assert row["resolution"] is None


def test_file_warranty_claim_needs_a_contract(env: Environment) -> None:
    before = env.table(CLAIMS).count()
    out = call(
        env,
        "file_warranty_claim",
        {"contract_id": "WCT-NONE", "customer_id": "C", "warranty_issue_type": "product_not_functioning"},
    )
    assert out == {
        "error": "Tool execution failed: Warranty contract not found: WCT-NONE",
        "tool": "file_warranty_claim",
    }
    assert env.table(CLAIMS).count() == before


def test_cancel_installation_ignores_status_and_order(env: Environment) -> None:
    env.apply_patch({JOBS: [_job("JOB-T", "in_progress")]})
    out = call(
        env,
        "cancel_installation",
        {"job_id": "JOB-T", "order_id": "ORD-OTHER", "cancellation_reason": "product_incompatible"},
    )
    assert out == {"job_id": "JOB-T", "status": "cancelled", "service_cost_refunded": 149.0}
    assert record(env, JOBS, "JOB-T")["status"].value == "cancelled"


def test_cancel_installation_unknown_job(env: Environment) -> None:
    out = call(
        env,
        "cancel_installation",
        {"job_id": "JOB-NONE", "order_id": "O", "cancellation_reason": "customer_wants_ship_only"},
    )
    assert out["error"] == "Tool execution failed: Installation job not found: JOB-NONE"


def test_get_installation_job_by_id_or_order(env: Environment) -> None:
    env.apply_patch({JOBS: [_job("JOB-T", "completed")]})
    expected = {
        "job_id": "JOB-T",
        "order_id": "ORD-J",
        "customer_id": "CUS-J",
        "service_type": "tv_mounting",
        "scheduled_date": "2025-10-05T10:00:00+00:00",
        "status": "completed",
        "completion_date": "2025-10-05T12:00:00+00:00",
        "service_cost": 149.0,
    }
    assert env.call_tool("get_installation_job", {"job_id": "JOB-T"}) == json.dumps(expected)
    assert call(env, "get_installation_job", {"job_id": None, "order_id": "ORD-J"}) == expected


def test_get_installation_job_errors(env: Environment) -> None:
    assert call(env, "get_installation_job", {})["error"] == (
        "Tool execution failed: Either job_id or order_id must be provided"
    )
    assert call(env, "get_installation_job", {"order_id": "ORD-NONE"})["error"] == (
        "Tool execution failed: Installation job not found: ORD-NONE"
    )


def test_reschedule_installation_reopens_completed_job_for_workmanship(env: Environment) -> None:
    env.apply_patch({JOBS: [_job("JOB-T", "completed")]})
    out = call(
        env,
        "reschedule_installation",
        {
            "job_id": "JOB-T",
            "new_scheduled_date": "2025-10-12T09:00:00.000Z",
            "reschedule_reason": "workmanship_issue",
        },
    )
    assert out == {
        "job_id": "JOB-T",
        "old_scheduled_date": "2025-10-05T10:00:00+00:00",
        "new_scheduled_date": "2025-10-12T09:00:00+00:00",
        "status": "scheduled",
    }
    row = stored(env, JOBS, "JOB-T")
    assert row["scheduled_date"] == "2025-10-12T09:00:00Z"
    assert row["status"] == "scheduled"


def test_reschedule_installation_keeps_status_and_reads_ints_as_timestamps(env: Environment) -> None:
    env.apply_patch({JOBS: [_job("JOB-T", "completed")]})
    out = call(
        env,
        "reschedule_installation",
        {"job_id": "JOB-T", "new_scheduled_date": 12345, "reschedule_reason": "customer_request"},
    )
    assert out["new_scheduled_date"] == "1970-01-01T03:25:45+00:00"
    assert out["status"] == "completed"
    assert stored(env, JOBS, "JOB-T")["scheduled_date"] == "1970-01-01T03:25:45Z"


def test_reschedule_installation_unknown_job(env: Environment) -> None:
    out = call(
        env,
        "reschedule_installation",
        {
            "job_id": "JOB-NONE",
            "new_scheduled_date": "2025-10-12T09:00:00Z",
            "reschedule_reason": "weather_delay",
        },
    )
    assert out["error"] == "Tool execution failed: Installation job not found: JOB-NONE"


def test_create_rma_stores_amounts_verbatim_with_bumped_id(env: Environment) -> None:
    count = env.table(RMAS).count()
    first = call(env, "create_rma", _rma_args(is_defective="true"))
    assert first == {
        "rma_id": f"RMA-20{count:06d}",
        "status": "approved",
        "created_date": "2025-10-01T13:00:05+00:00",
    }
    row = stored(env, RMAS, first["rma_id"])
    assert row["is_defective"] is True
    assert row["refund_amount"] == 100.0
    assert row["restocking_fee"] == 15.0
    assert row["return_shipping_cost"] == 8.99
    assert row["created_date"] == "2025-10-01T13:00:05Z"
    env.apply_patch({RMAS: [{**row, "id": f"RMA-20{count + 2:06d}"}]})
    second = call(env, "create_rma", _rma_args())
    assert second["rma_id"] == f"RMA-20{count + 3:06d}"
    assert record(env, RMAS, second["rma_id"])["is_defective"] is False


def test_create_rma_rejects_bad_reason(env: Environment) -> None:
    before = env.table(RMAS).count()
    out = call(env, "create_rma", _rma_args(return_reason="bored"))
    assert out["error"].startswith(
        "Tool execution failed: Input validation failed: return_reason: Input should be"
    )
    assert env.table(RMAS).count() == before


def test_get_rma_status_reads_back_a_created_rma(env: Environment) -> None:
    rma_id = call(env, "create_rma", _rma_args())["rma_id"]
    assert call(env, "get_rma_status", {"rma_id": rma_id}) == {
        "rma_id": rma_id,
        "order_id": "ORD-R",
        "line_item_id": "LIN-R",
        "customer_id": "CUS-R",
        "return_reason": "changed_mind",
        "status": "approved",
        "refund_amount": 100.0,
        "restocking_fee": 15.0,
        "return_shipping_cost": 8.99,
        "removal_fee": 0.0,
        "created_date": "2025-10-01T13:00:05+00:00",
    }


def test_get_rma_status_unknown(env: Environment) -> None:
    assert call(env, "get_rma_status", {"rma_id": "RMA-NONE"}) == {
        "error": "Tool execution failed: RMA not found: RMA-NONE",
        "tool": "get_rma_status",
    }


def test_golden_warranty_flow(retail_tasks: list[Task], env: Environment) -> None:
    """A task that checks coverage and then files a claim on the contract it found."""
    task = next(
        t
        for t in retail_tasks
        if [c.tool for c in t.answer.golden_tool_interactions if c.tool.endswith("warranty_claim")]
        and any(c.tool == "check_warranty_coverage" for c in t.answer.golden_tool_interactions)
    )
    env.apply_patch(task.data_patch)
    check = next(c for c in task.answer.golden_tool_interactions if c.tool == "check_warranty_coverage")
    coverage = call(env, "check_warranty_coverage", dict(check.parameters))
    claim_call = next(c for c in task.answer.golden_tool_interactions if c.tool == "file_warranty_claim")
    if coverage["has_coverage"]:
        assert coverage["contract_id"] == claim_call.parameters["contract_id"]
    count = env.table(CLAIMS).count()
    out = call(env, "file_warranty_claim", dict(claim_call.parameters))
    assert out["claim_id"] == f"WCL-2{count:07d}"
    assert env.table(CLAIMS).count() == count + 1


def test_warranty_coverage_with_naive_dates_fails_like_the_reference(env: Environment) -> None:
    env.apply_patch({CONTRACTS: [_contract("WCT-NAIVE", "2025-01-01T00:00:00", "2026-01-01T00:00:00")]})
    out = call(env, "check_warranty_coverage", {"order_id": "ORD-T", "sku": "SKU-T"})
    assert out == {
        "error": "Tool execution failed: can't compare offset-naive and offset-aware datetimes",
        "tool": "check_warranty_coverage",
    }
