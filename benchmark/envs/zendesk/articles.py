"""``zendesk_search_articles``: the reference's Zendesk-like keyword matcher over title + body.

Query syntax: ``"quoted phrases"`` must all occur, ``-word`` / ``-"phrase"`` exclude, and of the
remaining words all must occur when there are at most two, else ``ceil(0.4 * n)`` of them. Matching is
case-insensitive substring search. Then the optional filters narrow the hits (a falsy filter value is
ignored, as in the reference); ``brand_id`` is ignored when ``multibrand`` is true.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from benchmark.envs.environment import Environment
from benchmark.envs.zendesk.inputs import ZendeskSearchArticlesInput
from benchmark.envs.zendesk.variant import ZendeskVariant

MAX_RESULTS = 1000
_PHRASE = re.compile(r'(-?)"([^"]+)"')
_NEGATIVE_WORD = re.compile(r"-(\w+)")


@dataclass
class Query:
    phrases: list[str] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)
    negatives: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Query:
        query = cls()
        for match in _PHRASE.finditer(text):
            target = query.negatives if match.group(1) == "-" else query.phrases
            target.append(match.group(2).strip().lower())
        rest = _PHRASE.sub("", text)
        query.negatives += [m.group(1).strip().lower() for m in _NEGATIVE_WORD.finditer(rest)]
        rest = _NEGATIVE_WORD.sub("", rest)
        query.terms = [t for t in (w.strip().lower().replace("'", "") for w in rest.split()) if t]
        return query

    def matches(self, text: str) -> bool:
        text = text.lower()
        if any(n in text for n in self.negatives) or any(p not in text for p in self.phrases):
            return False
        found = sum(1 for t in self.terms if t in text)
        if len(self.terms) <= 2:
            return found == len(self.terms)
        return found >= math.ceil(0.4 * len(self.terms))


def search_articles(
    variant: ZendeskVariant, env: Environment, args: ZendeskSearchArticlesInput
) -> dict[str, Any]:
    query = Query.parse(args.query)
    hits = [a for a in env.table(variant.articles_table).all() if query.matches(f"{a.title} {a.body}")]
    if args.locale:
        hits = [a for a in hits if a.locale == args.locale]
    if args.brand_id and not args.multibrand:
        hits = [a for a in hits if a.brand_id == args.brand_id]
    if args.category:
        hits = [a for a in hits if a.category_id == args.category]
    if args.section:
        hits = [a for a in hits if a.section_id == args.section]
    if args.label_names:
        labels = [label.strip() for label in args.label_names.split(",")]
        hits = [a for a in hits if any(label in a.label_names for label in labels)]
    return {"results": [a.model_dump(mode="json") for a in hits[:MAX_RESULTS]]}
