"""search_policy (retail) / knowledge_base_search_policy (other domains): rank the scenario's policy sections.

The reference embeds every scenario source (``world_state.<scenario>.sources``: ``{name, snippets}``, one
markdown section per snippet) into a per-session Typesense collection and answers with a vector search
grouped by source (docs/benchmark.md#policy-search). No vector of a successful search exists, and we run
offline, so the sections are ranked lexically instead, with SQLite FTS5 (porter stemming) and its
``bm25()``, in memory, built once per bundle and scenario and then cached.

FTS5's bm25 sets the idf of a term found in more than half of the rows to ~0. With one row per section
(8-11 per scenario) the words that matter most ("return", "cancel", "driver") would weigh nothing, so the
rows are the sections' passages instead: each section is split at its markdown headings, and a section
scores the sum of its matching passages' ``-bm25()`` (FTS5's bm25 is negative, lower meaning better), so
a section that treats the query's words throughout outranks one that mentions them once. The source name is
indexed with every passage and weighs twice as much as the body.

Each hit keeps the reference's shape ``{source, score, vector_distance, text}``:

* ``text`` is the whole section as stored in the scenario file (literal ``\\n`` escapes included; the index
  reads them as line breaks);
* ``score`` is that sum rounded to 6 places: positive, higher meaning more relevant;
* ``vector_distance`` is ``1 / (1 + score)`` rounded to 6 places: in (0, 1), lower meaning closer, so
  results sort ascending by it as the reference sorts by its cosine distance.

Only sections sharing at least one word (after stemming) with the query are returned, one per source, at
most ``max_results`` (default 3, clamped to 1..10). A query without any word (e.g. only punctuation)
returns no snippets. The query never reaches FTS5's query syntax: each word is passed as a quoted term.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import DataError
from benchmark.envs.tools import ToolFn

DEFAULT_RESULTS = 3
MAX_RESULTS = 10
MAX_QUERY_TERMS = 64
TITLE_WEIGHT = 2.0
_WORD = re.compile(r"[^\W_]+")
_HEADING = re.compile(r"(?m)^(?=#{1,6}\s)")


@dataclass(frozen=True)
class Section:
    """One policy snippet of a scenario source."""

    source: str
    text: str


def load_sections(bundle: Path, scenario: str) -> list[Section]:
    """The snippets of ``world_state.<scenario>.sources`` in the scenario YAML, in file order."""
    path = bundle / "data" / "dataset" / "scenario" / f"{scenario}.yaml"
    try:
        with path.open(encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except FileNotFoundError as exc:
        raise DataError(f"{path}: file not found") from exc
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: invalid YAML: {exc}") from exc
    try:
        sources = doc["world_state"][scenario]["sources"]
    except (KeyError, TypeError) as exc:
        raise DataError(f"{path}: no world_state.{scenario}.sources") from exc
    if not isinstance(sources, list):
        raise DataError(f"{path}: world_state.{scenario}.sources must be a list")
    sections = []
    for i, source in enumerate(sources):
        name = source.get("name") if isinstance(source, dict) else None
        snippets = source.get("snippets") if isinstance(source, dict) else None
        if not isinstance(name, str) or not isinstance(snippets, list):
            raise DataError(f"{path}: sources[{i}] must have a string name and a list of snippets")
        for j, text in enumerate(snippets):
            if not isinstance(text, str):
                raise DataError(f"{path}: sources[{i}].snippets[{j}] must be a string")
            sections.append(Section(source=name, text=text))
    return sections


def query_terms(query: str) -> list[str]:
    """Distinct lower-cased words of the query, in order: punctuation is dropped and each word is later
    quoted, so FTS5 syntax in the query (quotes, ``*``, ``NEAR``, ``OR``) is read as plain text."""
    terms = dict.fromkeys(word.lower() for word in _WORD.findall(query))
    return list(terms)[:MAX_QUERY_TERMS]


def _title(source: str) -> str:
    return source.removesuffix(".md").replace("_", " ")


def passages(text: str) -> list[str]:
    """A section cut at its markdown headings (each passage starts with its heading)."""
    parts = [part for part in _HEADING.split(text.replace("\\n", "\n")) if part.strip()]
    return parts or [text]


class PolicyIndex:
    """An FTS5 index over one scenario's section passages; safe to share between threads."""

    def __init__(self, sections: list[Section]) -> None:
        self.sections = sections
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE passages USING fts5("
            "section UNINDEXED, title, body, tokenize='porter unicode61 remove_diacritics 2')"
        )
        self._db.executemany(
            "INSERT INTO passages(section, title, body) VALUES (?, ?, ?)",
            [
                (i, _title(section.source), passage)
                for i, section in enumerate(sections)
                for passage in passages(section.text)
            ],
        )
        self._db.commit()

    def search(self, query: str, max_results: int) -> list[dict[str, Any]]:
        terms = query_terms(query)
        if not terms:
            return []
        match = " OR ".join(f'"{term}"' for term in terms)
        with self._lock:
            rows = self._db.execute(
                "SELECT section, bm25(passages, 0.0, ?, 1.0) FROM passages WHERE passages MATCH ?",
                (TITLE_WEIGHT, match),
            ).fetchall()
        totals: dict[int, float] = {}
        for section_index, bm25_rank in rows:
            totals[section_index] = totals.get(section_index, 0.0) - bm25_rank
        hits: list[dict[str, Any]] = []
        seen: set[str] = set()
        for section_index in sorted(totals, key=lambda i: (-totals[i], i)):
            section = self.sections[section_index]
            if section.source in seen:
                continue
            seen.add(section.source)
            score = round(totals[section_index], 6)
            hits.append(
                {
                    "source": section.source,
                    "score": score,
                    "vector_distance": round(1.0 / (1.0 + score), 6),
                    "text": section.text,
                }
            )
            if len(hits) == max_results:
                break
        return hits


@functools.cache
def policy_index(bundle: Path, scenario: str) -> PolicyIndex:
    return PolicyIndex(load_sections(bundle, scenario))


def clamp_results(max_results: int | None) -> int:
    if max_results is None:
        return DEFAULT_RESULTS
    return min(max(max_results, 1), MAX_RESULTS)


def make_search_tool(scenario: str) -> ToolFn:
    """The search tool of one scenario; its index is built on first use from the domain's bundle."""

    def search_policy(env: Environment, args: BaseModel) -> dict[str, Any]:
        index = policy_index(Path(env.domain.bundle), scenario)
        sent = args.model_dump()  # the tool's input model is built from its JSON schema at run time
        return {"snippets": index.search(sent["query"], clamp_results(sent["max_results"]))}

    return search_policy
