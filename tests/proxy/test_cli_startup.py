"""The console script mounts the benchmark's command groups only for commands that reach them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from proxy.cli import _needs_benchmark

_PROBE = """
import sys
from proxy.cli import main
sys.argv = ["shadowguard", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
prefixes = ("benchmark.", "openai")
loaded = [name for name in sys.modules if name == "benchmark" or name.startswith(prefixes)]
print("LOADED", len(loaded), file=sys.stderr)
"""


def _loaded_after(*argv: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=300, check=False
    )
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("LOADED "))
    return int(line.split()[1]), done.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], True),
        (["--help"], True),
        (["bench", "run", "--help"], True),
        (["env", "--help"], True),
        (["serve", "--config", "x.yaml"], False),
        (["check", "pack.yaml", "--domain", "retail"], False),
        (["approvals", "list"], False),
    ],
)
def test_which_command_lines_reach_the_benchmark(argv: list[str], expected: bool) -> None:
    assert _needs_benchmark(argv) is expected


def test_serve_starts_without_importing_the_benchmark() -> None:
    count, _ = _loaded_after("serve", "--help")
    assert count == 0


def test_root_help_still_lists_the_benchmark_groups() -> None:
    count, out = _loaded_after("--help")
    assert count > 0
    assert "bench" in out and "env" in out
