"""Fitting a profile's propensity distributions to the published figures, and drawing propensities.

The model (docs/architecture.md#three-ways-to-measure): a task's success propensity ``p`` in the
``off`` arm is drawn once per campaign seed from its domain's distribution, and each of its attempts
succeeds with probability ``p``. Over ``n`` repeats, in expectation,

* pass@1 of a domain is ``E[p]``,
* pass@n (unbiased estimator) is ``1 − E[(1 − p)^n]`` averaged over tasks,
* observed n/n is ``Σ_tasks E[p^n]``.

A domain's distribution is ``w0·δ0 + w1·δ1 + (1 − w0 − w1)·Beta(μκ, (1 − μ)κ)`` with its mean fixed at
the published pass@1 ``m``: ``w0 = λ0·(1 − m)``, ``w1 = λ1·m``, and μ what is left. The domains share
the shape (κ, λ0, λ1), since only the overall pass@20 and 20/20 are published. The fit is analytic
(Beta moments via ``scipy.special.betaln``), uses no seed, and takes the simplest shape that hits the
targets:

1. a plain Beta (λ0 = λ1 = 0) with κ solving observed 20/20;
2. where pass@20 is published and the plain Beta's differs by more than :data:`TOLERANCE_PP`, a point
   mass at 0 (the Beta gives too few never-passing tasks) or at 1 (too many), with (κ, λ) solving both.

A target no shape can reach (20/20 above the tasks' pass@1, pass@20 below pass@1, …) is a
:class:`~benchmark.campaign.profiles.ProfileError` naming the target.

Propensities are drawn *stratified* per domain (:func:`draw_propensities`): the domain's tasks, in
an order permuted by the seed, take the quantiles ``(i + U_i)/n`` of its distribution. Each task's
propensity is still a draw from the distribution; the domain's set of propensities just varies less
between seeds than independent draws would, so that a campaign's figures scatter around the targets
by the attempts' own noise only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import betaln
from scipy.stats import beta as beta_dist

from benchmark.campaign.profiles import DOMAIN_ORDER, Fit, Mixture, Profile, ProfileError

REPEATS = 20
TOLERANCE_PP = 0.01
"""A plain Beta whose pass@20 is this close to the target (percentage points) needs no point mass."""
_LOG_KAPPA = (-12.0, 14.0)


def _mixture(m: float, kappa: float, lambda0: float, lambda1: float) -> Mixture:
    w0, w1 = lambda0 * (1 - m), lambda1 * m
    rest = 1 - w0 - w1
    mu = (m - w1) / rest if rest > 1e-12 else 0.5
    mu = min(max(mu, 1e-9), 1 - 1e-9)
    return Mixture(w0=w0, w1=w1, alpha=mu * kappa, beta=(1 - mu) * kappa)


def moments(mix: Mixture, n: int = REPEATS) -> tuple[float, float, float]:
    """(E[p], E[(1 − p)^n], E[p^n]) of a mixture."""
    rest = 1 - mix.w0 - mix.w1
    a, b = mix.alpha, mix.beta
    base = betaln(a, b)
    mean = mix.w1 + rest * a / (a + b)
    never = mix.w0 + rest * float(np.exp(betaln(a, b + n) - base))
    always = mix.w1 + rest * float(np.exp(betaln(a + n, b) - base))
    return mean, never, always


@dataclass(frozen=True)
class Figures:
    """pass@1 per domain and overall, pass@20 (percent) and observed 20/20 (tasks)."""

    pass1: dict[str, float]
    overall: float
    pass20: float
    observed_20: float


def expected_figures(mixtures: Mapping[str, Mixture], counts: Mapping[str, int]) -> Figures:
    total = sum(counts[d] for d in mixtures)
    pass1, never, always, weighted = {}, 0.0, 0.0, 0.0
    for d, mix in mixtures.items():
        mean, nv, al = moments(mix)
        pass1[d] = 100 * mean
        weighted += counts[d] * mean
        never += counts[d] * nv
        always += counts[d] * al
    return Figures(pass1, 100 * weighted / total, 100 * (1 - never / total), always)


def _check_targets(profile: Profile, counts: Mapping[str, int]) -> None:
    pub = profile.published
    total = sum(counts[d] for d in DOMAIN_ORDER)
    overall = sum(counts[d] * pub.pass1[d] for d in DOMAIN_ORDER) / total
    if abs(overall - pub.overall_pass1) > 0.05:
        raise ProfileError(
            f"published.overall_pass1 {pub.overall_pass1} is not the task-weighted mean of the domains' "
            f"pass@1 ({overall:.2f}, over {total} tasks): the figures are inconsistent"
        )
    if pub.observed_20 > total:
        raise ProfileError(f"published.observed_20 {pub.observed_20} exceeds the {total} tasks: infeasible")
    if pub.observed_20 > overall / 100 * total:
        raise ProfileError(
            f"published.observed_20 {pub.observed_20} exceeds pass@1 × tasks ({overall / 100 * total:.1f}): "
            "no distribution with that mean passes so many tasks 20/20 (infeasible)"
        )
    if pub.pass20 is not None:
        if pub.pass20 < overall:
            raise ProfileError(f"published.pass20 {pub.pass20} is below pass@1 {overall:.2f}: infeasible")
        if pub.observed_20 > pub.pass20 / 100 * total:
            raise ProfileError(
                f"published.observed_20 {pub.observed_20} exceeds the tasks passing at least once "
                f"(pass@20 × tasks = {pub.pass20 / 100 * total:.1f}): infeasible"
            )


class _Shape:
    def __init__(self, profile: Profile, counts: Mapping[str, int]) -> None:
        self.means = {d: profile.published.pass1[d] / 100 for d in DOMAIN_ORDER}
        self.counts = counts
        self.target20 = float(profile.published.observed_20)

    def mixtures(self, kappa: float, lambda0: float, lambda1: float) -> dict[str, Mixture]:
        return {d: _mixture(m, kappa, lambda0, lambda1) for d, m in self.means.items()}

    def figures(self, kappa: float, lambda0: float, lambda1: float) -> Figures:
        return expected_figures(self.mixtures(kappa, lambda0, lambda1), self.counts)

    def kappa_for_20(self, lambda0: float, lambda1: float) -> float | None:
        """κ with the target observed 20/20 at (λ0, λ1), or None where no κ reaches it."""

        def gap(log_kappa: float) -> float:
            return self.figures(float(np.exp(log_kappa)), lambda0, lambda1).observed_20 - self.target20

        lo, hi = gap(_LOG_KAPPA[0]), gap(_LOG_KAPPA[1])
        if lo * hi > 0:
            return None
        return float(np.exp(brentq(gap, *_LOG_KAPPA, xtol=1e-10)))


def fit_profile(profile: Profile, counts: Mapping[str, int]) -> Fit:
    """The fitted distributions of ``profile`` for the benchmark's task ``counts`` per domain."""
    _check_targets(profile, counts)
    shape = _Shape(profile, counts)
    kappa = shape.kappa_for_20(0.0, 0.0)
    if kappa is None:
        raise ProfileError(
            f"published.observed_20 {profile.published.observed_20}: no Beta with these pass@1 means "
            "reaches it (infeasible)"
        )
    method, lambda0, lambda1 = "beta", 0.0, 0.0
    target = profile.published.pass20
    if target is not None:
        plain = shape.figures(kappa, 0.0, 0.0).pass20
        if abs(plain - target) > TOLERANCE_PP:
            method = "beta+mass0" if plain > target else "beta+mass1"
            kappa, lambda0, lambda1 = _solve_mass(shape, target, mass_at_zero=plain > target)
    mixtures = shape.mixtures(kappa, lambda0, lambda1)
    fig = expected_figures(mixtures, counts)
    return Fit(
        method=method,  # type: ignore[arg-type]
        kappa=kappa,
        lambda0=lambda0,
        lambda1=lambda1,
        domains=mixtures,
        expected={
            "pass1": {d: round(v, 3) for d, v in fig.pass1.items()},
            "overall_pass1": round(fig.overall, 3),
            "pass20": round(fig.pass20, 3),
            "observed_20": round(fig.observed_20, 2),
        },
    )


