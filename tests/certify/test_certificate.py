"""certify_explanations on cases whose exact answer is known: a linear model (its saliency map
never moves), and a two-pixel explainer whose smoothed map is Phi((x1 - x2) / (sigma sqrt 2)) and
whose exact certified radius is the distance to the line x1 = x2; the bound tightens with n and
its failure rate stays below alpha on repeated draws."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import norm

from robust_train.certify import certify_explanations, sparsified_counts
from robust_train.explain import saliency
from tests.support.helpers import LinearModel, TinyCNN


def shifted(model, inputs, target, *, create_graph=False):
    """An explainer whose map is the image plus 10 (positive): pixel 1 is the top-1 of a noisy
    copy exactly when x1 + d1 > x2 + d2, so p_1(x) = Phi((x1 - x2) / (sigma * sqrt(2)))."""
    return inputs + 10.0


def _pair(batch: int, x1: float = 0.6, x2: float = 0.4) -> torch.Tensor:
    return torch.tensor([x1, x2]).view(1, 1, 1, 2).repeat(batch, 1, 1, 1)


ZERO = torch.zeros(1, dtype=torch.long)


def test_linear_model_certificate_has_its_closed_form() -> None:
    model = LinearModel().eval()  # saliency = W[target]: the same top-kappa set under any noise
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([0, 3, 7])
    sigma, n, alpha, k = 0.2, 400, 0.05, 8
    cert = certify_explanations(
        model, x, target, sigma=sigma, n_samples=n, alpha=alpha, k=k, seed=0, radii=[0.0, 0.1]
    )
    exact = saliency(model, x, target).abs().sum(1)
    assert torch.equal(cert.reference, exact >= exact.flatten(1).topk(k).values[:, -1:, None])
    assert torch.equal(cert.probability, cert.reference.double())
    # counts n on S, 0 elsewhere: lower = (a / 2)^(1/n), upper = 1 - lower, a = alpha / 64, so
    # every pixel of S is certified up to R = sigma / 2 * (z(lower) + z(lower)) = sigma z(lower)
    expected = sigma * norm.ppf((alpha / 64 / 2) ** (1 / n))
    torch.testing.assert_close(
        cert.overlap_radii, torch.full((3, k), expected, dtype=torch.float64)
    )
    torch.testing.assert_close(cert.pixel_radius[cert.reference].max().item(), expected)
    assert cert.overlap_at(expected * 0.999).tolist() == [1.0] * 3
    assert cert.overlap_at(expected).tolist() == [0.0] * 3  # all of S ties with 56 outsiders
    assert cert.certified_overlap[:, 0].tolist() == [1.0] * 3


def test_two_pixel_radius_is_below_the_exact_one_and_tightens_with_n() -> None:
    sigma = 0.1
    true_radius = 0.2 / math.sqrt(2)  # distance from (0.6, 0.4) to the line x1 = x2
    found = []
    for n in (100, 1000, 100_000):
        cert = certify_explanations(
            torch.nn.Identity(), _pair(1), ZERO, explainer=shifted, sigma=sigma, n_samples=n,
            k=1, seed=n,
        )  # fmt: skip
        assert cert.reference[0, 0, 0]  # pixel 1 is the top-1 at x
        found.append(cert.certified_radius(1.0).item())
    assert found == sorted(found) and found[0] > 0, found
    assert found[-1] <= true_radius and found[-1] > 0.95 * true_radius, (found, true_radius)


def test_failure_rate_stays_below_alpha_on_repeated_draws() -> None:
    sigma, n, alpha, draws = 0.1, 60, 0.2, 400
    p1 = norm.cdf(0.2 / (sigma * math.sqrt(2)))
    true_radius = 0.2 / math.sqrt(2)
    cert = certify_explanations(
        torch.nn.Identity(), _pair(draws), ZERO.repeat(draws), explainer=shifted, sigma=sigma,
        n_samples=n, k=1, alpha=alpha, seed=0,
    )  # fmt: skip
    p = torch.tensor([p1, 1 - p1], dtype=torch.float64).view(1, 1, 2)
    covered = ((cert.lower <= p) & (p <= cert.upper)).flatten(1).all(1)
    assert covered.double().mean() >= 1 - alpha
    wrong = ~cert.reference[:, 0, 0] & (cert.pixel_radius.flatten(1).amax(1) > 0)
    overclaimed = (cert.certified_radius(1.0) > true_radius) | wrong
    assert overclaimed.double().mean() <= alpha
    assert (cert.certified_radius(1.0) > 0).double().mean() > 0.5  # and it certifies something


def test_bound_tightens_as_n_grows_on_a_relu_network() -> None:
    model = TinyCNN(seed=2).eval()
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    target = model(x).argmax(1)
    means = [
        certify_explanations(model, x, target, sigma=0.1, n_samples=n, k=8, seed=1, radii=[0.02])
        .certified_overlap.mean()
        .item()
        for n in (50, 2000)
    ]
    assert means[0] < means[1], means


def test_counts_are_seeded_and_chunking_keeps_their_totals() -> None:
    model = TinyCNN().eval()
    x = torch.rand(3, 1, 8, 8)
    t = model(x).argmax(1)
    kw = dict(explain=saliency, sigma=0.1, n_samples=20, kappa=5)
    a = sparsified_counts(model, x, t, seed=3, internal_batch_size=7, **kw)
    b = sparsified_counts(model, x, t, seed=3, internal_batch_size=7, **kw)
    c = sparsified_counts(model, x, t, seed=3, internal_batch_size=60, **kw)
    assert torch.equal(a, b) and a.dtype == torch.long
    assert a.sum((1, 2)).tolist() == c.sum((1, 2)).tolist() == [100] * 3
    model.train()
    sparsified_counts(model, x, t, seed=0, **kw)
    assert model.training  # eval inside, the flag restored


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"sigma": 0.0}, ValueError, "`sigma` must be > 0"),
        ({"sigma": 2.0}, ValueError, "`sigma` must be <= 1"),
        ({"sigma": float("nan")}, ValueError, "`sigma` must be finite"),
        ({"n_samples": 0}, ValueError, "`n_samples` must be > 0"),
        ({"alpha": 1.0}, ValueError, "`alpha` must lie strictly between 0 and 1"),
        ({"k": 65}, ValueError, r"`k` must be an int in \[1, H\*W\] = \[1, 64\]"),
        ({"kappa": 0}, ValueError, "`kappa` must be (> 0|an int)"),
        ({"radii": [-0.1]}, ValueError, "`radii` must be >= 0"),
        ({"radii": [9.0]}, ValueError, r"`radii` 9.0 exceeds sqrt\(64\) = 8"),
        ({"radii": []}, ValueError, "`radii` is empty"),
        ({"explainer": "nope"}, ValueError, "Unknown `explainer` 'nope'"),
        ({"internal_batch_size": 0}, ValueError, "`internal_batch_size` must be > 0"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs, error, match) -> None:
    model = TinyCNN().eval()
    x = torch.rand(2, 1, 8, 8)
    with pytest.raises(error, match=match):
        certify_explanations(model, x, torch.tensor([0, 1]), **{"n_samples": 5, **kwargs})
