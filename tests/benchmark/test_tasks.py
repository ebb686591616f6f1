"""Task loading from the data export and from a thinkingbox-data checkout, and malformed input."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmark.envs.errors import DataError
from benchmark.tasks import BenchData, resolve_data
from benchmark.tasks.checkout import TEST_LIST


def test_export_has_the_canonical_counts(bench: BenchData) -> None:
    tasks = bench.tasks()
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.domain] = counts.get(t.domain, 0) + 1
    assert len(tasks) == 507
    assert counts == {
        "sandbox_external_retail": 98,
        "external_booking_v1": 104,
        "sandbox_auto_insurance": 100,
        "sandbox_neobank_support_v1": 104,
        "sandbox_consulting": 101,
    }
    rubric = [t for t in tasks if t.variant == "rubrics_yesno"]
    assert len(rubric) == 30 and all(t.rubrics_yesno for t in rubric)
    assert all(t.answer.expected is not None for t in tasks)


def _write_checkout(root: Path, records: list[dict[str, Any]]) -> None:
    by_file: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_file.setdefault(r["source_file"], []).append(r)
    for source, recs in by_file.items():
        scenario = recs[0]["scenario"]
        parts = [f'"""!\nscenario: {scenario}\n"""\n']
        for r in recs:
            server: dict[str, Any] = {
                "data_patch": r["init"]["data_patch"],
                "golden_test_case": {"tool_interactions": r["golden_tool_interactions"]},
            }
            if r.get("rubrics_yesno"):
                server["rubrics_yesno"] = r["rubrics_yesno"]
            doc = {"query": r["query"], "user_context": r["user_context"], "init": {scenario: server}}
            body = textwrap.indent(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), "    ")
            parts.append(f'\ndef {r["test_name"]}(x):\n    r"""!\n{body}    """\n    validate_database(x)\n')
        path = root / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(parts), encoding="utf-8")
    (root / TEST_LIST).parent.mkdir(parents=True, exist_ok=True)
    (root / TEST_LIST).write_text(yaml.safe_dump([r["id"] for r in records]), encoding="utf-8")


@pytest.fixture(scope="module")
def sample_records(bench: BenchData) -> list[dict[str, Any]]:
    wanted = {"sandbox_external_retail": 2, "external_booking_v1": 1}
    out = []
    with (bench.bundle / "tasks.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["domain"] == "external_booking_v1" and r["variant"] != "rubrics_yesno":
                continue
            if wanted.get(r["domain"], 0) > 0:
                wanted[r["domain"]] -= 1
                out.append(r)
    return out


def test_checkout_matches_export(
    tmp_path: Path, bench: BenchData, sample_records: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_checkout(tmp_path, sample_records)
    monkeypatch.setenv("SHADOWGUARD_BENCH_BUNDLE", str(bench.bundle))
    data = resolve_data(tmp_path)
    assert data.kind == "checkout"
    loaded = {t.id: t for t in data.tasks()}
    export = {t.id: t for t in bench.tasks() if t.id in loaded}
    assert set(loaded) == {r["id"] for r in sample_records}
    for task_id, task in loaded.items():
        ref = export[task_id]
        assert task.data_patch == ref.data_patch
        assert task.query == ref.query and task.user_context == ref.user_context
        assert task.answer.golden_tool_interactions == ref.answer.golden_tool_interactions
        assert task.variant == ref.variant and task.rubrics_yesno == ref.rubrics_yesno
        assert task.replaces == ref.replaces
        assert task.answer.expected is None  # a checkout carries no reference hashes


def test_checkout_is_parsed_not_executed(
    tmp_path: Path, sample_records: list[dict[str, Any]], bench: BenchData, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_checkout(tmp_path, sample_records[:1])
    path = tmp_path / sample_records[0]["source_file"]
    marker = tmp_path / "executed"
    path.write_text(path.read_text() + f"\nopen({str(marker)!r}, 'w').write('x')\n")
    monkeypatch.setenv("SHADOWGUARD_BENCH_BUNDLE", str(bench.bundle))
    assert len(resolve_data(tmp_path).tasks()) == 1
    assert not marker.exists()


def test_env_var_selects_data(monkeypatch: pytest.MonkeyPatch, bench: BenchData) -> None:
    monkeypatch.setenv("SHADOWGUARD_BENCH_DATA", str(bench.bundle))
    assert resolve_data().tasks_root == bench.bundle


def test_unrecognised_data_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="neither a data export"):
        resolve_data(tmp_path)


def _first_line(bench: BenchData) -> str:
    with (bench.bundle / "tasks.jsonl").open(encoding="utf-8") as fh:
        return fh.readline().strip()


def _export_copy(tmp_path: Path, bench: BenchData, lines: list[str]) -> Path:
    for name in ("models.json", "tool_schemas.json"):
        (tmp_path / name).symlink_to(bench.bundle / name)
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda r: r.pop("domain"),
            r"task sandbox_external_retail_group1.py:test_case_ST002_001: field domain",
        ),
        (lambda r: r["init"].update(data_patch=[]), r"field init.data_patch"),
        (lambda r: r.update(query=5), r"field query: Input should be a valid string"),
        (
            lambda r: r["golden_tool_interactions"].append({"tool": "x", "parameters": {}, "bogus": 1}),
            r"field golden_tool_interactions.2.bogus",
        ),
        (lambda r: r.update(surprise=1), r"unknown field surprise"),
    ],
)
def test_malformed_export_names_file_task_and_field(
    tmp_path: Path, bench: BenchData, mutate: Callable[[dict[str, Any]], object], message: str
) -> None:
    first = json.loads(_first_line(bench))
    mutate(first)
    data = resolve_data(_export_copy(tmp_path, bench, [json.dumps(first)]))
    with pytest.raises(DataError, match=message) as info:
        data.tasks()
    assert str(tmp_path / "tasks.jsonl") in str(info.value)


def test_invalid_json_line_is_reported_with_its_line(tmp_path: Path, bench: BenchData) -> None:
    first = _first_line(bench)
    data = resolve_data(_export_copy(tmp_path, bench, [first, "{not json"]))
    with pytest.raises(DataError, match=r"tasks.jsonl: line 2: invalid JSON"):
        data.tasks()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("def broken(:\n", "not valid Python"),
        ('def test_a(x):\n    """!\n    query: q\n    """\n', "missing module docstring"),
        (
            '"""!\nscenario: s\n"""\ndef test_a(x):\n    """!\n    query: [unclosed\n    """\n',
            "invalid docstring YAML",
        ),
        (
            '"""!\nscenario: s\n"""\ndef test_a(x):\n    """!\n'
            '    query: q\n    user_context: c\n    init: {}\n    """\n',
            r"field init.s: missing",
        ),
        ('"""!\nscenario: s\n"""\ndef other(x):\n    pass\n', "no test function test_a"),
    ],
)
def test_malformed_checkout(
    tmp_path: Path, content: str, message: str, bench: BenchData, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dataset" / "test_case" / "s" / "s_group1.py"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    (tmp_path / TEST_LIST).parent.mkdir(parents=True)
    (tmp_path / TEST_LIST).write_text("- s_group1.py:test_a\n")
    monkeypatch.setenv("SHADOWGUARD_BENCH_BUNDLE", str(bench.bundle))
    with pytest.raises(DataError, match=message):
        resolve_data(tmp_path).tasks()
