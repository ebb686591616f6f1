"""guard.exports.lazy_exports, the ``__getattr__`` behind the public names of ``guard`` and ``proxy``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from guard.exports import lazy_exports


def test_a_public_name_is_imported_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lazy_target_for_test.py").write_text("VALUE = object()\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_target_for_test", raising=False)
    resolve = lazy_exports("pkg", {"VALUE": "lazy_target_for_test"}, ["VALUE"])
    assert "lazy_target_for_test" not in sys.modules
    value = resolve("VALUE")
    assert value is importlib.import_module("lazy_target_for_test").VALUE


def test_an_unknown_name_is_an_attribute_error() -> None:
    resolve = lazy_exports("pkg", {"dedent": "textwrap"}, ["dedent"])
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'indent'"):
        resolve("indent")


@pytest.mark.parametrize(
    ("exports", "public", "said"),
    [
        (
            {"dedent": "textwrap"},
            ["dedent", "indent"],
            "not in the exports: ['indent'], not in __all__: none",
        ),
        (
            {"dedent": "textwrap", "indent": "textwrap"},
            ["dedent"],
            "not in the exports: none, not in __all__: ['indent']",
        ),
    ],
)
def test_exports_that_do_not_match_all_are_refused(
    exports: dict[str, str], public: list[str], said: str
) -> None:
    with pytest.raises(ValueError, match="lazy exports must name exactly __all__") as refused:
        lazy_exports("pkg", exports, public)
    assert said in str(refused.value)


@pytest.mark.parametrize("package", ["guard", "proxy"])
def test_every_public_name_resolves_to_its_defining_module(package: str) -> None:
    module = importlib.import_module(package)
    exports: dict[str, str] = vars(module)["_EXPORTS"]
    assert sorted(exports) == sorted(module.__all__)
    for name in module.__all__:
        defined = getattr(importlib.import_module(exports[name]), name)
        assert getattr(module, name) is defined, name


def test_guard_classify_is_the_public_function() -> None:
    """No submodule shares a public name: importing it would replace the package attribute."""
    import guard
    import guard.effects
    import guard.session  # imports guard.classifier

    assert guard.classify is guard.effects.classify


def test_txext_states_every_public_name_it_holds() -> None:
    """``from guard.txext import X`` works for each name of ``__all__``, and ``__all__`` names every
    public name the package holds (its submodules aside)."""
    import guard.txext as txext

    submodules = {
        "after",
        "client",
        "carried",
        "leases",
        "participant",
        "points",
        "protocol",
        "registry",
        "toolcalls",
    }
    held = {name for name in vars(txext) if not name.startswith("_")} - submodules
    assert sorted(txext.__all__) == sorted(held)
    for name in txext.__all__:
        assert getattr(txext, name) is not None, name
