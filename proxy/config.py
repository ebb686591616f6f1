"""The proxy's one config file: YAML validated by pydantic-settings, overridable by environment variables.

Precedence, highest first: environment variables (``SHADOWGUARD_`` prefix, ``__`` between nesting
levels: ``SHADOWGUARD_HTTP__PORT=9000``, ``SHADOWGUARD_TELEMETRY__EXPORTER=console``; a list such as
``upstreams`` takes JSON), then the YAML file, then the embedded defaults. The defaults need no Redis
and no PostgreSQL. Relative paths in the file (policy packs, the audit log, a stdio command given as a
path) resolve against the file's folder, so a config means the same whatever the working directory.

Every key is checked; an unknown key is an error, not a silently ignored typo. A bad value raises
:class:`ConfigError` naming where it came from (file and line, or the environment variable) and the
field (``upstreams[0].command``), and nothing is loaded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from guard.limits import DEFAULT_LIMITS, ArgumentLimits
from guard.located_yaml import DuplicateKeyError, YamlSyntaxError, compose_located

ENV_PREFIX = "SHADOWGUARD_"
ENV_NESTING = "__"

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_TOOL_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"


class ConfigError(ValueError):
    """A config that cannot be loaded. ``file``, ``field`` and ``line`` say where (None when not known)."""

    def __init__(
        self, message: str, *, file: str | None = None, field: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.file = file
        self.field = field
        self.line = line


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class SqlToolConfig(_Section):
    """A tool that runs the SQL it is given: its effect is decided from that SQL (docs/proxy.md)."""

    argument: str = Field(min_length=1)
    """The argument holding the SQL statement(s)."""
    dialect: str | None = None
    """sqlglot dialect (``sqlite``, ``postgres``, ...); None: the generic one."""


class UpstreamConfig(_Section):
    """One real tool server behind the proxy."""

    name: str = Field(pattern=_NAME)
    transport: Literal["stdio", "http"]
    command: str | None = None
    """stdio: the program; a relative path with a folder part resolves against the config's folder."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """stdio: variables set for the upstream process, literal values."""
    pass_env: list[str] = Field(default_factory=list)
    """stdio: names of variables passed from the proxy's own environment (each must be set when the
    proxy starts). The process gets only these, ``env`` and the SDK's minimal set (HOME, PATH, ...)."""
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """http: the streamable-HTTP endpoint, e.g. ``http://127.0.0.1:8765/mcp``."""
    prefix: str | None = Field(default=None, pattern=_TOOL_NAME)
    """Put before each of this upstream's tool names (to keep names from two upstreams apart)."""
    transactional: bool | Literal["auto"] = "auto"
    """auto: use the transaction extension when the upstream advertises it, else the journal."""
    policy: Path | None = None
    """Policy pack YAML for this upstream's tools (docs/policies.md); None: no rules."""
    writers: int | None = Field(default=None, ge=1)
    """How many guard sessions may hold uncommitted writes on this upstream at once (1 for an upstream
    on one SQLite file: the database has one writer). Another session's first write then waits for
    a slot, up to ``writer_wait_s``, instead of colliding in the database. None: no limit."""
    writer_wait_s: float = Field(default=10.0, gt=0)
    """How long a write waits for a writer slot before it fails as retryable lock contention."""
    sql_tools: dict[str, SqlToolConfig] = Field(default_factory=dict)
    """Tools (by the upstream's own name) whose effect is decided from their SQL argument."""
    detect_sql_tools: bool = True
    """Also treat a tool whose only argument is a string named sql, query or statement as a SQL tool."""

    @field_validator("pass_env")
    @classmethod
    def _variable_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(_ENV_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return names

    @field_validator("transactional", mode="before")
    @classmethod
    def _auto_true_false(cls, value: Any) -> Any:
        if isinstance(value, bool) or value == "auto":
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError(f"must be auto, true or false, not {value!r}")

    @model_validator(mode="after")
    def _transport_fields(self) -> Self:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("a stdio upstream needs 'command'")
            if self.url is not None:
                raise ValueError("'url' is for http upstreams; a stdio upstream is started with 'command'")
        else:
            if self.url is None:
                raise ValueError("an http upstream needs 'url'")
            given = [k for k in ("command", "args", "env", "pass_env") if k in self.model_fields_set]
            if given:
                raise ValueError(f"{', '.join(map(repr, given))}: only for stdio upstreams")
        return self


class CommitToolConfig(_Section):
    """The tool the proxy adds so that an agent can commit its session."""

    name: str = Field(default="commit", pattern=_TOOL_NAME)
    enabled: bool = True


class SessionsConfig(_Section):
    idle_timeout_s: float = Field(default=900.0, gt=0)
    on_idle: Literal["rollback"] = "rollback"
    store: str = Field(default="sqlite:///shadowguard-sessions.db", pattern=r"^(sqlite|postgresql)\S*://\S*$")
    """The session ledger (proxy.ledger): a SQLAlchemy URL (``sqlite:///file.db`` relative to the
    config's folder, or ``postgresql://...``) where sessions holding uncommitted writes are noted, so
    that a ``commit`` after a crash and restart is refused as lost. One per replica."""
    lease_s: float = Field(default=300.0, gt=0)
    """A session over HTTP (where the proxy cannot see its client go) is rolled back and closed when
    none of its requests came for this long; every request of the session renews it. The stdio
    session ends with its client instead."""

    @field_validator("on_idle", mode="before")
    @classmethod
    def _never_commit_silently(cls, value: Any) -> Any:
        if value != "rollback":
            raise ValueError(
                f"{value!r} is not allowed: an idle session is rolled back, never committed silently "
                "(commit with the commit tool or the sessions API)"
            )
        return value


class HttpConfig(_Section):
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8790, ge=0, le=65535)
    """0 picks a free port."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """The largest request body ``/mcp`` accepts (HTTP 413 above it)."""


class LimitsConfig(_Section):
    """Bounds on one call's arguments, checked before anything else is done with them
    (:mod:`guard.limits`): a call over one is refused as ``invalid_arguments`` naming the limit."""

    max_argument_bytes: int = Field(default=DEFAULT_LIMITS.max_bytes, gt=0)
    """The arguments' size as compact UTF-8 JSON."""
    max_argument_keys: int = Field(default=DEFAULT_LIMITS.max_keys, gt=0)
    """Object members plus array items, over the whole arguments value."""
    max_argument_depth: int = Field(default=DEFAULT_LIMITS.max_depth, gt=0)
    """Nesting of objects and arrays; the arguments object is level 1."""

    def arguments(self) -> ArgumentLimits:
        return ArgumentLimits(
            max_bytes=self.max_argument_bytes,
            max_keys=self.max_argument_keys,
            max_depth=self.max_argument_depth,
        )


