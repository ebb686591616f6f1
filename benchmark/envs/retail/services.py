"""Warranty (extend), installation (jobber) and returns (loop_returns) tools."""

from __future__ import annotations

import datetime as dt
from typing import Any

from benchmark.envs.environment import Environment, Table
from benchmark.envs.errors import ToolError
from benchmark.envs.records import R, TableRef
from benchmark.envs.retail.inputs import (
    CancelInstallationInput,
    CheckWarrantyCoverageInput,
    CreateRmaInput,
    FileWarrantyClaimInput,
    GetInstallationJobInput,
    GetRmaStatusInput,
    RescheduleInstallationInput,
)
from benchmark.envs.retail.payments import WRITE_NOW
from benchmark.envs.retail.rows import InstallationJob, RMARecord, WarrantyClaim, WarrantyContract
from benchmark.envs.tools import ToolFn

CONTRACTS: TableRef[WarrantyContract] = TableRef("external_retail_toolset_extend_models_warranty_contracts")
CLAIMS: TableRef[WarrantyClaim] = TableRef("external_retail_toolset_extend_models_warranty_claims")
JOBS: TableRef[InstallationJob] = TableRef("external_retail_toolset_jobber_models_installation_jobs")
RMAS: TableRef[RMARecord] = TableRef("external_retail_toolset_loop_returns_models_rma_records")

# The reference reads the wall clock here; the vectors freeze it at the agent-facing "now" (vectors §7).
COVERAGE_NOW = dt.datetime(2025, 10, 1, 13, 0, 0, tzinfo=dt.UTC)

ISSUE_DESCRIPTIONS = {
    "product_not_functioning": "Product not functioning properly",
    "component_failed": "Component failed",
    "performance_degradation": "Performance degradation",
    "accidental_damage": "Accidental damage",
}


def _free_id(table: Table[R], template: str) -> str:
    """``template`` formatted with the row count, bumped until no row has that id."""
    n = table.count()
    while table.exists(template.format(n)):
        n += 1
    return template.format(n)


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def check_warranty_coverage(env: Environment, args: CheckWarrantyCoverageInput) -> dict[str, Any]:
    """The first contract for (order, sku) in force at the frozen "now".

    A naive contract date fails the comparison with an aware "now" in the reference too; its
    TypeError reaches the agent as the tool's error message.
    """
    for contract in env.table(CONTRACTS).where(order_id=args.order_id, sku=args.sku):
        try:
            in_force = contract.start_date <= COVERAGE_NOW <= contract.end_date
        except TypeError as exc:
            raise ToolError(str(exc)) from exc
        if in_force:
            return {
                "has_coverage": True,
                "contract_id": contract.id,
                "warranty_type": contract.warranty_type.value,
                "start_date": contract.start_date.isoformat(),
                "end_date": contract.end_date.isoformat(),
                "coverage_details": contract.coverage_details,
            }
    return {"has_coverage": False}


def file_warranty_claim(env: Environment, args: FileWarrantyClaimInput) -> dict[str, Any]:
    """File a pending claim on an existing contract; eligibility is not checked."""
    if not env.table(CONTRACTS).exists(args.contract_id):
        raise ToolError(f"Warranty contract not found: {args.contract_id}")
    table = env.table(CLAIMS)
    claim = table.create(
        table.record(
            {
                "id": _free_id(table, "WCL-2{:07d}"),
                "contract_id": args.contract_id,
                "customer_id": args.customer_id,
                "claim_date": WRITE_NOW,
                "issue_description": ISSUE_DESCRIPTIONS[args.warranty_issue_type.value],
                "status": "pending",
            }
        )
    )
    return {"claim_id": claim.id, "status": claim.status.value, "claim_date": claim.claim_date.isoformat()}


def _job(env: Environment, job_id: str) -> InstallationJob:
    job = env.table(JOBS).get(job_id)
    if job is None:
        raise ToolError(f"Installation job not found: {job_id}")
    return job


def _update(env: Environment, job: InstallationJob, **changes: Any) -> InstallationJob:
    """Save ``job`` with ``changes`` applied, validated through the row model."""
    table = env.table(JOBS)
    updated = table.record({**job.model_dump(), **changes})
    table.save(updated)
    return updated


