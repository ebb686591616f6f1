"""The container image (Dockerfile). No Docker daemon runs where the tests do, so its build steps are
checked by doing what the build stage does: the files it COPYs put in a clean folder, its install
script (docker/install.sh) run into a new virtualenv, and the result started as the image starts it
(its environment, its command, its HEALTHCHECK). The install takes a minute or two: ``slow`` marker,
run by ``make slow-check`` (not by the default ``make pytest``)."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
import yaml

from benchmark.fixtures import NOTES_SERVER
from benchmark.procs import startup_timeout_s

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[int, str, str]]:
    """(stage, instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    out: list[tuple[int, str, str]] = []
    stage = -1
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stage += 1
        out.append((stage, word.upper(), rest.strip()))
    return out


def _final(instruction: str) -> list[str]:
    last = max(s for s, _, _ in _instructions())
    return [rest for s, word, rest in _instructions() if s == last and word == instruction]


def _image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in _final("ENV"):
        for item in shlex.split(rest):
            key, _, value = item.partition("=")
            env[key] = value
    return env


def test_dockerfile_runs_as_non_root_without_dev_dependencies() -> None:
    (user,) = _final("USER")
    assert user.split(":")[0] not in ("0", "root")
    build = [rest for s, word, rest in _instructions() if s == 0 and word == "RUN"]
    assert build == ["sh docker/install.sh /opt/shadowguard /src"]
    assert "[dev]" not in DOCKERFILE.read_text(encoding="utf-8")
    assert "[dev]" not in (ROOT / "docker" / "install.sh").read_text(encoding="utf-8")
    (healthcheck,) = _final("HEALTHCHECK")
    assert "/healthz" in healthcheck
    assert _final("VOLUME") == ['["/var/lib/shadowguard"]']
    env = _image_env()
    assert env["SHADOWGUARD_CONFIG"] == "/etc/shadowguard/shadowguard.yaml"
    for store in ("SHADOWGUARD_APPROVALS__STORE", "SHADOWGUARD_SESSIONS__STORE"):
        assert env[store].startswith("sqlite:////var/lib/shadowguard/")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _build_context(dest: Path) -> Path:
    """What the build stage COPYs, copied to ``dest`` (the image's /src)."""
    dest.mkdir()
    for stage, word, rest in _instructions():
        if stage != 0 or word != "COPY":
            continue
        *sources, target = rest.split()
        for source in sources:
            origin = ROOT / source
            where = dest / target / origin.name if target.endswith("/") else dest / target
            if origin.is_dir():
                shutil.copytree(origin, where, ignore=shutil.ignore_patterns("__pycache__", "*.db"))
            else:
                where.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(origin, where)
    return dest


@pytest.mark.slow
def test_image_install_steps_in_a_clean_venv(tmp_path: Path) -> None:
    src = _build_context(tmp_path / "src")
    venv = tmp_path / "opt-shadowguard"
    ours = ("VIRTUAL_ENV", "PYTHON", "SHADOWGUARD_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    subprocess.run(
        ["sh", "docker/install.sh", str(venv), str(src)], cwd=src, env=clean, check=True, timeout=900
    )
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    for dev in ("pytest", "ruff", "mypy", "hypothesis", "playwright", "schemathesis"):
        assert f"\n{dev}==" not in f"\n{listed}", f"dev dependency {dev} is in the image"

    # the image's start: its environment, with the config and the data folder as the mounts would be
    data = tmp_path / "var-lib-shadowguard"
    data.mkdir()
    config = tmp_path / "etc-shadowguard" / "shadowguard.yaml"
    config.parent.mkdir()
    upstream = {
        "name": "notes",
        "transport": "stdio",
        "command": str(venv / "bin" / "python"),
        "args": [str(NOTES_SERVER), "--db", str(tmp_path / "notes.sqlite")],
    }
    config.write_text(yaml.safe_dump({"upstreams": [upstream]}), encoding="utf-8")
    port = _free_port()
    env = _image_env() | {
        "PATH": f"{venv / 'bin'}{os.pathsep}{clean['PATH']}",
        "SHADOWGUARD_CONFIG": str(config),
        "SHADOWGUARD_HTTP__HOST": "127.0.0.1",
        "SHADOWGUARD_HTTP__PORT": str(port),
        "SHADOWGUARD_APPROVALS__STORE": f"sqlite:///{data / 'approvals.db'}",
        "SHADOWGUARD_SESSIONS__STORE": f"sqlite:///{data / 'sessions.db'}",
    }
    (cmd,) = _final("CMD")
    argv = yaml.safe_load(cmd)
    log = tmp_path / "proxy.log"
    with log.open("w") as sink:
        proxy = subprocess.Popen(argv, cwd=data, env=env, stderr=sink)
    try:
        deadline = time.monotonic() + startup_timeout_s()
        ready = None
        while time.monotonic() < deadline and proxy.poll() is None:
            try:
                ready = httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            time.sleep(0.3)
        assert proxy.poll() is None, log.read_text()
        assert ready is not None and ready.status_code == 200, log.read_text()
        (healthcheck,) = _final("HEALTHCHECK")
        probe = healthcheck.split(" CMD ", 1)[1]
        subprocess.run(["sh", "-c", probe], env=env, check=True, timeout=30)
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)
