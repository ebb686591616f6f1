"""The guard core: the guarded call (shadow transaction, checks, effects, retry, approvals) on any
backend, with no knowledge of the proxy or the benchmark (tests/test_layering.py). The names below are
its public API; everything else may change without notice. ``__version__`` is the installed
distribution's (pyproject.toml is the one source)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.exports import lazy_exports

if TYPE_CHECKING:
    from guard.approvals.gate import ApprovalGate as ApprovalGate
    from guard.backend import Backend as Backend
    from guard.checks import Check as Check
    from guard.checks import CheckContext as CheckContext
    from guard.checks import PythonCheck as PythonCheck
    from guard.checks import RuleText as RuleText
    from guard.checks import SqlCheck as SqlCheck
    from guard.effects import ToolInfo as ToolInfo
    from guard.effects import classify as classify
    from guard.errors import ErrorClass as ErrorClass
    from guard.faults import FaultPlan as FaultPlan
    from guard.journal import JournalBackend as JournalBackend
    from guard.models import ChangeSet as ChangeSet
    from guard.models import CommitOutcome as CommitOutcome
    from guard.models import EffectClass as EffectClass
    from guard.models import PolicySource as PolicySource
    from guard.models import RowChange as RowChange
    from guard.models import ToolCall as ToolCall
    from guard.models import ToolOutcome as ToolOutcome
    from guard.models import Verdict as Verdict
    from guard.models import Violation as Violation
    from guard.policy import EMPTY as EMPTY
    from guard.policy import PolicyError as PolicyError
    from guard.policy import PolicyPack as PolicyPack
    from guard.policy import load_policy as load_policy
    from guard.retry import RetryPolicy as RetryPolicy
    from guard.session import Executor as Executor
    from guard.session import GuardSession as GuardSession
    from guard.session import SessionClosedError as SessionClosedError
    from guard.session import ToolResult as ToolResult
    from guard.sql_backend import SqlBackend as SqlBackend
    from guard.txext.client import RemoteBackend as RemoteBackend
    from guard.txext.participant import TransactionParticipant as TransactionParticipant

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("shadowguard")
except PackageNotFoundError:  # a source tree that was never installed: say so rather than guess
    __version__ = "0+unknown"

__all__ = [
    "EMPTY",
    "ApprovalGate",
    "Backend",
    "ChangeSet",
    "Check",
    "CheckContext",
    "CommitOutcome",
    "EffectClass",
    "ErrorClass",
    "Executor",
    "FaultPlan",
    "GuardSession",
    "JournalBackend",
    "PolicyError",
    "PolicyPack",
    "PolicySource",
    "PythonCheck",
    "RemoteBackend",
    "RetryPolicy",
    "RowChange",
    "RuleText",
    "SessionClosedError",
    "SqlBackend",
    "SqlCheck",
    "ToolCall",
    "ToolInfo",
    "ToolOutcome",
    "ToolResult",
    "TransactionParticipant",
    "Verdict",
    "Violation",
    "classify",
    "load_policy",
]

_EXPORTS: dict[str, str] = {
    "GuardSession": "guard.session",
    "ToolResult": "guard.session",
    "Executor": "guard.session",
    "SessionClosedError": "guard.session",
    "PolicyPack": "guard.policy",
    "PolicyError": "guard.policy",
    "load_policy": "guard.policy",
    "EMPTY": "guard.policy",
    "Verdict": "guard.models",
    "EffectClass": "guard.models",
    "ToolCall": "guard.models",
    "ToolOutcome": "guard.models",
    "CommitOutcome": "guard.models",
    "Violation": "guard.models",
    "ChangeSet": "guard.models",
    "RowChange": "guard.models",
    "PolicySource": "guard.models",
    "ErrorClass": "guard.errors",
    "Check": "guard.checks",
    "CheckContext": "guard.checks",
    "PythonCheck": "guard.checks",
    "RuleText": "guard.checks",
    "SqlCheck": "guard.checks",
    "Backend": "guard.backend",
    "SqlBackend": "guard.sql_backend",
    "JournalBackend": "guard.journal",
    "ToolInfo": "guard.effects",
    "classify": "guard.effects",
    "RetryPolicy": "guard.retry",
    "ApprovalGate": "guard.approvals.gate",
    "RemoteBackend": "guard.txext.client",
    "TransactionParticipant": "guard.txext.participant",
    "FaultPlan": "guard.faults",
}
"""Public name -> the module defining it. Imported on first use, so that importing one submodule
(or running the console script) does not import the whole package."""

__getattr__ = lazy_exports(__name__, _EXPORTS, __all__)
