"""Task loading: the data-only export or a thinkingbox-data checkout, chosen by what ``--data`` holds."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from benchmark.envs.errors import DataError
from benchmark.tasks.checkout import iter_checkout
from benchmark.tasks.export import iter_export
from benchmark.tasks.models import AnswerKey, ExpectedHashes, Task, ToolInteraction

__all__ = [
    "AnswerKey",
    "BenchData",
    "ExpectedHashes",
    "Task",
    "ToolInteraction",
    "resolve_data",
]

ENV_VAR = "SHADOWGUARD_BENCH_DATA"
BUNDLE_ENV_VAR = "SHADOWGUARD_BENCH_BUNDLE"
DEFAULT_RELATIVE = Path("..") / "shared" / "thinkingbox-bench"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _default_bundle() -> Path:
    for base in (Path.cwd(), _PROJECT_ROOT):
        candidate = (base / DEFAULT_RELATIVE).resolve()
        if (candidate / "models.json").is_file():
            return candidate
    raise DataError(
        f"benchmark data not found: pass --data PATH or set {ENV_VAR} "
        f"(looked for {DEFAULT_RELATIVE} from the working directory and the project root)"
    )


class BenchData:
    """Where tasks come from and where the bundle JSON (models, schemas, default rows) lives.

    A checkout holds tool schemas and table models only as code, so they are read from the data-only
    bundle in both cases (``SHADOWGUARD_BENCH_BUNDLE``, else the default bundle location).
    """

    def __init__(self, tasks_root: Path, bundle: Path, kind: str) -> None:
        self.tasks_root = tasks_root
        self.bundle = bundle
        self.kind = kind

    def tasks(self, domains: Iterable[str] | None = None) -> list[Task]:
        wanted = set(domains) if domains else None
        source = (
            iter_export(self.tasks_root / "tasks.jsonl")
            if self.kind == "export"
            else iter_checkout(self.tasks_root)
        )
        return [t for t in source if wanted is None or t.domain in wanted]

    def __repr__(self) -> str:
        return f"BenchData({self.kind}: {self.tasks_root})"


def resolve_data(path: str | Path | None = None) -> BenchData:
    """``--data PATH``, else ``$SHADOWGUARD_BENCH_DATA``, else ``../shared/thinkingbox-bench``."""
    raw = path if path is not None else os.environ.get(ENV_VAR)
    root = Path(raw).expanduser().resolve() if raw else _default_bundle()
    if (root / "tasks.jsonl").is_file() and (root / "models.json").is_file():
        return BenchData(root, root, "export")
    if (root / "dataset" / "test_case").is_dir() and (root / "releases").is_dir():
        bundle_env = os.environ.get(BUNDLE_ENV_VAR)
        bundle = Path(bundle_env).expanduser().resolve() if bundle_env else _default_bundle()
        return BenchData(root, bundle, "checkout")
    raise DataError(
        f"{root}: neither a data export (tasks.jsonl + models.json) nor a thinkingbox-data checkout "
        "(dataset/test_case + releases)"
    )
