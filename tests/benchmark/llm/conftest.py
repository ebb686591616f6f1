"""The scripted endpoint (``shadowguard bench stub-llm``) as a subprocess, once per test session, with an
API key it requires; configs for it; and a helper that runs ``bench run`` in process."""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from typer.testing import CliRunner

from benchmark.campaign.results import DecodeResult, iter_results
from benchmark.procs import ServerProcess
from proxy.cli import _mount_benchmark, app

KEY_ENV = "SHADOWGUARD_TEST_LLM_KEY"
ANNOUNCE = "stub-llm (scripted test double): listening on"
DOMAINS = (
    "external_booking_v1",
    "sandbox_auto_insurance",
    "sandbox_consulting",
    "sandbox_external_retail",
    "sandbox_neobank_support_v1",
)


class Stub:
    def __init__(self, url: str, key: str, log: Path) -> None:
        self.url = url
        self.key = key
        self.log = log

    def outage(self, status: int | None, count: int | None = None) -> None:
        """The next ``count`` chat requests (all: None) fail with ``status`` (None: no outage)."""
        base = self.url.rsplit("/v1", 1)[0]
        response = httpx2.post(f"{base}/stub/outage", json={"status": status, "count": count}, timeout=10)
        assert response.status_code == 200, response.text

    def config(self, path: Path, **extra: Any) -> Path:
        """An --llm-config for the stub: fast retries; ``extra`` keys go in at the top level."""
        raw: dict[str, Any] = {
            "endpoint": {
                "base_url": self.url,
                "model": "stub-llm",
                "api_key_env": KEY_ENV,
                "retries": 1,
                "backoff_max_s": 0.05,
                "timeout_s": 30,
            }
        }
        raw.update(extra)
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        return path


@pytest.fixture(scope="session")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    key = "sk-test-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key  # the campaign reads it by name; the stub requires it
    log = tmp_path_factory.mktemp("stub") / "stub.log"
    shadowguard = str(Path(sys.executable).parent / "shadowguard")
    args = [shadowguard, "bench", "stub-llm", "--port", "0", "--api-key-env", KEY_ENV]
    args += [a for d in DOMAINS for a in ("--domain", d)]
    server = ServerProcess(args, log, ANNOUNCE, name="stub-llm")
    try:
        yield Stub(server.wait_url(), key, log)
    finally:
        server.stop()
        os.environ.pop(KEY_ENV, None)


def run_campaign(*args: str) -> Any:
    _mount_benchmark()
    return CliRunner().invoke(app, ["bench", "run", "--agent", "llm", *args])


def rows_of(path: Path) -> list[DecodeResult]:
    return [row for _, row in iter_results(path)]


def raw_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