def cancel_installation(env: Environment, args: CancelInstallationInput) -> dict[str, Any]:
    """Cancel the job whatever its status; the order id is not checked and no refund row is written."""
    job = _update(env, _job(env, args.job_id), status="cancelled")
    return {"job_id": job.id, "status": job.status.value, "service_cost_refunded": job.service_cost}


def get_installation_job(env: Environment, args: GetInstallationJobInput) -> dict[str, Any]:
    """Look a job up by id, else by order (first match)."""
    table = env.table(JOBS)
    if args.job_id:
        job = table.get(args.job_id)
        wanted = args.job_id
    elif args.order_id:
        matches = table.where(order_id=args.order_id)
        job = matches[0] if matches else None
        wanted = args.order_id
    else:
        raise ToolError("Either job_id or order_id must be provided")
    if job is None:
        raise ToolError(f"Installation job not found: {wanted}")
    return {
        "job_id": job.id,
        "order_id": job.order_id,
        "customer_id": job.customer_id,
        "service_type": job.service_type.value,
        "scheduled_date": job.scheduled_date.isoformat(),
        "technician_id": job.technician_id,
        "status": job.status.value,
        "completion_date": _iso(job.completion_date),
        "service_cost": job.service_cost,
    }


def reschedule_installation(env: Environment, args: RescheduleInstallationInput) -> dict[str, Any]:
    """Move the appointment; a workmanship redo reopens a completed job."""
    job = _job(env, args.job_id)
    changes: dict[str, Any] = {"scheduled_date": args.new_scheduled_date}
    if args.reschedule_reason.value == "workmanship_issue" and job.status.value == "completed":
        changes["status"] = "scheduled"
    old_date = job.scheduled_date
    job = _update(env, job, **changes)
    return {
        "job_id": job.id,
        "old_scheduled_date": old_date.isoformat(),
        "new_scheduled_date": args.new_scheduled_date.isoformat(),
        "status": job.status.value,
    }


def create_rma(env: Environment, args: CreateRmaInput) -> dict[str, Any]:
    """Open an approved RMA storing the caller's amounts verbatim; ids are not checked."""
    table = env.table(RMAS)
    rma = table.create(
        table.record(
            {
                "id": _free_id(table, "RMA-20{:06d}"),
                "order_id": args.order_id,
                "line_item_id": args.line_item_id,
                "customer_id": args.customer_id,
                "return_reason": args.return_reason.value,
                "is_defective": args.is_defective,
                "status": "approved",
                "created_date": WRITE_NOW,
                "refund_amount": args.refund_amount,
                "restocking_fee": args.restocking_fee,
                "return_shipping_cost": args.return_shipping_cost,
                "removal_fee": args.removal_fee,
            }
        )
    )
    return {"rma_id": rma.id, "status": rma.status.value, "created_date": rma.created_date.isoformat()}


def get_rma_status(env: Environment, args: GetRmaStatusInput) -> dict[str, Any]:
    rma = env.table(RMAS).get(args.rma_id)
    if rma is None:
        raise ToolError(f"RMA not found: {args.rma_id}")
    return {
        "rma_id": rma.id,
        "order_id": rma.order_id,
        "line_item_id": rma.line_item_id,
        "customer_id": rma.customer_id,
        "return_reason": rma.return_reason.value,
        "status": rma.status.value,
        "refund_amount": rma.refund_amount,
        "restocking_fee": rma.restocking_fee,
        "return_shipping_cost": rma.return_shipping_cost,
        "removal_fee": rma.removal_fee,
        "created_date": rma.created_date.isoformat(),
    }


TOOLS: dict[str, ToolFn] = {
    "check_warranty_coverage": check_warranty_coverage,
    "file_warranty_claim": file_warranty_claim,
    "cancel_installation": cancel_installation,
    "get_installation_job": get_installation_job,
    "reschedule_installation": reschedule_installation,
    "create_rma": create_rma,
    "get_rma_status": get_rma_status,
}

READ_ONLY: frozenset[str] = frozenset({"check_warranty_coverage", "get_installation_job", "get_rma_status"})