class AuditConfig(_Section):
    path: Path | None = None
    """JSON-lines file the records are appended to; None: records go to the ``shadowguard.audit`` logger."""
    include_arguments: bool = False
    """False: tool arguments are recorded as a digest only (they may hold personal data)."""


class TelemetryConfig(_Section):
    exporter: Literal["none", "console", "otlp"] = "none"
    endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """otlp: the collector's base URL (``http://collector:4318``); None: the OTEL_EXPORTER_OTLP_* defaults."""
    service_name: str = Field(default="shadowguard", min_length=1)


class ApprovalsConfig(_Section):
    """The approval queue (docs/approvals.md): where it is kept and how long a held call waits."""

    store: str = Field(
        default="sqlite:///shadowguard-approvals.db", pattern=r"^(sqlite|postgresql|redis)\S*://\S*$"
    )
    """SQLAlchemy URL (``sqlite:///file.db`` relative to the config's folder, ``postgresql://...``) or
    ``redis://host:port/db`` (several replicas share one queue)."""
    expires_after_s: float = Field(default=3600.0, gt=0)
    """A pending request not decided by then expires: the call is not done."""
    wait_s: float = Field(default=30.0, ge=0)
    """How long the agent's tools/call waits for a decision before it returns ``approval_pending``
    (0: return at once). A decision that comes later is picked up when the agent sends the call again."""
    poll_s: float = Field(default=0.25, gt=0)
    """How often a waiting call looks at the store (a decision may be taken on another replica)."""
    sweep_s: float = Field(default=30.0, gt=0)
    """How often pending requests past their expiry are marked expired and the queue is counted for the
    ``shadowguard_approvals_pending`` gauge (reads expire requests on the spot too)."""
    require_reviewers: bool = False
    """Refuse to start when some tools' calls may be held for approval and ``auth.reviewers`` has no
    approver (False: a warning at start-up, and each such call is refused at once)."""