def _solve_mass(shape: _Shape, target: float, *, mass_at_zero: bool) -> tuple[float, float, float]:
    """(κ, λ0, λ1) hitting observed 20/20 and pass@20 with one point mass."""

    def at(lam: float) -> tuple[float, float, float]:
        return (lam, 0.0, 0.0) if mass_at_zero else (0.0, lam, 0.0)

    def gap(lam: float) -> float | None:
        l0, l1, _ = at(lam)
        kappa = shape.kappa_for_20(l0, l1)
        if kappa is None:
            return None
        return shape.figures(kappa, l0, l1).pass20 - target

    grid = np.linspace(0.0, 0.995, 200)
    previous: tuple[float, float] | None = None
    for lam in grid:
        g = gap(float(lam))
        if g is None:
            continue
        if previous is not None and previous[1] * g <= 0:
            root = brentq(lambda x: gap(x) or 0.0, previous[0], float(lam), xtol=1e-10)
            l0, l1, _ = at(float(root))
            kappa = shape.kappa_for_20(l0, l1)
            assert kappa is not None
            return kappa, l0, l1
        previous = (float(lam), g)
    where = "0" if mass_at_zero else "1"
    raise ProfileError(
        f"published.pass20 {target} with observed_20 {shape.target20:.0f}: no Beta with a point mass at "
        f"{where} reaches both (infeasible)"
    )


