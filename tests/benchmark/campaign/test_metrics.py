"""The estimators against hand-computed values, brute-force enumeration and independent integrals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from benchmark.campaign.metrics import (
    cost_per_dependable_task,
    cost_per_successful_attempt,
    jeffreys_interval,
    observed_k_of_k,
    pass_at_k,
    pass_hat_k,
    pass_power_k,
    prob_cand_better,
)


def test_harness_verified_examples() -> None:
    # ThinkingBox's example (docs/benchmark.md#estimators): n=20 c=10 k=5 → pass@k 0.98375,
    # plug-in pass^k 0.03125, unbiased 0.01625.
    assert pass_at_k(20, 10, 5) == pytest.approx(0.98375, abs=5e-6)
    assert pass_power_k(20, 10, 5) == 0.03125
    assert pass_hat_k(20, 10, 5) == 252 / 15504 == pytest.approx(0.016254, abs=5e-7)
    assert pass_at_k(20, 10, 5) == 1 - 252 / 15504
    # n=20 c=19 k=20 → 1.0, 0.35849, 0.
    assert pass_at_k(20, 19, 20) == 1.0
    assert pass_power_k(20, 19, 20) == pytest.approx(0.35849, abs=5e-6)
    assert pass_hat_k(20, 19, 20) == 0.0


@pytest.mark.parametrize("n", range(1, 7))
def test_small_matrices_match_enumeration_of_k_subsets(n: int) -> None:
    for c in range(n + 1):
        attempts = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(attempts, k))
            assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-12)
            assert pass_hat_k(n, c, k) == pytest.approx(
                sum(all(s) for s in subsets) / len(subsets), abs=1e-12
            )
            assert pass_power_k(n, c, k) == pytest.approx((c / n) ** k, abs=1e-15)


def test_pass_at_k_is_one_when_every_draw_holds_a_pass() -> None:
    assert pass_at_k(20, 1, 20) == 1.0  # n = k = 20: 1 iff c ≥ 1
    assert pass_at_k(20, 0, 20) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n − c = 2 < k


def test_edges_and_bad_counts() -> None:
    assert pass_power_k(0, 0, 5) == 0.0
    assert pass_power_k(3, 3, 10) == 1.0  # plug-in allows k > n
    for bad in ((5, 6, 1), (-1, 0, 1)):
        with pytest.raises(ValueError, match="0 <= c <= n"):
            pass_at_k(*bad)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(5, 2, 6)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_hat_k(5, 2, 0)
    with pytest.raises(ValueError, match="k >= 1"):
        pass_power_k(5, 2, 0)


def test_jeffreys_interval_is_the_beta_quantiles() -> None:
    low, high = jeffreys_interval(10, 20)
    assert low == pytest.approx(special.betaincinv(10.5, 10.5, 0.025), abs=1e-12)
    assert high == pytest.approx(special.betaincinv(10.5, 10.5, 0.975), abs=1e-12)
    assert low + high == pytest.approx(1.0, abs=1e-12)  # symmetric posterior
    assert (round(low, 4), round(high, 4)) == (0.2934, 0.7066)
    low0, high0 = jeffreys_interval(0, 10)
    assert 0 < low0 < 1e-4 and high0 == pytest.approx(stats.beta.ppf(0.975, 0.5, 10.5))
    l90, h90 = jeffreys_interval(10, 20, level=0.9)
    assert low < l90 < h90 < high
    with pytest.raises(ValueError, match="level"):
        jeffreys_interval(1, 2, level=1.0)


def test_observed_k_of_k_counts_tasks_passing_every_attempt() -> None:
    assert observed_k_of_k([(20, 20), (20, 19), (20, 0), (5, 5), (0, 0)]) == 2
    assert observed_k_of_k([]) == 0


def test_costs_match_the_seed_examples_to_the_cent() -> None:
    per_success = cost_per_successful_attempt(43.49, 507, 0.6536)
    assert per_success is not None and round(per_success, 3) == 0.131
    assert per_success == pytest.approx(43.49 / (507 * 0.6536))
    per_task = cost_per_dependable_task(20 * 86.03, 231)
    assert per_task is not None and round(per_task, 2) == 7.45
    assert cost_per_successful_attempt(10.0, 5, 0.0) is None
    assert cost_per_dependable_task(10.0, 0) is None
    with pytest.raises(ValueError, match="attempts"):
        cost_per_successful_attempt(1.0, 0, 0.5)
    with pytest.raises(ValueError, match="pass1"):
        cost_per_successful_attempt(1.0, 5, 1.5)


def _stieltjes(c_base: int, n_base: int, c_cand: int, n_cand: int, points: int = 400_001) -> float:
    """Independent check: Σ F_base(mid) ΔF_cand over a fine grid of [0, 1] (a Riemann–Stieltjes sum)."""
    x = np.linspace(0.0, 1.0, points)
    f_cand = stats.beta.cdf(x, 0.5 + c_cand, 0.5 + n_cand - c_cand)
    mid = (x[1:] + x[:-1]) / 2
    return float(np.sum(stats.beta.cdf(mid, 0.5 + c_base, 0.5 + n_base - c_base) * np.diff(f_cand)))


def test_prob_cand_better_toy_cases() -> None:
    for c, n in ((0, 0), (3, 10), (10, 20), (20, 20)):
        assert prob_cand_better(c, n, c, n) == pytest.approx(0.5, abs=1e-12)
    assert prob_cand_better(0, 10, 10, 10) > 0.9999
    assert prob_cand_better(10, 10, 0, 10) < 1e-4
    assert prob_cand_better(5, 20, 12, 20) + prob_cand_better(12, 20, 5, 20) == pytest.approx(1.0, abs=1e-12)
    assert prob_cand_better(2, 10, 3, 10) < prob_cand_better(2, 10, 5, 10) < prob_cand_better(2, 10, 8, 10)


@pytest.mark.parametrize("counts", [(5, 20, 12, 20), (0, 1, 1, 1), (2, 7, 5, 9), (130, 500, 100, 500)])
def test_prob_cand_better_matches_an_independent_integral(counts: tuple[int, int, int, int]) -> None:
    assert prob_cand_better(*counts) == pytest.approx(_stieltjes(*counts), abs=1e-6)


def test_prob_cand_better_matches_seeded_sampling() -> None:
    rng = np.random.default_rng(12345)
    base = rng.beta(0.5 + 5, 0.5 + 15, 400_000)
    cand = rng.beta(0.5 + 12, 0.5 + 8, 400_000)
    assert prob_cand_better(5, 20, 12, 20) == pytest.approx(float(np.mean(cand > base)), abs=2e-3)
    assert math.isfinite(prob_cand_better(0, 1000, 1000, 1000))