class ReviewerConfig(_Section):
    name: str = Field(min_length=1, max_length=128)
    role: Literal["viewer", "approver"]
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """sha256 hex of the reviewer's bearer token (``shadowguard approvals token`` makes a pair)."""


class AgentConfig(_Section):
    name: str = Field(min_length=1, max_length=128)
    """The principal the agent's calls run as."""
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class OrchestratorConfig(_Section):
    """Whoever runs the agents (docs/proxy.md): may list, inspect, commit and roll back any session."""

    name: str = Field(min_length=1, max_length=128)
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class AuthConfig(_Section):
    """Bearer tokens. Agents authenticate on /mcp (and may act on their own sessions on /api/sessions);
    orchestrators on /api/sessions (any session); reviewers on /api/approvals and /review. The three
    token sets never overlap (validated): an agent credential can never approve, and a reviewer's can
    never commit."""

    agents: list[AgentConfig] = Field(default_factory=list)
    """Empty: /mcp is open (the embedded default for a local sidecar)."""
    reviewers: list[ReviewerConfig] = Field(default_factory=list)
    """Empty: the approvals API and the reviewer page refuse every request (403)."""
    orchestrators: list[OrchestratorConfig] = Field(default_factory=list)
    """With this and ``agents`` both empty, /api/sessions is open (the embedded default for a local
    sidecar); otherwise it needs an orchestrator's or an agent's token."""

    @property
    def sessions_api_open(self) -> bool:
        """True when /api/sessions takes no token (no agents and no orchestrators are configured)."""
        return not self.agents and not self.orchestrators

    @model_validator(mode="after")
    def _distinct_credentials(self) -> Self:
        lists: tuple[tuple[str, Sequence[AgentConfig | ReviewerConfig | OrchestratorConfig]], ...] = (
            ("agents", self.agents),
            ("reviewers", self.reviewers),
            ("orchestrators", self.orchestrators),
        )
        for kind, entries in lists:
            names = [e.name for e in entries]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{kind}: name {twice[0]!r} is used twice; names must be unique")
        hashes = [e.token_sha256 for _, entries in lists for e in entries]
        if len(set(hashes)) == len(hashes):
            return self
        agent = {a.token_sha256 for a in self.agents}
        reviewer = {r.token_sha256 for r in self.reviewers}
        orchestrator = {o.token_sha256 for o in self.orchestrators}
        if agent & reviewer:
            raise ValueError(
                "an agent and a reviewer share a token: agent credentials must never be able to review"
            )
        if orchestrator & reviewer:
            raise ValueError(
                "an orchestrator and a reviewer share a token: whoever commits sessions must not also "
                "decide approvals with the same credential"
            )
        if orchestrator & agent:
            raise ValueError(
                "an agent and an orchestrator share a token: an agent credential must never reach "
                "other agents' sessions"
            )
        raise ValueError(
            "a token_sha256 appears twice: every agent, reviewer and orchestrator needs its own token"
        )


