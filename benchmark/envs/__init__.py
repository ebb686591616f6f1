"""The benchmark's domain environments: SQL-backed, hash-identical copies of the reference tool servers."""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

from benchmark.envs.environment import Domain, DomainDef, Environment, Table
from benchmark.envs.errors import DataError, EnvError, ToolError, UnknownDomainError, UnknownTableError
from benchmark.envs.store import Database

__all__ = [
    "DOMAINS",
    "DataError",
    "Database",
    "Domain",
    "DomainDef",
    "EnvError",
    "Environment",
    "Table",
    "ToolError",
    "UnknownDomainError",
    "UnknownTableError",
    "load_domain",
]

# Domain name -> module defining DOMAIN: DomainDef. Only landed domains are listed.
DOMAINS: dict[str, str] = {
    "sandbox_external_retail": "benchmark.envs.retail",
    "external_booking_v1": "benchmark.envs.booking",
    "sandbox_auto_insurance": "benchmark.envs.auto",
    "sandbox_neobank_support_v1": "benchmark.envs.neobank",
    "sandbox_consulting": "benchmark.envs.consulting",
}


@cache
def _load(name: str, bundle: Path) -> Domain:
    module = importlib.import_module(DOMAINS[name])
    definition: DomainDef = module.DOMAIN
    return Domain(definition, bundle)


def load_domain(name: str, bundle: Path) -> Domain:
    if name not in DOMAINS:
        raise UnknownDomainError(f"unknown domain {name!r}; implemented: {', '.join(sorted(DOMAINS))}")
    return _load(name, bundle.resolve())
