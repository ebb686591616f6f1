"""Multi-action client-access tools: VPN/client systems, background checks, NDAs, Box folders.

Clearance and NDA rows have no ``id``: they are keyed by employee email (and client) and upserted,
so a new one is appended after the existing rows, which the state hash keeps in insertion order.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from benchmark.envs.consulting.actions import compact, dispatch, free_id, given, iso, require, value
from benchmark.envs.consulting.inputs import (
    BackgroundCheckApiInput,
    BoxApiInput,
    ClientAccessApiInput,
    NdaApiInput,
)
from benchmark.envs.consulting.rows import (
    ClearanceRecord,
    Client,
    ClientSystemAccess,
    Folder,
    FolderAccessLog,
    NdaRecord,
    TrainingEnrollment,
    VpnAccess,
)
from benchmark.envs.environment import Environment, Table
from benchmark.envs.errors import ToolError
from benchmark.envs.records import R, TableRef
from benchmark.envs.tools import ToolFn

VPN: TableRef[VpnAccess] = TableRef("client_access_vpn_access")
SYSTEMS: TableRef[ClientSystemAccess] = TableRef("client_access_client_system_access")
CLEARANCES: TableRef[ClearanceRecord] = TableRef("client_access_clearance_record")
NDAS: TableRef[NdaRecord] = TableRef("client_access_nda_record")
CLIENTS: TableRef[Client] = TableRef("salesforce_crm_clients")
ENROLLMENTS: TableRef[TrainingEnrollment] = TableRef("degreed_training_enrollments")
FOLDERS: TableRef[Folder] = TableRef("box_folders")
FOLDER_LOGS: TableRef[FolderAccessLog] = TableRef("box_folder_access_logs")

# Frozen revocation time of ``revoke_vpn`` (docs/benchmark.md#frozen-clocks).
REVOKED_AT = dt.datetime(2025, 10, 1, 0, 0, 0, tzinfo=dt.UTC)

# Processing days per clearance level reported by ``get_timeline``.
CLEARANCE_DAYS = {"standard": 14, "high_security": 28}


def _save(table: Table[R], record: R, **changes: Any) -> R:
    """Store ``record`` with ``changes`` applied, validated through the row model."""
    updated = table.record({**record.model_dump(), **changes})
    table.save(updated)
    return updated


def _clearance(env: Environment, email: str) -> ClearanceRecord | None:
    """The employee's first clearance record."""
    return next((c for c in env.table(CLEARANCES).all() if c.employee_email == email), None)


def _nda(env: Environment, email: str, client_id: str) -> NdaRecord | None:
    """The first NDA record of this employee for this client."""
    return next(
        (n for n in env.table(NDAS).all() if n.employee_email == email and n.client_id == client_id),
        None,
    )


def _client(env: Environment, client_id: str) -> Client:
    client = env.table(CLIENTS).get(client_id)
    if client is None:
        raise ToolError(f"Client not found: {client_id}")
    return client


# --- client access ------------------------------------------------------------------------------


def _provision_vpn(env: Environment, args: ClientAccessApiInput) -> dict[str, Any]:
    """Grant VPN access (client-specific when a client id is given); nothing is checked."""
    require(args, "email")
    table = env.table(VPN)
    table.create(
        table.record(
            {
                "id": free_id(table, "VPN-2"),
                "employee_email": args.email,
                "client_id": args.client_id,
                "revoked_at": None,
            }
        )
    )
    return {"success": True}


def _check_vpn_access(env: Environment, args: ClientAccessApiInput) -> dict[str, Any]:
    require(args, "email")
    rows = [
        compact(
            {
                "id": v.id,
                "employee_email": v.employee_email,
                "client_id": v.client_id,
                "revoked_at": iso(v.revoked_at),
            }
        )
        for v in env.table(VPN).all()
        if v.employee_email == args.email and v.revoked_at is None
    ]
    return {"vpn_access": rows}


def _revoke_vpn(env: Environment, args: ClientAccessApiInput) -> dict[str, Any]:
    """Revoke every active VPN of the employee, or only the first one for the given client.

    Succeeds even when nothing matched.
    """
    require(args, "email")
    table = env.table(VPN)
    for vpn in table.all():
        if vpn.employee_email != args.email or vpn.revoked_at is not None:
            continue
        if args.client_id is None or vpn.client_id == args.client_id:
            _save(table, vpn, revoked_at=REVOKED_AT)
            if args.client_id is not None:
                break
    return {"success": True}


def _provision_client_system(env: Environment, args: ClientAccessApiInput) -> dict[str, Any]:
    """Grant client-system access; prerequisites (clearance, NDA, training) are not checked."""
    require(args, "email", "client_id", "system_name", "access_type")
    table = env.table(SYSTEMS)
    table.create(
        table.record(
            {
                "id": free_id(table, "CSA-2"),
                "employee_email": args.email,
                "client_id": args.client_id,
                "system_name": args.system_name,
                "access_type": value(args.access_type),
                "revoked_at": None,
            }
        )
    )
    return {"success": True}


def _check_client_requirements(env: Environment, args: ClientAccessApiInput) -> dict[str, Any]:
    require(args, "client_id")
    client = _client(env, given(args.client_id))
    return {
        "requirements": {
            "clearance_level": value(client.clearance_level),
            "requires_nda": client.requires_nda,
            "required_training_courses": list(client.required_training_courses),
        }
    }