class WebhookConfig(_Section):
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """POSTed a JSON notice on every new approval request; None: no webhook."""
    secret_env: str | None = None
    """Environment variable holding the HMAC-SHA256 key for the ``X-Shadowguard-Signature`` header."""
    timeout_s: float = Field(default=5.0, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=10)


class ReplicasConfig(_Section):
    """Several replicas behind one address (proxy/replicas.py, docs/deploy.md)."""

    redis: str | None = Field(default=None, pattern=r"^rediss?://\S+$")
    """Where replicas record that they are alive and which sessions each owns; None: one replica."""
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """This replica's base URL as the other replicas reach it (``http://10.0.0.7:8790``)."""
    heartbeat_s: float = Field(default=10.0, gt=0)
    """A replica not heard from for this long is dead: its sessions are reported lost (rolled back)."""

    @model_validator(mode="after")
    def _url_with_redis(self) -> Self:
        if self.redis is not None and self.url is None:
            raise ValueError("'redis' needs 'url': the address other replicas forward this one's sessions to")
        return self


class RelayConfig(_Section):
    """How the proxy relays (docs/proxy.md, "The lean relay")."""

    lean_relay: bool = True
    """A 2026-07-28 ``tools/call`` over HTTP that needs no input round, progress or log relay is
    answered without the SDK's server session (proxy/relay_lean.py); false: every request goes
    through the SDK's app."""

    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    """The event loop ``shadowguard serve`` runs on: ``uvloop`` (libuv, in C; a dependency on Linux and
    macOS) or the standard library's ``asyncio`` loop. uvloop spends less of the proxy's CPU on each
    call's loop turns, timers and socket writes (docs/proxy.md, "Performance"); ``asyncio`` where
    uvloop is not installed (a start with ``uvloop`` then stops with an error saying so)."""


class ProxyConfig(BaseSettings):
    """Everything ``shadowguard serve`` needs. Build it with :meth:`load`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTING,
        extra="forbid",
        validate_default=True,
    )

    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    commit_tool: CommitToolConfig = Field(default_factory=CommitToolConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    webhook: WebhookConfig = Field(default_factory=WebhookConfig)
    replicas: ReplicasConfig = Field(default_factory=ReplicasConfig)
    proxy: RelayConfig = Field(default_factory=RelayConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment over the file (passed as init values), nothing else (no .env lookup)."""
        return (env_settings, init_settings)

    @field_validator("upstreams")
    @classmethod
    def _unique_names(cls, upstreams: list[UpstreamConfig]) -> list[UpstreamConfig]:
        seen: set[str] = set()
        for upstream in upstreams:
            if upstream.name in seen:
                raise ValueError(f"upstream name {upstream.name!r} is used twice; names must be unique")
            seen.add(upstream.name)
        return upstreams

    @classmethod
    def load(cls, path: Path | None) -> ProxyConfig:
        """Read and validate ``path`` (None: defaults), with the environment's overrides applied."""
        where = str(path) if path is not None else None
        data: dict[str, Any] = {}
        lines: dict[tuple[Any, ...], int] = {}
        if path is not None:
            data, lines = _read_yaml(path)
        try:
            config = cls(**data)
        except ValidationError as exc:
            raise _config_error(exc, where, lines) from exc
        base = path.resolve().parent if path is not None else Path.cwd()
        return config._resolved(base)

    def _resolved(self, base: Path) -> ProxyConfig:
        """Relative paths made absolute against ``base`` (the config file's folder)."""
        upstreams = [
            u.model_copy(
                update={
                    "policy": _absolute(u.policy, base),
                    "command": _absolute_command(u.command, base),
                }
            )
            for u in self.upstreams
        ]
        audit = self.audit.model_copy(update={"path": _absolute(self.audit.path, base)})
        approvals = self.approvals.model_copy(update={"store": _absolute_sqlite(self.approvals.store, base)})
        sessions = self.sessions.model_copy(update={"store": _absolute_sqlite(self.sessions.store, base)})
        resolved = self.model_copy(
            update={"upstreams": upstreams, "audit": audit, "approvals": approvals, "sessions": sessions}
        )
        # model_fields_set keeps saying which sections the file or environment gave, as before
        resolved.__pydantic_fields_set__ = set(self.model_fields_set)
        return resolved


