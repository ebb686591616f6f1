"""Simulated profiles: the file format, the calibration against the published figures, bad input."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from benchmark.campaign.calibrate import draw_propensities, expected_figures, fit_profile, simulate_off
from benchmark.campaign.lift import parse_sweep
from benchmark.campaign.profiles import (
    DOMAIN_ORDER,
    PROFILE_DIR,
    FeedbackSpecError,
    Profile,
    ProfileError,
    load_profile,
    parse_feedback,
)
from benchmark.tasks import BenchData
from proxy.cli import _mount_benchmark, app

CALIBRATED = ("opus-5", "kimi-k3", "gpt-6-astra")
CHECK_SEED = 1
"""The default ``bench calibrate --check-seed``; the fit is analytic and uses no seed."""


@pytest.fixture(scope="module")
def uids(bench: BenchData) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for task in bench.tasks(None):
        out.setdefault(task.domain, []).append(task.id)
    return out


def _counts(uids: dict[str, list[str]]) -> dict[str, int]:
    return {d: len(u) for d, u in uids.items()}


def _same_fit(stored: Any, refit: Any) -> bool:
    """The stored fit is the one the calibration gives now: same structure and method, numbers equal to
    1e-9 relative. The optimiser's last bits differ between CPUs (seen: 1.520007938231186 written on one
    machine, 1.5200079382311853 refitted on another), which is not a stale profile."""
    if isinstance(stored, dict) and isinstance(refit, dict):
        return stored.keys() == refit.keys() and all(_same_fit(stored[k], refit[k]) for k in stored)
    if isinstance(stored, list) and isinstance(refit, list):
        return len(stored) == len(refit) and all(map(_same_fit, stored, refit))
    if isinstance(stored, float | int) and isinstance(refit, float | int) and not isinstance(stored, bool):
        return math.isclose(stored, refit, rel_tol=1e-9, abs_tol=1e-12)
    return bool(stored == refit)


def _raw(name: str = "opus-5") -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


def _write(tmp_path: Path, raw: dict[str, Any]) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return str(path)


def test_all_nine_published_models_have_a_fitted_profile_that_is_up_to_date(
    uids: dict[str, list[str]],
) -> None:
    names = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
    assert len(names) == 9
    for name in names:
        profile = load_profile(name, fitted=True)
        assert profile.fit is not None
        refit = fit_profile(profile, _counts(uids)).model_dump()
        assert _same_fit(profile.fit.model_dump(), refit), f"{name}: run bench calibrate"
        assert profile.feedback.raw_error == 0.0, "calibration fixes the raw-error reaction"


@pytest.mark.parametrize("name", CALIBRATED)
def test_fit_hits_the_published_figures_in_expectation(name: str, uids: dict[str, list[str]]) -> None:
    profile = load_profile(name, fitted=True)
    assert profile.fit is not None
    fig = expected_figures(profile.fit.domains, _counts(uids))
    for d in DOMAIN_ORDER:
        assert fig.pass1[d] == pytest.approx(profile.published.pass1[d], abs=1e-6)
    assert fig.observed_20 == pytest.approx(profile.published.observed_20, abs=1e-3)
    if profile.published.pass20 is not None:
        assert fig.pass20 == pytest.approx(profile.published.pass20, abs=0.01)


@pytest.mark.parametrize("name", CALIBRATED)
def test_off_over_507_x_20_reproduces_the_published_figures(name: str, uids: dict[str, list[str]]) -> None:
    """The acceptance figures (±1.5 pp pass@1 per domain, ±1.5 pp pass@20, ±10 tasks 20/20) for the check
    seed, and no bias: the mean over 20 further seeds within a third of those tolerances."""
    profile = load_profile(name, fitted=True)
    assert profile.fit is not None
    pub = profile.published
    check = simulate_off(profile.fit, uids, CHECK_SEED)
    for d in DOMAIN_ORDER:
        assert abs(check.pass1[d] - pub.pass1[d]) <= 1.5, d
    if pub.pass20 is not None:
        assert abs(check.pass20 - pub.pass20) <= 1.5
    assert abs(check.observed_20 - pub.observed_20) <= 10
    runs = [simulate_off(profile.fit, uids, seed) for seed in range(100, 120)]
    for d in DOMAIN_ORDER:
        assert abs(np.mean([r.pass1[d] for r in runs]) - pub.pass1[d]) <= 0.5, d
    if pub.pass20 is not None:
        assert abs(np.mean([r.pass20 for r in runs]) - pub.pass20) <= 0.5
    assert abs(np.mean([r.observed_20 for r in runs]) - pub.observed_20) <= 3.4


def test_propensities_are_drawn_once_per_seed(uids: dict[str, list[str]]) -> None:
    fit = load_profile("kimi-k3", fitted=True).fit
    assert fit is not None
    a, b, c = (draw_propensities(fit, uids, s) for s in (3, 3, 4))
    assert a == b
    assert a != c
    assert set(a) == {u for us in uids.values() for u in us}
    assert all(0.0 <= p <= 1.0 for p in a.values())


def test_a_mass_at_zero_where_a_beta_cannot_hit_both(uids: dict[str, list[str]]) -> None:
    fit = load_profile("opus-5", fitted=True).fit
    assert fit is not None
    assert fit.method == "beta+mass0"
    assert fit.lambda0 > 0
    astra = load_profile("gpt-6-astra", fitted=True).fit
    assert astra is not None and astra.method == "beta"  # pass@20 unpublished: one target, plain Beta


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"observed_20": 400}, "infeasible"),
        ({"pass20": 50.0}, "below pass@1"),
        ({"overall_pass1": 70.0}, "inconsistent"),
    ],
)
def test_an_infeasible_target_is_an_error(
    tmp_path: Path, uids: dict[str, list[str]], change: dict[str, Any], message: str
) -> None:
    raw = _raw()
    raw["published"].update(change)
    profile = load_profile(_write(tmp_path, raw))
    with pytest.raises(ProfileError, match=message):
        fit_profile(profile, _counts(uids))


def test_infeasible_calibration_exits_2_and_leaves_the_file(tmp_path: Path) -> None:
    raw = _raw()
    raw["published"]["observed_20"] = 400
    path = _write(tmp_path, raw)
    before = Path(path).read_text(encoding="utf-8")
    _mount_benchmark()
    result = CliRunner().invoke(app, ["bench", "calibrate", "--profile", path])
    assert result.exit_code == 2
    assert "infeasible" in result.output
    assert Path(path).read_text(encoding="utf-8") == before


def test_calibrate_writes_the_fit_and_prints_published_vs_reproduced(tmp_path: Path) -> None:
    raw = _raw("kimi-k3")
    raw["fit"] = None
    path = _write(tmp_path, raw)
    _mount_benchmark()
    result = CliRunner().invoke(app, ["bench", "calibrate", "--profile", path])
    assert result.exit_code == 0, result.output
    assert "published" in result.output and "reproduced" in result.output
    assert result.output.strip().splitlines()[-1].startswith("calibrate: kimi-k3 beta+mass0 pass@1 ")
    assert load_profile(path, fitted=True).fit == load_profile("kimi-k3").fit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["feedback"].pop("held"), "field feedback.held: Field required"),
        (
            lambda r: r["feedback"].update(held=1.5),
            "field feedback.held: Input should be less than or equal to 1",
        ),
        (lambda r: r["feedback"].update(typo=0.5), "field feedback.typo: Extra inputs are not permitted"),
        (lambda r: r["published"]["pass1"].pop("sandbox_consulting"), "missing sandbox_consulting"),
        (lambda r: r["failure_mix"]["signatures"].update(tool_usage=0.5), "shares sum to"),
        (lambda r: r["failure_mix"].update(environment_share=-0.1), "field failure_mix.environment_share"),
    ],
)
def test_a_bad_profile_names_file_and_field(tmp_path: Path, edit: Any, message: str) -> None:
    raw = _raw()
    edit(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert str(caught.value).startswith(f"{path}: field ")
    assert message in str(caught.value)


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"unknown profile 'nope'; known: gpt-5.2, .*opus-5"):
        load_profile("nope")


def test_an_unfitted_profile_cannot_be_run(tmp_path: Path) -> None:
    raw = _raw()
    raw["fit"] = None
    with pytest.raises(ProfileError, match="field fit: missing; run `shadowguard bench calibrate"):
        load_profile(_write(tmp_path, raw), fitted=True)


def test_feedback_and_sweep_specs() -> None:
    assert dict(parse_feedback("feedback=0.5")) == {
        "classified_hint": 0.5,
        "policy_violation": 0.5,
        "commit_refused": 0.5,
        "held": 0.5,
    }
    assert parse_feedback("held=1,raw_error=0") == (("held", 1.0), ("raw_error", 0.0))
    assert parse_sweep("feedback=0,0.5,1") == ("feedback", (0.0, 0.5, 1.0))
    for bad, message in (
        ("held=2", "outside"),
        ("hold=0.5", "unknown feedback kind"),
        ("held", "expected KIND=P"),
        ("held=x", "not a number"),
    ):
        with pytest.raises(FeedbackSpecError, match=message):
            parse_feedback(bad)
    with pytest.raises(FeedbackSpecError, match="given twice"):
        parse_sweep("feedback=0,0")


def test_with_feedback_validates() -> None:
    profile: Profile = load_profile("opus-5")
    assert profile.with_feedback(held=1.0).feedback.held == 1.0
    with pytest.raises(ValueError, match="less than or equal to 1"):
        profile.with_feedback(held=3.0)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda r: r["feedback"].update(held=1.5),
            "field feedback.held: Input should be less than or equal to 1",
        ),
        (
            lambda r: r["failure_mix"].pop("environment_share"),
            "field failure_mix.environment_share: Field required",
        ),
    ],
)
@pytest.mark.parametrize("command", ["run", "lift", "calibrate"])
def test_run_lift_and_calibrate_refuse_a_bad_profile_file(
    tmp_path: Path, edit: Any, message: str, command: str
) -> None:
    raw = _raw()
    edit(raw)
    path = _write(tmp_path, raw)
    out = tmp_path / "out"
    args = {
        "run": ["run", "--agent", "simulated", "--profile", path, "--out", str(out)],
        "lift": ["lift", "--profile", path, "--out", str(out)],
        "calibrate": ["calibrate", "--profile", path],
    }[command]
    before = Path(path).read_text(encoding="utf-8")
    _mount_benchmark()
    result = CliRunner().invoke(app, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert f"{path}: {message}" in " ".join(result.output.split())
    assert not out.exists()
    assert Path(path).read_text(encoding="utf-8") == before
