"""Human approval for irreversible changes: the model, the store protocol and its SQL/Redis stores."""

from guard.approvals.gate import ApprovalGate, Resolution, policy_version, same_changes
from guard.approvals.models import (
    FINAL_STATES,
    Approval,
    ApprovalConflict,
    ApprovalEvent,
    ApprovalNotFound,
    ApprovalQuery,
    ApprovalRequest,
    ApprovalState,
    ApprovalStore,
    ApprovalStoreError,
    ApprovalStoreUnavailable,
    CheckResult,
    arguments_digest,
    new_approval_id,
    utcnow,
)
from guard.approvals.redis_store import RedisApprovalStore
from guard.approvals.sql import SqlApprovalStore
from guard.approvals.stores import open_approval_store

__all__ = [
    "FINAL_STATES",
    "Approval",
    "ApprovalConflict",
    "ApprovalEvent",
    "ApprovalGate",
    "ApprovalNotFound",
    "ApprovalQuery",
    "ApprovalRequest",
    "ApprovalState",
    "ApprovalStore",
    "ApprovalStoreError",
    "ApprovalStoreUnavailable",
    "CheckResult",
    "RedisApprovalStore",
    "Resolution",
    "SqlApprovalStore",
    "arguments_digest",
    "new_approval_id",
    "open_approval_store",
    "policy_version",
    "same_changes",
    "utcnow",
]
