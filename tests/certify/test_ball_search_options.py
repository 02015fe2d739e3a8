"""Both searches of the ball take one declared option set (`BallSearchOptions`)."""

from __future__ import annotations

import inspect

import pytest
import torch

from robust_train.certify.attack import BallSearchOptions, attack_certificate, random_search

SHARED = {"radius": inspect.Parameter.empty, "measure_samples": None, "seed": 0,
          "internal_batch_size": None}  # fmt: skip


@pytest.mark.parametrize("search", [attack_certificate, random_search])
def test_signature_lists_every_search_option_keyword_only(search):
    params = inspect.signature(search).parameters
    for name, default in SHARED.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].default is default


@pytest.mark.parametrize("search", [attack_certificate, random_search])
def test_missing_radius_and_unknown_options_fail_before_any_work(search):
    net, x = torch.nn.Flatten(), torch.rand(2, 1, 4, 4)
    with pytest.raises(TypeError, match=f"{search.__name__} missing required .*'radius'"):
        search(net, x, "not read")
    with pytest.raises(TypeError, match="did you mean 'measure_samples'"):
        search(net, x, "not read", radius=0.1, measure_sample=5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"radius": -0.5}, "`radius` must be >= 0, got -0.5"),
        ({"measure_samples": 0}, "`measure_samples` must be > 0"),
        ({"seed": -1}, "`seed` must be >= 0, got -1"),
        ({"internal_batch_size": 2.5}, "`internal_batch_size`"),
    ],
)
def test_each_field_is_checked_where_it_is_declared(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        BallSearchOptions(**{"radius": 0.1, **kwargs})
