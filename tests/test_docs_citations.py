"""Every document the code and the docs cite is in the repository, and every link in the docs resolves.

- no ``.py`` file of ``guard``, ``proxy``, ``benchmark`` or ``tests``, no file of a policy pack, and no
  Markdown file under ``docs/`` (nor README.md, CONTRIBUTING.md), cites the design documents the project
  started from, which live outside the repository (the shared ``docs/`` folder, its DESIGN, LIFT and
  harness notes, the MCP SDK notes);
- the benchmark data bundle's own SPEC is named only by docs/benchmark.md, which states the facts the
  code takes from it; everything else cites docs/benchmark.md (docs/architecture.md#the-benchmark);
- a relative Markdown link in those documents points to a file that exists, and a ``#fragment`` of a
  Markdown target names one of its headings;
- a ``docs/NAME.md#fragment`` written in any of those files names an existing file and heading.

Read from the text; nothing is imported.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("guard", "proxy", "benchmark", "tests")
THIS = Path(__file__).resolve()  # names the forbidden citations to test the rule: not scanned
BUNDLE_SPEC_HOME = "docs/benchmark.md"

OUTSIDE = re.compile(
    r"shared/" + r"docs"
    r"|\b(?:DESIGN|LIFT|SPEC)\.md"
    r"|\bthinkingbox-harness"
    r"|\bharness\.md"
    r"|\bmcp-sdk-2\.3\.md"
    r"|\b(?:DESIGN|LIFT|SPEC|harness) §"
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOC_REF = re.compile(r"\bdocs/[\w./-]+\.md(?:#[\w-]+)?")


def documents() -> list[Path]:
    """The Markdown files whose citations and links are checked."""
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [*docs, ROOT / "README.md", ROOT / "CONTRIBUTING.md"]


def sources() -> list[Path]:
    """The code and the policy packs (their checks, YAML and READMEs) whose citations are checked."""
    code = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if p.resolve() != THIS]
    packs = [p for p in sorted((ROOT / "policies").rglob("*")) if p.suffix in (".py", ".yaml", ".md")]
    return code + packs


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def outside_citations(rel_path: str, text: str) -> list[str]:
    """``path:line: text`` for each line of ``text`` citing a document outside the repository.

    docs/benchmark.md alone may name the bundle's SPEC (it is where the code's facts from it are stated).
    """
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in OUTSIDE.finditer(line):
            if rel_path == BUNDLE_SPEC_HOME and match.group(0).startswith("SPEC"):
                continue
            found.append(f"{rel_path}:{number}: {line.strip()}")
            break
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    """The anchors of ``markdown``'s headings (outside fenced code), with GitHub's ``-1`` suffixes."""
    seen: dict[str, int] = {}
    result = set()
    fenced = False
    for line in markdown.read_text("utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def unresolved(target: Path, fragment: str) -> str | None:
    """Why ``target#fragment`` does not resolve, or None when it does."""
    if not target.exists():
        return "no such file"
    if fragment and target.suffix == ".md" and fragment not in anchors(target):
        return f"no heading #{fragment}"
    return None


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """``path: target (reason)`` for each relative link of ``doc`` that does not resolve (``path`` relative
    to ``root``)."""
    found = []
    for target in LINK.findall(doc.read_text("utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        resolved = doc if not path else (doc.parent / path).resolve()
        reason = unresolved(resolved, fragment)
        if reason:
            found.append(f"{doc.relative_to(root).as_posix()}: {target} ({reason})")
    return found


def broken_doc_refs(path: Path) -> list[str]:
    """``path: docs/x.md#y (reason)`` for each repository-relative docs reference that does not resolve."""
    found = []
    for ref in DOC_REF.findall(path.read_text("utf-8")):
        name, _, fragment = ref.partition("#")
        reason = unresolved(ROOT / name, fragment)
        if reason:
            found.append(f"{rel(path)}: {ref} ({reason})")
    return found


def test_no_citation_of_a_document_outside_the_repository() -> None:
    found = [hit for p in sources() + documents() for hit in outside_citations(rel(p), p.read_text("utf-8"))]
    assert found == [], "cite the repository's docs instead:\n" + "\n".join(found)


def test_relative_links_in_the_docs_resolve() -> None:
    found = [hit for doc in documents() for hit in broken_links(doc)]
    assert found == [], "\n".join(found)


def test_docs_references_resolve() -> None:
    found = [hit for p in sources() + documents() for hit in broken_doc_refs(p)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    ("rel_path", "line", "cited"),
    [
        ("guard/x.py", '"""As in ../shared/' + 'docs/LIFT.md §1."""', True),
        ("docs/x.md", "see DESIGN" + " §3", True),
        ("benchmark/x.py", "# frozen clock (bundle SPEC" + ".md §3.3)", True),
        ("docs/benchmark.md", "(the bundle's SPEC" + ".md §3.3)", False),
        ("docs/benchmark.md", "the design in LIFT" + ".md", True),
        ("benchmark/x.py", "# (harness" + " §4 rules)", True),
        ("guard/x.py", "# see docs/architecture.md#the-guarded-call", False),
    ],
)
def test_the_citation_rule(rel_path: str, line: str, cited: bool) -> None:
    assert bool(outside_citations(rel_path, line)) is cited


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading\n\n## Step `two`, done\n", "utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md) [ok](there.md#a-heading) [ok](there.md#step-two-done) [web](https://x.org/y)\n"
        "[gone](missing.md) [bad anchor](there.md#nope) [self](#nowhere)\n",
        "utf-8",
    )
    found = [line.split(": ", 1)[1] for line in broken_links(doc, tmp_path)]
    assert found == [
        "missing.md (no such file)",
        "there.md#nope (no heading #nope)",
        "#nowhere (no heading #nowhere)",
    ]


def module_map(package: str) -> set[str]:
    """The names written in backticks under ``### package`` of docs/architecture.md's module map."""
    text = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    part = section.split(f"### {package}\n", 1)[1].split("\n### ", 1)[0]
    return set(re.findall(r"`([^`\s]+)`", part))


def unmapped(package: str, names: set[str]) -> list[str]:
    """The modules (``x.py``) and subpackages (``x/``) of ``package`` that ``names`` does not name."""
    entries = [
        p.name + ("/" if p.is_dir() else "")
        for p in sorted((ROOT / package).iterdir())
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")
    ]
    patterns = [n for n in names if "*" in n]
    return [e for e in entries if e not in names and not any(fnmatch(e, pat) for pat in patterns)]


@pytest.mark.parametrize("package", ["guard", "proxy", "benchmark"])
def test_the_module_map_names_every_module(package: str) -> None:
    assert unmapped(package, module_map(package)) == [], "add them to docs/architecture.md#module-map"
