"""The proxy config: YAML validated field by field, environment overrides, errors that say where."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guard.policy import load_policy
from proxy.config import ConfigError, ProxyConfig

ROOT = Path(__file__).resolve().parents[2]

FULL = """\
upstreams:
  - name: accounts
    transport: stdio
    command: ../bin/accounts-server
    args: [--db, accounts.sqlite]
    env: {LOG_LEVEL: warning}
    prefix: acct_
    transactional: auto
    policy: packs/accounts.yaml
  - name: crm
    transport: http
    url: http://127.0.0.1:8765/mcp
    transactional: false
  - name: search
    transport: stdio
    command: search-server
    transactional: true
commit_tool: {name: finish, enabled: true}
sessions: {idle_timeout_s: 60, on_idle: rollback}
http: {host: 0.0.0.0, port: 9100, max_body_bytes: 1048576}
audit: {path: logs/audit.jsonl, include_arguments: true}
telemetry: {exporter: otlp, endpoint: "http://collector:4318", service_name: guard-a}
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Overrides come only from what a test sets (a machine may export SHADOWGUARD_* of its own)."""
    for name in list(os.environ):
        upper = name.upper()
        for section in ProxyConfig.model_fields:
            prefix = f"SHADOWGUARD_{section.upper()}"
            if upper == prefix or upper.startswith(prefix + "__"):
                monkeypatch.delenv(name)
                break


def write(tmp_path: Path, text: str, name: str = "shadowguard.yaml") -> Path:
    path = tmp_path / "conf" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path | None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        ProxyConfig.load(path)
    return caught.value


# -- valid ------------------------------------------------------------------------------------------------


def test_embedded_defaults_need_no_file_and_no_external_services() -> None:
    config = ProxyConfig.load(None)
    assert config.upstreams == []
    assert (config.commit_tool.name, config.commit_tool.enabled) == ("commit", True)
    assert (config.sessions.idle_timeout_s, config.sessions.on_idle) == (900.0, "rollback")
    assert (config.http.host, config.http.port, config.http.max_body_bytes) == ("127.0.0.1", 8790, 4194304)
    assert (config.audit.path, config.audit.include_arguments) == (None, False)
    assert (config.telemetry.exporter, config.telemetry.endpoint) == ("none", None)
    assert config.telemetry.service_name == "shadowguard"


def test_a_full_file_loads_and_relative_paths_resolve_against_its_folder(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    config = ProxyConfig.load(path)
    folder = path.parent.resolve()
    accounts, crm, search = config.upstreams
    assert accounts.command == str(folder.parent / "bin" / "accounts-server")
    assert accounts.args == ["--db", "accounts.sqlite"]  # arguments are the program's business
    assert accounts.env == {"LOG_LEVEL": "warning"}
    assert (accounts.prefix, accounts.transactional) == ("acct_", "auto")
    assert accounts.policy == folder / "packs" / "accounts.yaml"
    assert (crm.transport, crm.url, crm.transactional, crm.command) == (
        "http",
        "http://127.0.0.1:8765/mcp",
        False,
        None,
    )
    assert search.command == "search-server"  # a bare name is looked up on PATH
    assert search.transactional is True
    assert config.commit_tool.name == "finish"
    assert config.sessions.idle_timeout_s == 60
    assert (config.http.host, config.http.port) == ("0.0.0.0", 9100)
    assert config.audit.path == folder / "logs" / "audit.jsonl"
    assert config.audit.include_arguments is True
    assert (config.telemetry.exporter, config.telemetry.service_name) == ("otlp", "guard-a")


def test_an_empty_file_is_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "# nothing configured yet\n")
    monkeypatch.chdir(path.parent)  # without a file, relative paths (the approval store) resolve here
    assert ProxyConfig.load(path) == ProxyConfig.load(None)


def test_the_sections_given_stay_known_after_paths_are_resolved(tmp_path: Path) -> None:
    """Callers may ask which sections a file set (e.g. serve --stdio runs the HTTP side app only then)."""
    config = ProxyConfig.load(write(tmp_path, "upstreams:\n  - {name: a, transport: stdio, command: ./a}\n"))
    assert config.model_fields_set == {"upstreams"}
    assert config.upstreams[0].command == str(tmp_path / "conf" / "a")


def test_the_demo_config_loads_and_points_at_the_example_pack() -> None:
    config = ProxyConfig.load(ROOT / "proxy" / "demo" / "shadowguard.yaml")
    [upstream] = config.upstreams
    assert upstream.transport == "stdio"
    assert upstream.args[:2] == ["-m", "proxy.demo.server"]
    assert upstream.policy == ROOT / "policies" / "example" / "policy.yaml"
    assert load_policy(upstream.policy).name == "example"


# -- environment overrides --------------------------------------------------------------------------------


def test_environment_overrides_nested_fields_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWGUARD_HTTP__PORT", "9000")
    monkeypatch.setenv("SHADOWGUARD_TELEMETRY__EXPORTER", "console")
    monkeypatch.setenv("shadowguard_sessions__idle_timeout_s", "30")
    config = ProxyConfig.load(write(tmp_path, FULL))
    assert config.http.port == 9000
    assert config.http.host == "0.0.0.0"  # the rest of the section still comes from the file
    assert config.telemetry.exporter == "console"
    assert config.telemetry.service_name == "guard-a"
    assert config.sessions.idle_timeout_s == 30


def test_environment_overrides_apply_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "SHADOWGUARD_UPSTREAMS", '[{"name": "crm", "transport": "http", "url": "http://h:1/mcp"}]'
    )
    monkeypatch.setenv("SHADOWGUARD_AUDIT__INCLUDE_ARGUMENTS", "true")
    config = ProxyConfig.load(None)
    assert [u.name for u in config.upstreams] == ["crm"]
    assert config.audit.include_arguments is True


def test_unrelated_shadowguard_variables_are_not_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWGUARD_TEST_PG", "off")
    monkeypatch.setenv("SHADOWGUARD_BENCH_DATA", "/nowhere")
    monkeypatch.chdir(tmp_path)
    store = f"sqlite:///{tmp_path / 'shadowguard-approvals.db'}"
    ledger = f"sqlite:///{tmp_path / 'shadowguard-sessions.db'}"
    assert ProxyConfig.load(None) == ProxyConfig.model_validate(
        {"approvals": {"store": store}, "sessions": {"store": ledger}}
    )


def test_a_bad_environment_value_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWGUARD_HTTP__PORT", "ninety")
    error = load_error(write(tmp_path, FULL))
    assert str(error).startswith("environment SHADOWGUARD_HTTP__PORT: http.port: ")
    assert error.field == "http.port"


# -- invalid files ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "line", "needle"),
    [
        (
            "upstreams:\n  - name: a\n    transport: stdio\n",
            "upstreams[0]",
            2,
            "a stdio upstream needs 'command'",
        ),
        (
            "upstreams:\n  - name: a\n    transport: http\n    command: x\n",
            "upstreams[0]",
            2,
            "an http upstream needs 'url'",
        ),
        (
            "upstreams:\n  - name: a\n    transport: http\n    url: http://h/mcp\n    args: [x]\n",
            "upstreams[0]",
            2,
            "'args': only for stdio upstreams",
        ),
        (
            "upstreams:\n  - {name: a, transport: stdio, command: x}\n"
            "  - {name: a, transport: stdio, command: y}\n",
            "upstreams",
            1,
            "upstream name 'a' is used twice",
        ),
        (
            "upstreams:\n  - name: a\n    transport: ftp\n    command: x\n",
            "upstreams[0].transport",
            3,
            "'stdio' or 'http'",
        ),
        (
            "upstreams:\n  - name: a\n    transport: stdio\n    command: x\n    transactional: maybe\n",
            "upstreams[0].transactional",
            5,
            "must be auto, true or false",
        ),
        (
            "upstreams:\n  - name: a b\n    transport: stdio\n    command: x\n",
            "upstreams[0].name",
            2,
            "pattern",
        ),
        (
            "http:\n  host: 127.0.0.1\n  prot: 9000\n",
            "http.prot",
            3,
            "unknown key; expected one of: host, port",
        ),
        ("http:\n  port: 70000\n", "http.port", 2, "less than or equal to 65535"),
        ("sessions:\n  on_idle: commit\n", "sessions.on_idle", 2, "never committed silently"),
        ("sessions:\n  idle_timeout_s: 0\n", "sessions.idle_timeout_s", 2, "greater than 0"),
        ("telemetry:\n  exporter: jaeger\n", "telemetry.exporter", 2, "'none', 'console' or 'otlp'"),
        ("telemetry:\n  exporter: otlp\n  endpoint: collector:4318\n", "telemetry.endpoint", 3, "pattern"),
        ("audit:\n  path: a.jsonl\n  path: b.jsonl\n", "audit.path", 3, "duplicate key"),
        ("surprise: 1\n", "surprise", 1, "unknown key; expected one of: upstreams, commit_tool"),
    ],
)
def test_invalid_files_name_file_field_and_line(
    tmp_path: Path, text: str, field: str, line: int, needle: str
) -> None:
    path = write(tmp_path, text)
    error = load_error(path)
    assert (error.file, error.field, error.line) == (str(path), field, line)
    assert str(error).startswith(f"{path}: line {line}: {field}: ")
    assert needle in str(error)


def test_syntax_errors_and_non_mappings_name_the_line(tmp_path: Path) -> None:
    broken = load_error(write(tmp_path, "http:\n  port: [9000\n"))
    assert "invalid YAML" in str(broken) and broken.line is not None
    listed = load_error(write(tmp_path, "- upstreams\n", "list.yaml"))
    assert "must be a YAML mapping" in str(listed) and listed.line == 1
    numbered = load_error(write(tmp_path, "1: upstreams\n", "numbered.yaml"))
    assert "must be a YAML mapping" in str(numbered)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    error = load_error(missing)
    assert str(error).startswith(f"{missing}: cannot read the config")
    assert error.file == str(missing)
