"""Clopper-Pearson bounds: the defining tail equations (scipy's binomial), coverage on Monte Carlo
draws where the probability is known, the union (Bonferroni) level, and the argument checks."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import binom

from robust_train.certify import check_alpha, clopper_pearson, simultaneous_bounds


@pytest.mark.parametrize("n", [1, 7, 100, 1000])
def test_bounds_solve_the_binomial_tail_equations(n) -> None:
    counts = torch.unique(torch.tensor([0, 1, n // 3, n // 2, n - 1, n]).clamp(0, n))
    alpha = 0.05
    lower, upper = clopper_pearson(counts, n, alpha)
    for c, lo, hi in zip(counts.tolist(), lower.tolist(), upper.tolist(), strict=True):
        # P(X >= c | p = lower) = alpha / 2 and P(X <= c | p = upper) = alpha / 2
        if c > 0:
            assert binom.sf(c - 1, n, lo) == pytest.approx(alpha / 2, rel=1e-6)
        else:
            assert lo == 0.0
        if c < n:
            assert binom.cdf(c, n, hi) == pytest.approx(alpha / 2, rel=1e-6)
        else:
            assert hi == 1.0
        assert 0 <= lo <= c / n <= hi <= 1


def test_coverage_on_monte_carlo_draws_with_known_probability() -> None:
    gen = torch.Generator().manual_seed(0)
    alpha, n, draws = 0.1, 40, 4000
    for p in (0.02, 0.3, 0.5, 0.93):
        counts = torch.binomial(torch.full((draws,), float(n)), torch.full((draws,), p), gen)
        lower, upper = clopper_pearson(counts.long(), n, alpha)
        covered = ((lower <= p) & (p <= upper)).double().mean().item()
        assert covered >= 1 - alpha - 0.01, (p, covered)  # exact: never below 1 - alpha
        # the plain normal (Wald) interval of the same level misses far more often at p = 0.02
        if p == 0.02:
            phat = counts / n
            half = 1.645 * (phat * (1 - phat) / n).sqrt()
            wald = ((phat - half <= p) & (p <= phat + half)).double().mean().item()
            assert wald < 1 - alpha - 0.1, wald


def test_simultaneous_bounds_hold_for_all_pixels_at_once() -> None:
    # 16 pixels with known probabilities, counts drawn jointly; the union bound's level
    gen = torch.Generator().manual_seed(1)
    p = torch.linspace(0.0, 1.0, 16).view(1, 4, 4)
    alpha, n, draws = 0.2, 30, 2000
    counts = torch.binomial(torch.full((draws, 4, 4), float(n)), p.expand(draws, 4, 4), gen)
    lower, upper = simultaneous_bounds(counts.long(), n, alpha)
    all_covered = ((lower <= p) & (p <= upper)).flatten(1).all(1).double().mean().item()
    assert all_covered >= 1 - alpha
    single = clopper_pearson(counts.long(), n, alpha / 16)
    assert torch.equal(single[0], lower) and torch.equal(single[1], upper)


def test_checks_name_the_argument() -> None:
    with pytest.raises(ValueError, match="`alpha` must lie strictly between 0 and 1"):
        check_alpha(1.5)
    with pytest.raises(ValueError, match="`alpha` must be > 0"):
        check_alpha(0.0)
    with pytest.raises(ValueError, match=r"`counts` must lie in \[0, n\] = \[0, 5\]"):
        clopper_pearson(torch.tensor([6]), 5, 0.05)
    with pytest.raises(TypeError, match="`counts` must be an integer tensor"):
        clopper_pearson(torch.tensor([0.5]), 5, 0.05)
    with pytest.raises(ValueError, match=r"`counts` must have shape \(B, H, W\)"):
        simultaneous_bounds(torch.tensor([1, 2]), 5, 0.05)
