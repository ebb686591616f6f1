"""Tasks from the data-only export (``tasks.jsonl`` beside ``models.json`` and friends)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from benchmark.envs.errors import DataError
from benchmark.tasks.models import AnswerKey, Task

_TOP_LEVEL = {
    "id",
    "domain",
    "scenario",
    "source_file",
    "test_name",
    "variant",
    "replaces",
    "query",
    "user_context",
    "init",
    "golden_tool_interactions",
    "rubrics_yesno",
    "checks",
    "golden_call_effects",
    "stats",
    "expected",
    "golden_delta",
}


def _field_error(path: Path, task_id: str, exc: ValidationError) -> DataError:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    return DataError(f"{path}: task {task_id}: field {loc}: {first['msg']}")


def task_from_record(record: dict[str, Any], path: Path, line: int) -> Task:
    task_id = str(record.get("id", f"<line {line}>"))
    unknown = sorted(set(record) - _TOP_LEVEL)
    if unknown:
        raise DataError(f"{path}: task {task_id}: unknown field {unknown[0]}")
    for required in ("id", "domain", "init", "golden_tool_interactions"):
        if required not in record:
            raise DataError(f"{path}: task {task_id}: field {required}: missing")
    init = record["init"]
    if not isinstance(init, dict) or not isinstance(init.get("data_patch"), dict):
        raise DataError(f"{path}: task {task_id}: field init.data_patch: must be an object of table -> rows")
    try:
        answer = AnswerKey(
            golden_tool_interactions=record["golden_tool_interactions"],
            expected=record.get("expected"),
            golden_delta=record.get("golden_delta"),
            golden_call_effects=record.get("golden_call_effects"),
        )
    except ValidationError as exc:
        raise _field_error(path, task_id, exc) from exc
    try:
        return Task(
            id=record["id"],
            domain=record["domain"],
            scenario=record.get("scenario", record["domain"]),
            source_file=record.get("source_file", ""),
            test_name=record.get("test_name", task_id.rpartition(":")[2]),
            variant=record.get("variant", "base"),
            replaces=record.get("replaces"),
            query=record.get("query"),  # type: ignore[arg-type]  # validated by Task
            user_context=record.get("user_context"),  # type: ignore[arg-type]
            data_patch=init["data_patch"],
            rubrics_yesno=record.get("rubrics_yesno"),
            checks=record.get("checks", ["db_hash"]),
            answer=answer,
        )
    except ValidationError as exc:
        raise _field_error(path, task_id, exc) from exc


def iter_export(path: Path) -> Iterator[Task]:
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {line_no}: invalid JSON: {exc.msg}") from exc
            if not isinstance(record, dict):
                raise DataError(f"{path}: line {line_no}: a task must be a JSON object")
            yield task_from_record(record, path, line_no)