def _get_employee_prerequisites(env: Environment, args: ClientAccessApiInput) -> dict[str, Any]:
    """Clearance, NDA and completed trainings; missing records read as not started."""
    require(args, "email", "client_id")
    clearance = _clearance(env, given(args.email))
    nda = _nda(env, given(args.email), given(args.client_id))
    completed = [
        e.course_id
        for e in env.table(ENROLLMENTS).all()
        if e.employee_email == args.email and e.completion_date is not None
    ]
    return {
        "clearance_status": "not_initiated" if clearance is None else value(clearance.status),
        "nda_status": "not_signed" if nda is None else value(nda.status),
        "completed_training_courses": completed,
    }


def client_access_api(env: Environment, args: ClientAccessApiInput) -> dict[str, Any]:
    return dispatch(
        {
            "provision_vpn": _provision_vpn,
            "check_vpn_access": _check_vpn_access,
            "revoke_vpn": _revoke_vpn,
            "provision_client_system": _provision_client_system,
            "check_client_requirements": _check_client_requirements,
            "get_employee_prerequisites": _get_employee_prerequisites,
        },
        env,
        args,
    )


# --- background checks --------------------------------------------------------------------------


def _get_status(env: Environment, args: BackgroundCheckApiInput) -> dict[str, Any]:
    """The employee's clearance; without a record, a standard one not yet initiated."""
    require(args, "email")
    clearance = _clearance(env, given(args.email))
    if clearance is None:
        return {"clearance_data": {"clearance_level": "standard", "status": "not_initiated"}}
    return {
        "clearance_data": {
            "clearance_level": value(clearance.clearance_level),
            "status": value(clearance.status),
        }
    }


def _initiate(env: Environment, args: BackgroundCheckApiInput) -> dict[str, Any]:
    """Upsert the employee's clearance as in progress at the requested level."""
    require(args, "email", "clearance_level")
    table = env.table(CLEARANCES)
    level = value(args.clearance_level)
    existing = _clearance(env, given(args.email))
    if existing is None:
        table.create(
            table.record({"employee_email": args.email, "clearance_level": level, "status": "in_progress"})
        )
    else:
        _save(table, existing, clearance_level=level, status="in_progress")
    return {"success": True}


def _get_timeline(env: Environment, args: BackgroundCheckApiInput) -> dict[str, Any]:
    require(args, "clearance_level")
    return {"estimated_days": CLEARANCE_DAYS[value(given(args.clearance_level))]}


def background_check_api(env: Environment, args: BackgroundCheckApiInput) -> dict[str, Any]:
    return dispatch(
        {"get_status": _get_status, "initiate": _initiate, "get_timeline": _get_timeline},
        env,
        args,
    )


# --- NDAs ---------------------------------------------------------------------------------------


def _check_status(env: Environment, args: NdaApiInput) -> dict[str, Any]:
    """The NDA status for (employee, client); without a record, not signed."""
    require(args, "email", "client_id")
    nda = _nda(env, given(args.email), given(args.client_id))
    status = "not_signed" if nda is None else value(nda.status)
    return {"signed": status == "signed", "nda_data": {"status": status}}


def _send_for_signature(env: Environment, args: NdaApiInput) -> dict[str, Any]:
    """Upsert the (employee, client) NDA as sent for signature, even when already signed."""
    require(args, "email", "client_id")
    table = env.table(NDAS)
    existing = _nda(env, given(args.email), given(args.client_id))
    if existing is None:
        table.create(
            table.record(
                {"employee_email": args.email, "client_id": args.client_id, "status": "sent_for_signature"}
            )
        )
    else:
        _save(table, existing, status="sent_for_signature")
    return {"success": True}


def nda_api(env: Environment, args: NdaApiInput) -> dict[str, Any]:
    return dispatch(
        {"check_status": _check_status, "send_for_signature": _send_for_signature},
        env,
        args,
    )


# --- Box ----------------------------------------------------------------------------------------


def _folder(env: Environment, folder_id: str) -> Folder:
    folder = env.table(FOLDERS).get(folder_id)
    if folder is None:
        raise ToolError(f"Folder not found: {folder_id}")
    return folder


def _get_folder_details(env: Environment, args: BoxApiInput) -> dict[str, Any]:
    require(args, "folder_id")
    folder = _folder(env, given(args.folder_id))
    return {
        "folder_data": compact(
            {
                "id": folder.id,
                "folder_name": folder.folder_name,
                "confidentiality_level": value(folder.confidentiality_level),
                "owner_email": folder.owner_email,
                "client_id": folder.client_id,
                "engagement_code": folder.engagement_code,
            }
        )
    }


def _grant_folder_access(env: Environment, args: BoxApiInput) -> dict[str, Any]:
    """Log the grant; the folder must exist, confidentiality and the employee are not checked."""
    require(args, "email", "folder_id", "permission_level")
    _folder(env, given(args.folder_id))
    table = env.table(FOLDER_LOGS)
    table.create(
        table.record(
            {
                "id": free_id(table, "FAL-2"),
                "folder_id": args.folder_id,
                "employee_email": args.email,
                "permission_level": value(args.permission_level),
            }
        )
    )
    return {"success": True}


def box_api(env: Environment, args: BoxApiInput) -> dict[str, Any]:
    return dispatch(
        {"get_folder_details": _get_folder_details, "grant_folder_access": _grant_folder_access},
        env,
        args,
    )


TOOLS: dict[str, ToolFn] = {
    "client_access_api": client_access_api,
    "background_check_api": background_check_api,
    "nda_api": nda_api,
    "box_api": box_api,
}

# Every tool here has at least one writing action.
READ_ONLY: frozenset[str] = frozenset()