def _absolute(path: Path | None, base: Path) -> Path | None:
    """Lexically normalised, never resolved: a venv's ``bin/python`` is a symlink that must stay one."""
    if path is None:
        return None
    path = path.expanduser()
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


def _absolute_command(command: str | None, base: Path) -> str | None:
    """A command with a folder part is a path (as in a shell); a bare name is looked up on PATH."""
    if command is None or (os.sep not in command and (os.altsep is None or os.altsep not in command)):
        return command
    resolved = _absolute(Path(command), base)
    return str(resolved)


def _absolute_sqlite(url: str, base: Path) -> str:
    """``sqlite:///file.db`` (a file relative to the config's folder) as ``sqlite:////abs/file.db``."""
    scheme, sep, rest = url.partition(":///")
    if not sep or scheme.partition("+")[0] != "sqlite":
        return url
    path, query_sep, query = rest.partition("?")
    if not path or path.startswith(("/", ":memory:", "file:")):
        return url
    return f"{scheme}:///{_absolute(Path(path), base)}{query_sep}{query}"


# -- reading and error reporting ---------------------------------------------------------------------


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[Any, ...], int]]:
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the config: {exc.strerror}", file=where) from exc
    try:
        data, located = compose_located(text)
    except YamlSyntaxError as exc:
        message = f"{where}: line {exc.line}: invalid YAML: {exc.problem}"
        raise ConfigError(message, file=where, line=exc.line) from exc
    except DuplicateKeyError as exc:
        field = _field_name(exc.path)
        message = f"{where}: line {exc.line}: {field}: duplicate key"
        raise ConfigError(message, file=where, field=field, line=exc.line) from exc
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(
            f"{where}: line 1: the config must be a YAML mapping of sections", file=where, line=1
        )
    return data, located.lines


def _field_name(loc: Sequence[Any]) -> str:
    """``('upstreams', 0, 'command')`` -> ``upstreams[0].command``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "config"


def _env_source(loc: Sequence[Any]) -> str | None:
    """The environment variable a value at ``loc`` came from, if one is set."""
    names = {k.upper() for k in os.environ}
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            break
        parts.append(str(part).upper())
        candidate = ENV_PREFIX + ENV_NESTING.join(parts)
        if candidate in names:
            return candidate
    return None


def _config_error(
    exc: ValidationError, where: str | None, lines: Mapping[tuple[Any, ...], int]
) -> ConfigError:
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    field = _field_name(loc)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = f"{field}: {_message(first, loc)}{more}"
    env = _env_source(loc)
    if env is not None:
        return ConfigError(f"environment {env}: {message}", file=where, field=field)
    if where is None:
        return ConfigError(f"config (embedded defaults): {message}", field=field)
    line = None
    probe = loc
    while probe:
        if probe in lines:
            line = lines[probe]
            break
        probe = probe[:-1]
    at = f" line {line}:" if line is not None else ""
    return ConfigError(f"{where}:{at} {message}", file=where, field=field, line=line)


def _message(error: Any, loc: Sequence[Any]) -> str:
    if error["type"] == "extra_forbidden":
        keys = _keys_at(loc[:-1])
        expected = f"; expected one of: {', '.join(keys)}" if keys else ""
        return f"unknown key{expected}"
    return re.sub(r"^(Value|Assertion) error, ", "", str(error["msg"]))


def _keys_at(loc: Sequence[Any]) -> list[str]:
    """The keys the section at ``loc`` accepts (for "unknown key" errors)."""
    model: type[BaseModel] = ProxyConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        inner: list[Any] = [*get_args(field.annotation), field.annotation]
        target = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if target is None:
            return []
        model = target
    return list(model.model_fields)
