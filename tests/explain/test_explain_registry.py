"""get_explainer, EXPLAINERS, is_differentiable."""

from __future__ import annotations

import functools
import pickle

import pytest
import torch

import robust_train.explain as explain
from robust_train.explain import (
    EXPLAINERS,
    get_explainer,
    input_x_gradient,
    integrated_gradients,
    is_differentiable,
    meaningful_perturbation,
    saliency,
    smoothgrad,
)
from tests.support.helpers import SmoothMLP


def test_every_name_resolves_to_its_function():
    # every explainer file, in registration order (robust_train/explain/__init__.py)
    assert tuple(EXPLAINERS) == (
        "saliency",
        "input_x_gradient",
        "integrated_gradients",
        "smoothgrad",
        "meaningful_perturbation",
        "grad_cam",
        "lrp",
        "deeplift",
        "input_reference",
    )
    for name in EXPLAINERS:
        assert get_explainer(name) is getattr(explain, name)
        assert get_explainer(name).__name__ == name


def test_bound_arguments_are_used_and_call_arguments_override_them():
    model, x, t = SmoothMLP(), torch.rand(2, 1, 8, 8), torch.tensor([0, 4])
    ig = get_explainer("integrated_gradients", n_steps=3, method="riemann_middle")
    assert ig.__name__ == "integrated_gradients"
    assert repr(ig) == "integrated_gradients(n_steps=3, method='riemann_middle')"
    torch.testing.assert_close(
        ig(model, x, t), integrated_gradients(model, x, t, n_steps=3, method="riemann_middle")
    )
    torch.testing.assert_close(
        ig(model, x, t, n_steps=5),
        integrated_gradients(model, x, t, n_steps=5, method="riemann_middle"),
    )
    assert not torch.allclose(ig(model, x, t), ig(model, x, t, n_steps=5))


def test_smoothgrad_explainer_given_by_name_is_resolved():
    model, x, t = SmoothMLP(), torch.rand(2, 1, 8, 8), torch.tensor([0, 4])
    sg = get_explainer("smoothgrad", explainer="input_x_gradient", n_samples=3, seed=0)
    assert sg.keywords["explainer"] is input_x_gradient
    torch.testing.assert_close(
        sg(model, x, t), smoothgrad(model, x, t, explainer=input_x_gradient, n_samples=3, seed=0)
    )


def test_callables_are_accepted():
    def custom(model, inputs, target, *, create_graph=False):
        return saliency(model, inputs, target, create_graph=create_graph)

    assert get_explainer(custom) is custom
    bound = get_explainer(smoothgrad, n_samples=2)
    assert bound.__name__ == "smoothgrad" and bound.keywords == {"n_samples": 2}


def test_unknown_names_and_keywords_are_reported():
    with pytest.raises(ValueError, match="'gradcam'.*saliency.*meaningful_perturbation"):
        get_explainer("gradcam")
    with pytest.raises(ValueError, match="Unknown explainer"):
        get_explainer(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="n_step.*n_steps"):
        get_explainer("integrated_gradients", n_step=3)
    with pytest.raises(ValueError, match="'gradcam'"):
        get_explainer("smoothgrad", explainer="gradcam")


def test_is_differentiable():
    differentiable = [is_differentiable(name) for name in EXPLAINERS]
    assert differentiable == [True, True, True, True, False, True, True, True, True]
    assert is_differentiable(get_explainer("smoothgrad", n_samples=2))
    assert not is_differentiable(get_explainer("smoothgrad", explainer="meaningful_perturbation"))
    assert not is_differentiable(get_explainer("meaningful_perturbation", n_iter=3))
    assert not is_differentiable(functools.partial(smoothgrad, explainer=meaningful_perturbation))
    assert not is_differentiable(functools.partial(meaningful_perturbation, n_iter=3))
    assert is_differentiable(functools.partial(integrated_gradients, n_steps=3))
    assert is_differentiable(lambda model, x, t, create_graph=False: x)


def test_bound_explainers_pickle():
    bound = get_explainer("smoothgrad", explainer="saliency", n_samples=3)
    clone = pickle.loads(pickle.dumps(bound))
    assert repr(clone) == repr(bound) == "smoothgrad(explainer=saliency, n_samples=3)"
