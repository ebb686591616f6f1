"""The reviewer side of human approvals: authentication, the approvals REST API and the reviewer page."""

from proxy.approvals.api import approvals_router, decide
from proxy.approvals.auth import (
    REVIEW_COOKIE,
    AgentAuth,
    AuthError,
    Reviewer,
    approver,
    authenticate_agent,
    authenticate_reviewer,
    hash_token,
    is_agent_token,
    reviewer,
)

__all__ = [
    "REVIEW_COOKIE",
    "AgentAuth",
    "AuthError",
    "Reviewer",
    "approvals_router",
    "approver",
    "authenticate_agent",
    "authenticate_reviewer",
    "decide",
    "hash_token",
    "is_agent_token",
    "reviewer",
]
