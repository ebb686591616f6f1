"""The fault corpus: seeded mutations of the golden trajectories, and equivalent variants of them.

Open-loop lift (docs/architecture.md#three-ways-to-measure) needs trajectories that fail for a known
reason. Each golden trajectory is mutated once per family (where the family applies to it), seeded from
(seed, uid, family):

==================  =============================================================================
wrong_value         a write's enum argument set to another allowed value, a number changed, a
                    date moved by a day
wrong_record        a write's id argument pointed at another existing record of the same table
extra_write         a write repeated on another existing record of the same table
duplicate_write     a write sent twice in a row
missing_write       a write left out
premature_stop      the trajectory cut after a write, before its last write
bad_argument        a write's argument given the wrong type or format
wrong_order         two adjacent writes, the second after the first in the golden, swapped
==================  =============================================================================

A mutation is kept only if its unguarded replay fails the judge (a mutation that still reaches the
golden state is no fault). Variants — extra reads (each read repeated) and adjacent independent calls
swapped — are kept only if their unguarded replay passes: they are correct work the guard must let
through. Each line is a replayable trajectory in the ``--agent replay`` format with its ``kind``
(fault|variant), ``family`` and the golden call it changed.

This module reads the answer key (golden calls, hashes): it lives on the benchmark side of the trust
boundary with the judge; no rule of any pack may be derived from it.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmark.campaign.results import ResultsError, domain_of, iter_results, json_object, read_text
from benchmark.envs import Database, Domain, Environment
from benchmark.tasks import Task

FAMILIES = (
    "wrong_value",
    "wrong_record",
    "extra_write",
    "duplicate_write",
    "missing_write",
    "premature_stop",
    "bad_argument",
    "wrong_order",
)
VARIANTS = ("extra_reads", "reordered_reads")

Calls = list[dict[str, Any]]


@dataclass(frozen=True)
class Entry:
    """One corpus line."""

    uid: str
    kind: str
    family: str
    golden_call: int | None
    note: str
    calls: Calls

    def line(self) -> str:
        return json.dumps(
            {
                "uid": self.uid,
                "kind": self.kind,
                "family": self.family,
                "golden_call": self.golden_call,
                "note": self.note,
                "calls": self.calls,
            },
            sort_keys=False,
        )


def _seed(seed: int, uid: str, family: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{uid}:{family}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))  # noqa: S311 - reproducible mutations


def _calls(task: Task) -> Calls:
    return [
        {"tool": c.tool, "arguments": copy.deepcopy(c.parameters)}
        for c in task.answer.golden_tool_interactions
    ]


# -- argument surgery -----------------------------------------------------------------------------
def _leaves(
    value: Any, schema: Mapping[str, Any], path: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], Any, Mapping[str, Any]]]:
    """(path, value, schema) of every scalar argument that is set (None values are left alone)."""
    if isinstance(value, dict):
        props = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        for key, item in value.items():
            yield from _leaves(item, _resolve(props.get(key, {})), (*path, key))
    elif isinstance(value, list):
        items = schema.get("items", {}) if isinstance(schema, Mapping) else {}
        for i, item in enumerate(value):
            yield from _leaves(item, _resolve(items), (*path, i))
    elif value is not None:
        yield path, value, schema


def _resolve(schema: Any) -> Mapping[str, Any]:
    """The first non-null branch of an anyOf/oneOf (schemas are inlined, $ref-free)."""
    if not isinstance(schema, Mapping):
        return {}
    for key in ("anyOf", "oneOf"):
        if key in schema:
            for branch in schema[key]:
                if isinstance(branch, Mapping) and branch.get("type") != "null":
                    return branch
    return schema


def _set(arguments: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = arguments
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


def _date_shift(text: str) -> str | None:
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S"):
        try:
            moved = datetime.strptime(text, fmt) + timedelta(days=1)
        except ValueError:
            continue
        return moved.strftime(fmt)
    return None


def _wrong_value(value: Any, schema: Mapping[str, Any], rng: random.Random) -> Any:
    enum = schema.get("enum")
    if isinstance(enum, list) and len(enum) > 1:
        others = [e for e in enum if e != value]
        return rng.choice(others)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value * 1.5 + 1, 2)
    if isinstance(value, str):
        return _date_shift(value)
    return None


def _bad_format(value: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(value, bool):
        return "maybe"
    if isinstance(value, int | float):
        return f"{value} dollars"
    if isinstance(value, str):
        if _date_shift(value) is not None:
            return "next tuesday"
        if schema.get("enum"):
            return value.upper() + "!"
        return {"value": value}
    return None


def _is_id(path: tuple[Any, ...]) -> bool:
    name = next((p for p in reversed(path) if isinstance(p, str)), "")
    return name == "id" or name.endswith("_id")


# -- one task's mutations -------------------------------------------------------------------------
@dataclass
class _Context:
    domain: Domain
    task: Task
    keys: dict[str, str]
    """Initial state: record key -> table (for ids that name an existing record)."""
    by_table: dict[str, list[str]]

    def other_record(self, key: str, rng: random.Random) -> str | None:
        table = self.keys.get(key)
        if table is None:
            return None
        others = [k for k in self.by_table[table] if k != key]
        return rng.choice(sorted(others)) if others else None


def _writes(ctx: _Context, calls: Calls) -> list[int]:
    tools = ctx.domain.tools
    return [i for i, c in enumerate(calls) if c["tool"] in tools and tools[c["tool"]].writes]


def _mutate(ctx: _Context, family: str, rng: random.Random) -> tuple[Calls, int, str] | None:
    """One mutation of the golden calls by ``family``, or None where the family does not apply."""
    calls = _calls(ctx.task)
    writes = _writes(ctx, calls)
    if not writes:
        return None
    schemas = {name: tool.input_schema for name, tool in ctx.domain.tools.items()}
    order = rng.sample(writes, len(writes))
    if family in ("wrong_value", "bad_argument", "wrong_record", "extra_write"):
        for i in order:
            call = calls[i]
            leaves = list(_leaves(call["arguments"], schemas[call["tool"]]))
            rng.shuffle(leaves)
            for path, value, schema in leaves:
                if family == "wrong_value" and not _is_id(path):
                    new = _wrong_value(value, schema, rng)
                elif family == "bad_argument":
                    new = _bad_format(value, schema)
                elif family in ("wrong_record", "extra_write") and _is_id(path) and isinstance(value, str):
                    new = ctx.other_record(value, rng)
                else:
                    continue
                if new is None or new == value:
                    continue
                changed = copy.deepcopy(call)
                _set(changed["arguments"], path, new)
                where = ".".join(map(str, path))
                if family == "extra_write":
                    calls.insert(i + 1, changed)
                    return calls, i, f"{call['tool']} repeated with {where}={new!r} (another record)"
                calls[i] = changed
                return calls, i, f"{call['tool']}.{where}: {value!r} -> {new!r}"
        return None
    i = order[0]
    if family == "duplicate_write":
        calls.insert(i + 1, copy.deepcopy(calls[i]))
        return calls, i, f"{calls[i]['tool']} sent twice"
    if family == "missing_write":
        dropped = calls.pop(i)
        return calls, i, f"{dropped['tool']} left out"
    if family == "premature_stop":
        if len(writes) < 2:
            return None
        cut = rng.choice(writes[:-1])
        return (
            calls[: cut + 1],
            cut,
            f"stopped after call {cut} ({calls[cut]['tool']}), before the last write",
        )
    if family == "wrong_order":
        pairs = [(a, b) for a, b in itertools.pairwise(writes) if b == a + 1]
        if not pairs:
            return None
        a, b = rng.choice(pairs)
        calls[a], calls[b] = calls[b], calls[a]
        return calls, a, f"{calls[b]['tool']} and {calls[a]['tool']} swapped"
    raise ValueError(f"unknown family {family!r}")


def _variant(ctx: _Context, family: str, rng: random.Random) -> tuple[Calls, str] | None:
    calls = _calls(ctx.task)
    writes = set(_writes(ctx, calls))
    reads = [i for i in range(len(calls)) if i not in writes]
    if not reads:
        return None
    if family == "extra_reads":
        out: Calls = []
        for i, call in enumerate(calls):
            out.append(call)
            if i in reads:
                out.append(copy.deepcopy(call))
        return out, "every read repeated"
    if family == "reordered_reads":
        pairs = [(i, i + 1) for i in range(len(calls) - 1) if i in reads and i + 1 in reads]
        if not pairs:
            return None
        a, b = rng.choice(pairs)
        calls[a], calls[b] = calls[b], calls[a]
        return calls, f"reads {a} and {b} swapped"
    raise ValueError(f"unknown variant {family!r}")


def _replay(domain: Domain, database: Database, task: Task, calls: Calls) -> bool:
    """The unguarded judge verdict of ``calls`` on a fresh environment."""
    assert task.answer.expected is not None
    with Environment(domain, database) as env:
        env.apply_patch(task.data_patch)
        for call in calls:
            env.call_tool(call["tool"], call["arguments"])
        return env.state_hash() == task.answer.expected.golden_db_hash


def _context(domain: Domain, database: Database, task: Task) -> _Context:
    keys: dict[str, str] = {}
    by_table: dict[str, list[str]] = defaultdict(list)
    with Environment(domain, database) as env:
        env.apply_patch(task.data_patch)
        for table, rows in env.snapshot().items():
            spec = domain.tables[table]
            for row in rows:
                key = spec.key(row)
                by_table[table].append(key)
                keys.setdefault(key, table)
    return _Context(domain, task, keys, dict(by_table))


@dataclass
class CorpusStats:
    tried: Counter[tuple[str, str]] = field(default_factory=Counter)
    kept: Counter[tuple[str, str]] = field(default_factory=Counter)


def build_corpus(
    domain: Domain,
    database: Database,
    tasks: Sequence[Task],
    seed: int,
    stats: CorpusStats,
    on_task: Callable[[], None] | None = None,
) -> Iterator[Entry]:
    """The corpus entries of ``tasks`` (one domain), in task then family order."""
    for task in tasks:
        ctx = _context(domain, database, task)
        for family in FAMILIES:
            mutated = _mutate(ctx, family, _seed(seed, task.id, family))
            if mutated is None:
                continue
            calls, index, note = mutated
            stats.tried[(domain.name, family)] += 1
            if not _replay(domain, database, task, calls):
                stats.kept[(domain.name, family)] += 1
                yield Entry(task.id, "fault", family, index, note, calls)
        for family in VARIANTS:
            variant = _variant(ctx, family, _seed(seed, task.id, family))
            if variant is None:
                continue
            calls, note = variant
            stats.tried[(domain.name, family)] += 1
            if _replay(domain, database, task, calls):
                stats.kept[(domain.name, family)] += 1
                yield Entry(task.id, "variant", family, None, note, calls)
        if on_task is not None:
            on_task()


# -- measuring a replay of the corpus -------------------------------------------------------------
@dataclass
class FamilyFigures:
    caught: int = 0
    missed: int = 0
    false_block: int = 0
    clean_pass: int = 0
    misses: list[str] = field(default_factory=list)

    @property
    def catch_rate(self) -> float | None:
        n = self.caught + self.missed
        return self.caught / n if n else None


def measure(corpus: Path, results: Path) -> dict[tuple[str, str, str], FamilyFigures]:
    """(domain, kind, family) -> the open-loop figures of ``results`` (a ``bench run --agent replay``
    over ``corpus``), per guarded arm row. A row naming a trajectory line the corpus does not have is
    an error."""
    entries: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(read_text(corpus).splitlines(), start=1):
        if line.strip():
            entries[number] = json_object(line, corpus, number, what="a corpus entry")
    out: dict[tuple[str, str, str], FamilyFigures] = defaultdict(FamilyFigures)
    for number, row in iter_results(results):
        cell = row.metadata.get("open_loop")
        if cell is None:
            continue
        ref = str(row.metadata.get("trajectory", ""))
        line_no = ref.rsplit(":", 1)[-1]
        if not line_no.isdigit() or int(line_no) not in entries:
            raise ResultsError(
                f"{results}:{number}: field metadata.trajectory: {ref!r} is not a line of {corpus}"
            )
        entry = entries[int(line_no)]
        figures = out[(domain_of(row), str(entry.get("kind")), str(entry.get("family")))]
        setattr(figures, str(cell), getattr(figures, str(cell)) + 1)
        if cell == "missed":
            figures.misses.append(f"{row.uid} [{entry.get('family')}] {entry.get('note')}")
    return dict(out)


def fault_of(domain: Domain, database: Database, task: Task, family: str, seed: int) -> Entry | None:
    """The ``family`` mutation of ``task`` exactly as :func:`build_corpus` makes it for ``seed``, or None
    where the family does not apply to the task or its mutation still passes the judge unguarded."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    mutated = _mutate(_context(domain, database, task), family, _seed(seed, task.id, family))
    if mutated is None:
        return None
    calls, index, note = mutated
    if _replay(domain, database, task, calls):
        return None
    return Entry(task.id, "fault", family, index, note, calls)