# -- drawing ---------------------------------------------------------------------------------------
def _rng(seed: int, *parts: str) -> np.random.Generator:
    digest = hashlib.sha256(":".join([str(seed), *parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def quantile(mix: Mixture, u: np.ndarray) -> np.ndarray:
    """The mixture's quantile function at ``u`` ∈ [0, 1)."""
    rest = 1 - mix.w0 - mix.w1
    out = np.zeros_like(u)
    out[u >= 1 - mix.w1] = 1.0
    middle = (u >= mix.w0) & (u < 1 - mix.w1)
    if rest > 0 and middle.any():
        out[middle] = beta_dist.ppf((u[middle] - mix.w0) / rest, mix.alpha, mix.beta)
    return out


def draw_propensities(fit: Fit, uids_by_domain: Mapping[str, Sequence[str]], seed: int) -> dict[str, float]:
    """Every task's propensity for campaign ``seed``: stratified per domain (module docstring)."""
    out: dict[str, float] = {}
    for domain, uids in uids_by_domain.items():
        if domain not in fit.domains:
            raise ProfileError(f"the profile's fit has no distribution for the domain {domain}")
        ordered = sorted(uids)
        rng = _rng(seed, "propensity", domain)
        n = len(ordered)
        slots = rng.permutation(n)
        u = (slots + rng.random(n)) / n
        for uid, p in zip(ordered, quantile(fit.domains[domain], u), strict=True):
            out[uid] = float(p)
    return out


def simulate_off(
    fit: Fit, uids_by_domain: Mapping[str, Sequence[str]], seed: int, repeats: int = REPEATS
) -> Figures:
    """The ``off`` arm's figures under the propensity/outcome model alone: propensities drawn for
    ``seed``, each task's ``repeats`` attempts Bernoulli(p)."""
    props = draw_propensities(fit, uids_by_domain, seed)
    rng = _rng(seed, "attempts")
    pass1: dict[str, float] = {}
    passes = total = never = always = 0
    for domain, uids in uids_by_domain.items():
        p = np.array([props[u] for u in sorted(uids)])
        wins = rng.binomial(repeats, p)
        pass1[domain] = 100 * wins.sum() / (repeats * len(uids))
        passes += int(wins.sum())
        total += len(uids)
        never += int((wins == 0).sum())
        always += int((wins == repeats).sum())
    return Figures(pass1, 100 * passes / (repeats * total), 100 * (1 - never / total), float(always))


def calibrate(profile: Profile, counts: Mapping[str, int]) -> Profile:
    """``profile`` with its ``fit`` (re)computed."""
    return profile.model_copy(update={"fit": fit_profile(profile, counts)})


def comparison(profile: Profile, reproduced: Figures, label: str) -> list[tuple[str, str, str, str]]:
    """Rows (figure, published, expected, ``label``) for the published-vs-reproduced table."""
    assert profile.fit is not None
    pub, exp = profile.published, profile.fit.expected
    rows = [
        (f"pass@1 {d}", f"{pub.pass1[d]:.2f}", f"{exp['pass1'][d]:.2f}", f"{reproduced.pass1[d]:.2f}")
        for d in DOMAIN_ORDER
    ]
    rows.append(
        (
            "pass@1 overall",
            f"{pub.overall_pass1:.2f}",
            f"{exp['overall_pass1']:.2f}",
            f"{reproduced.overall:.2f}",
        )
    )
    rows.append(
        (
            "pass@20",
            "—" if pub.pass20 is None else f"{pub.pass20:.2f}",
            f"{exp['pass20']:.2f}",
            f"{reproduced.pass20:.2f}",
        )
    )
    rows.append(
        ("observed 20/20", str(pub.observed_20), f"{exp['observed_20']:.1f}", f"{reproduced.observed_20:.0f}")
    )
    return rows
