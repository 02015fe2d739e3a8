"""Confidence interval of a mean over images, against scipy.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from robust_train.metrics.functional import interval_from_moments, mean_confidence_interval


@pytest.mark.parametrize(("n", "level"), [(2, 0.95), (7, 0.9), (400, 0.99)])
def test_t_and_normal_intervals_match_scipy(n, level):
    values = torch.randn(n, generator=torch.Generator().manual_seed(n), dtype=torch.float64) + 0.3
    v = values.numpy()
    sem = scipy.stats.sem(v)
    t_low, t_high = scipy.stats.t.interval(level, n - 1, loc=v.mean(), scale=sem)
    z_low, z_high = scipy.stats.norm.interval(level, loc=v.mean(), scale=sem)
    ci = mean_confidence_interval(values, level=level)
    np.testing.assert_allclose([float(c) for c in ci], [v.mean(), t_low, t_high], rtol=1e-9)
    ci = mean_confidence_interval(values, level=level, method="normal")
    np.testing.assert_allclose([float(c) for c in ci], [v.mean(), z_low, z_high], rtol=1e-7)


def test_moments_form_equals_values_form():
    values = torch.rand(50, generator=torch.Generator().manual_seed(0))
    a = mean_confidence_interval(values)
    b = interval_from_moments(50, values.sum(), (values**2).sum())
    for x, y in zip(a, b, strict=True):
        assert math.isclose(float(x), float(y), rel_tol=1e-5)


def test_single_value_has_undefined_bounds():
    ci = mean_confidence_interval(torch.tensor([0.4]))
    assert math.isclose(float(ci.mean), 0.4, rel_tol=1e-6)
    assert math.isnan(float(ci.low)) and math.isnan(float(ci.high))


@pytest.mark.parametrize(
    ("values", "kwargs", "match"),
    [
        (torch.tensor([]), {}, "empty"),
        (torch.tensor([1.0, float("nan")]), {}, "non-finite"),
        (torch.rand(2, 3), {}, "1-d"),
        (torch.rand(3), {"level": 1.0}, "level"),
        (torch.rand(3), {"method": "bootstrap"}, "method"),
    ],
)
def test_bad_input(values, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mean_confidence_interval(values, **kwargs)
