"""search_policy: ranks the scenario's policy sections locally (no external search server)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.tools import ToolFn


def make_search_tool(scenario: str) -> ToolFn:
    def search_policy(env: Environment, args: BaseModel) -> dict[str, Any]:
        raise ToolError("search_policy: not implemented yet")

    return search_policy
