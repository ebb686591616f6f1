"""The endpoints of a real-LLM campaign (``--agent llm --llm-config FILE``).

Three roles call a model: ``agent`` (the agent under test), ``user`` (the simulated user) and
``judge`` (the yes/no rubric judge). Each has an OpenAI-compatible chat-completions endpoint; by
default one endpoint serves all three::

    endpoint:                       # the default of every role
      base_url: http://127.0.0.1:8000/v1
      model: my-model
      api_key_env: MY_API_KEY       # the NAME of an environment variable; never the key itself
      temperature: 0.0
      max_tokens: 4096
      timeout_s: 120
    user: {temperature: 0.3}        # a role's own fields replace the default's
    judge: {temperature: 0.0, max_tokens: 128}
    # judge: none                   # no judge: the rubric tasks are reported "rubric not graded"
    max_agent_actions: 100          # tool-call batches + visible texts per attempt (agent_limit)
    max_user_turns: 10              # simulated user replies after the query (user_limit)

The key's value is read from the environment when a client is made and kept only in that client: it
is never part of the config, the run metadata or any row.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

Role = Literal["agent", "user", "judge"]
ROLES: tuple[Role, ...] = ("agent", "user", "judge")


class LlmConfigError(ValueError):
    """A config that cannot be used; the message names the file and the field."""


class Endpoint(BaseModel):
    """One role's endpoint (all fields but ``base_url`` and ``model`` have defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(pattern=r"^https?://\S+$")
    """The API root, e.g. ``http://127.0.0.1:8000/v1`` (the client appends ``/chat/completions``)."""
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The environment variable holding the API key; None: the endpoint needs none."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=4096, ge=1)
    timeout_s: float = Field(default=120.0, gt=0)
    seed: int | None = None
    retries: int = Field(default=6, ge=0)
    """Retries of a 429, a 5xx, a timeout or a lost connection before the attempt is a system error."""
    backoff_max_s: float = Field(default=32.0, gt=0)
    """The longest wait between retries (full jitter over an exponential, as ThinkingBox's client)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra request fields the server understands (e.g. vLLM's ``top_k``)."""

    def api_key(self) -> str:
        """The key's value from the environment ("unused" when the endpoint needs none)."""
        if self.api_key_env is None:
            return "unused"
        value = os.environ.get(self.api_key_env, "")
        if not value:
            raise LlmConfigError(
                f"the environment variable {self.api_key_env} (api_key_env) is not set or is empty"
            )
        return value

    def public(self) -> dict[str, Any]:
        """What the run metadata records: everything but a secret (the key's variable name only)."""
        return self.model_dump(mode="json")


class _Partial(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None
    seed: int | None = None
    retries: int | None = None
    backoff_max_s: float | None = None
    extra_body: dict[str, Any] | None = None


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: _Partial = Field(default_factory=_Partial)
    agent: _Partial | None = None
    user: _Partial | Literal["none"] | None = None
    judge: _Partial | Literal["none"] | None = None
    max_agent_actions: int = Field(default=100, ge=1)
    max_user_turns: int = Field(default=10, ge=0)


class LlmConfig(BaseModel):
    """The resolved endpoints; ``user``/``judge`` None: that role is switched off."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: Endpoint
    user: Endpoint | None
    judge: Endpoint | None
    max_agent_actions: int = 100
    max_user_turns: int = 10

    def public(self) -> dict[str, Any]:
        return {
            "agent": self.agent.public(),
            "user": self.user.public() if self.user else None,
            "judge": self.judge.public() if self.judge else None,
            "max_agent_actions": self.max_agent_actions,
            "max_user_turns": self.max_user_turns,
        }


def _merge(path: Path, role: str, default: _Partial, own: _Partial | None) -> Endpoint:
    fields = default.model_dump(exclude_none=True) | (own.model_dump(exclude_none=True) if own else {})
    try:
        return Endpoint.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(endpoint)"
        raise LlmConfigError(f"{path}: field {role}.{where}: {first['msg']}") from None


def parse_llm_config(raw: Any, path: Path) -> LlmConfig:
    if not isinstance(raw, dict):
        raise LlmConfigError(f"{path}: must be a mapping (endpoint, agent, user, judge, ...)")
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise LlmConfigError(f"{path}: field {where}: {first['msg']}") from None
    agent = _merge(path, "agent", parsed.endpoint, parsed.agent)

    def role(name: str, own: _Partial | Literal["none"] | None) -> Endpoint | None:
        return None if own == "none" else _merge(path, name, parsed.endpoint, own)

    return LlmConfig(
        agent=agent,
        user=role("user", parsed.user),
        judge=role("judge", parsed.judge),
        max_agent_actions=parsed.max_agent_actions,
        max_user_turns=parsed.max_user_turns,
    )


def load_llm_config(path: Path | str) -> LlmConfig:
    """The config at ``path`` (YAML), validated; every problem is an error naming file and field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LlmConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise LlmConfigError(f"{path}: not YAML: {exc}") from None
    return parse_llm_config(raw, path)
