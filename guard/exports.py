"""Lazy public names for a package's ``__init__.py`` (``guard`` and ``proxy`` use it): each name is
imported from its defining module on first use, so that importing one submodule, or running the
console script, does not import the whole package."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], public: Collection[str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: ``exports`` maps each public name to the
    module defining it, and must name exactly ``public`` (the package's ``__all__``): a name missing
    from either is a ValueError when the package is imported, not an AttributeError on first use."""
    missing, extra = sorted(set(public) - set(exports)), sorted(set(exports) - set(public))
    if missing or extra:
        raise ValueError(
            f"{package}: the lazy exports must name exactly __all__; "
            f"not in the exports: {missing or 'none'}, not in __all__: {extra or 'none'}"
        )
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
