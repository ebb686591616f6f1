"""Errors raised by the benchmark environments.

EnvError                    base of everything below
├── DataError               the bundle (models, defaults, tasks) is malformed; names file/table/field
├── UnknownDomainError      a domain name that no environment implements
├── UnknownTableError       a table name that the domain does not have
└── ToolError               a tool refused a call; rendered to the agent exactly as the reference does
"""

from __future__ import annotations


class EnvError(Exception):
    """Base class of the environment errors."""


class DataError(EnvError):
    """Malformed benchmark data; the message names the file, task, table or field."""


class UnknownDomainError(EnvError):
    """A domain that is not implemented."""


class UnknownTableError(EnvError):
    """A table that the domain does not have (the reference says ``Unknown table``)."""


class ToolError(EnvError):
    """A tool's own refusal. The agent sees ``{"error": "Tool execution failed: <msg>", "tool": ...}``."""
