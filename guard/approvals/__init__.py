"""Human approval for irreversible changes: the model, the store protocol and its SQL/Redis stores."""

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
    CheckResult,
    arguments_digest,
    new_approval_id,
    utcnow,
)

__all__ = [
    "FINAL_STATES",
    "Approval",
    "ApprovalConflict",
    "ApprovalEvent",
    "ApprovalNotFound",
    "ApprovalQuery",
    "ApprovalRequest",
    "ApprovalState",
    "ApprovalStore",
    "ApprovalStoreError",
    "CheckResult",
    "arguments_digest",
    "new_approval_id",
    "utcnow",
]
