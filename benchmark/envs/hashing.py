"""The reference's stable state, its sha256 hash and the row-level delta between two states.

Algorithm (docs/benchmark.md#grading-hash), applied to JSON-mode rows in store order:

* drop the table's unstable fields;
* sort every list whose elements are all str/int/float/bool, recursively;
* sort rows by ``str(row.get("id", ""))`` (stable), so tables without an ``id`` keep store order;
* ``sha256(json.dumps(state, sort_keys=True, separators=(",", ":")))`` with ``ensure_ascii=True``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from benchmark.envs.schema import TableSpec

StableState = dict[str, list[dict[str, Any]]]


def _sort_primitive_lists(value: Any) -> Any:
    if isinstance(value, list):
        items = [_sort_primitive_lists(v) for v in value]
        if items and all(isinstance(v, str | int | float | bool) for v in items):
            return sorted(items)
        return items
    if isinstance(value, dict):
        return {k: _sort_primitive_lists(v) for k, v in value.items()}
    return value


def stable_rows(spec: TableSpec, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    unstable = spec.unstable
    out = []
    for row in rows:
        stable = {}
        for name, value in row.items():
            if name in unstable:
                continue
            stable[name] = _sort_primitive_lists(value) if isinstance(value, list | dict) else value
        out.append(stable)
    if spec.has_id_field:
        out.sort(key=lambda r: str(r.get("id", "")))
    return out


def stable_state(
    specs: Mapping[str, TableSpec], snapshot: Mapping[str, Sequence[Mapping[str, Any]]]
) -> StableState:
    return {name: stable_rows(spec, snapshot[name]) for name, spec in specs.items()}


def state_hash(state: Mapping[str, Any]) -> str:
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _row_key(spec: TableSpec | None, row: Mapping[str, Any]) -> str:
    if spec is None:
        return str(row.get("id", ""))
    return spec.key(row)


def state_delta(
    before: Mapping[str, Sequence[Mapping[str, Any]]],
    after: Mapping[str, Sequence[Mapping[str, Any]]],
    specs: Mapping[str, TableSpec] | None = None,
) -> dict[str, dict[str, list[Any]]]:
    """Row-level difference of two stable states, in the vectors' ``state_delta`` form.

    ``{table: {"added": [row], "removed": [row], "changed": [{"key", "changes": {field: [old, new]}}]}}``;
    only changed tables appear. A key held by several rows on one side is reported as removed + added.
    """
    delta: dict[str, dict[str, list[Any]]] = {}
    for table in sorted(set(before) | set(after)):
        spec = specs.get(table) if specs else None
        old_rows = list(before.get(table, []))
        new_rows = list(after.get(table, []))
        if old_rows == new_rows:
            continue
        old_by_key: dict[str, list[Mapping[str, Any]]] = {}
        new_by_key: dict[str, list[Mapping[str, Any]]] = {}
        for r in old_rows:
            old_by_key.setdefault(_row_key(spec, r), []).append(r)
        for r in new_rows:
            new_by_key.setdefault(_row_key(spec, r), []).append(r)
        added: list[Any] = []
        removed: list[Any] = []
        changed: list[Any] = []
        for key in sorted(set(old_by_key) | set(new_by_key)):
            olds, news = old_by_key.get(key, []), new_by_key.get(key, [])
            if len(olds) == 1 and len(news) == 1:
                o, n = olds[0], news[0]
                if o != n:
                    fields = sorted(set(o) | set(n))
                    changes = {f: [o.get(f), n.get(f)] for f in fields if o.get(f) != n.get(f)}
                    changed.append({"key": key, "changes": changes})
            elif olds != news:
                removed.extend(olds)
                added.extend(news)
        entry: dict[str, list[Any]] = {}
        if added:
            entry["added"] = added
        if removed:
            entry["removed"] = removed
        if changed:
            entry["changed"] = changed
        if entry:
            delta[table] = entry
    return delta
