"""The benchmark's estimators, as pure functions of counts (docs/architecture.md#metrics,
docs/benchmark.md#estimators).

Conventions shared by every function here:

- ``n`` is the number of recorded attempts of one task and ``c`` how many passed. ``tb agg`` counts a
  system error as an attempt that failed, so callers pass ``n`` including errors; ``tb sbs`` (and
  :func:`prob_cand_better`'s callers in :mod:`benchmark.campaign.sbs`) leave errors out.
- Counts are checked: ``0 <= c <= n`` and, where an estimator needs it, ``1 <= k <= n``. A violation is a
  :class:`ValueError` naming the arguments, never a silently clamped number.
- Nothing here is random: the Beta-posterior comparison is a fixed Gauss–Legendre rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy import special, stats

__all__ = [
    "cost_per_dependable_task",
    "cost_per_successful_attempt",
    "jeffreys_interval",
    "observed_k_of_k",
    "pass_at_k",
    "pass_hat_k",
    "pass_power_k",
    "prob_cand_better",
]


def _check_counts(n: int, c: int) -> None:
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n, got n={n} c={c}")


def _check_k(n: int, k: int) -> None:
    if k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= n, got n={n} k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: the chance that at least one of ``k`` attempts drawn without
    replacement from the ``n`` recorded ones passed, ``1 − C(n−c, k) / C(n, k)``; 1.0 when ``n − c < k``
    (every draw of ``k`` holds a pass). Exact: binomials are integers, divided once.

    ``tb agg`` computes the same number as ``1 − Π_{i=n−c+1..n}(1 − k/i)``.
    """
    _check_counts(n, c)
    _check_k(n, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_power_k(n: int, c: int, k: int) -> float:
    """pass^k as ``tb agg`` prints it: the plug-in ``(c/n)^k`` (0.0 when ``n == 0``).

    Deliberately biased (``tb agg``'s docstring): it stays non-zero when ``0 < c < k``, where the
    unbiased :func:`pass_hat_k` is 0. ``k`` may exceed ``n``.
    """
    _check_counts(n, c)
    if k < 1:
        raise ValueError(f"need k >= 1, got k={k}")
    if n == 0:
        return 0.0
    return (c / n) ** k


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k as τ-bench defines it: ``C(c, k) / C(n, k)``, the chance that ``k`` attempts drawn without
    replacement from the ``n`` recorded ones all passed (0.0 whenever ``c < k``). Needs ``k <= n``."""
    _check_counts(n, c)
    _check_k(n, k)
    return math.comb(c, k) / math.comb(n, k)


def jeffreys_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Equal-tailed Jeffreys interval for a pass rate: the ``(1 − level)/2`` and ``(1 + level)/2``
    quantiles of Beta(0.5 + c, 0.5 + n − c), as ``tb agg`` computes its 95% CI (no end-point
    adjustment at ``c = 0`` or ``c = n``). ``n == 0`` gives the prior's interval."""
    _check_counts(n, successes)
    if not 0.0 < level < 1.0:
        raise ValueError(f"need 0 < level < 1, got {level}")
    a, b = 0.5 + successes, 0.5 + n - successes
    tail = (1.0 - level) / 2.0
    low, high = stats.beta.ppf([tail, 1.0 - tail], a, b)
    return float(low), float(high)


def observed_k_of_k(tasks: Iterable[tuple[int, int]]) -> int:
    """How many tasks passed every one of their recorded attempts: the literal count of ``(n, c)``
    pairs with ``n >= 1`` and ``c == n`` ("observed 20/20" when every task has ``n = 20``)."""
    count = 0
    for n, c in tasks:
        _check_counts(n, c)
        count += n >= 1 and c == n
    return count


def cost_per_successful_attempt(total_cost: float, attempts: int, pass1: float) -> float | None:
    """What one passing attempt costs: ``total_cost`` (of ``attempts`` attempts) ÷ the expected number of
    successes ``attempts × pass1``. The seed's example: one pass over 507 tasks cost $43.49 at
    pass@1 0.6536, so $43.49 ÷ (507 × 0.6536) = $0.131. None when no success is expected."""
    if attempts < 1:
        raise ValueError(f"need attempts >= 1, got {attempts}")
    if not 0.0 <= pass1 <= 1.0:
        raise ValueError(f"need 0 <= pass1 <= 1, got {pass1}")
    if total_cost < 0:
        raise ValueError(f"need total_cost >= 0, got {total_cost}")
    expected = attempts * pass1
    return total_cost / expected if expected > 0 else None


def cost_per_dependable_task(total_cost: float, dependable_tasks: int) -> float | None:
    """What one dependable task costs: ``total_cost`` (of every recorded run, e.g. 20 runs) ÷ the tasks
    that passed all of them. The seed's example: 20 runs at $86.03 each, 231 tasks at 20/20, so
    20 × $86.03 ÷ 231 = $7.45. None when no task is dependable."""
    if dependable_tasks < 0:
        raise ValueError(f"need dependable_tasks >= 0, got {dependable_tasks}")
    if total_cost < 0:
        raise ValueError(f"need total_cost >= 0, got {total_cost}")
    return total_cost / dependable_tasks if dependable_tasks else None


_PANELS = 16
_NODES_PER_PANEL = 64


def _quadrature() -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss–Legendre nodes and weights on θ ∈ [0, π/2]."""
    x, w = np.polynomial.legendre.leggauss(_NODES_PER_PANEL)
    edges = np.linspace(0.0, math.pi / 2.0, _PANELS + 1)
    half = (edges[1:] - edges[:-1]) / 2.0
    mid = (edges[1:] + edges[:-1]) / 2.0
    nodes = (mid[:, None] + half[:, None] * x[None, :]).ravel()
    weights = (half[:, None] * w[None, :]).ravel()
    return nodes, weights


_THETA, _WEIGHTS = _quadrature()


def prob_cand_better(c_base: int, n_base: int, c_cand: int, n_cand: int) -> float:
    """P(p_cand > p_base) when each side's pass rate has the Jeffreys posterior Beta(0.5 + c, 0.5 + n − c)
    and the two are independent: ``∫ f_cand(x) F_base(x) dx`` over [0, 1].

    Deterministic: with ``x = sin²θ`` the integrand ``2 sinθ cosθ f_cand(sin²θ) F_base(sin²θ)`` has no
    end-point singularity (the half-integer Beta exponents become integer powers of sinθ and cosθ), so a
    composite Gauss–Legendre rule (16 panels × 64 nodes on [0, π/2]) converges to ~1e-12 for the
    counts a campaign produces. ``tb sbs`` uses a 200-point rule on [0, 1] directly. Equal counts give
    exactly 0.5 up to rounding.
    """
    _check_counts(n_base, c_base)
    _check_counts(n_cand, c_cand)
    a_b, b_b = 0.5 + c_base, 0.5 + n_base - c_base
    a_c, b_c = 0.5 + c_cand, 0.5 + n_cand - c_cand
    s, co = np.sin(_THETA), np.cos(_THETA)
    x = s * s
    # f_cand(x) dx/dθ with the x^(a−1)(1−x)^(b−1) factor folded into powers of sinθ and cosθ.
    log_norm = special.betaln(a_c, b_c)
    density = 2.0 * np.exp((2.0 * a_c - 1.0) * np.log(s) + (2.0 * b_c - 1.0) * np.log(co) - log_norm)
    cdf_base = special.betainc(a_b, b_b, x)
    value = float(np.dot(_WEIGHTS, density * cdf_base))
    return min(max(value, 0.0), 1.0)
