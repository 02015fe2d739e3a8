"""The shared runtime plumbing (robust_train.core.runtime) and the one explainer resolver."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from robust_train.core.runtime import (
    check_optional_positive,
    eval_mode,
    make_generator,
    predict,
    require_grad_mode,
    row_chunks,
)
from robust_train.explain import (
    Explainer,
    get_explainer,
    meaningful_perturbation,
    resolve_explainer,
    saliency,
    smoothgrad,
)


def test_eval_mode_restores_every_module_flag_even_on_error() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.Dropout())
    net[1].eval()  # frozen BatchNorm inside a training model
    with pytest.raises(KeyError), eval_mode(net):
        assert not any(m.training for m in net.modules())
        raise KeyError("boom")
    assert [m.training for m in net.modules()] == [True, True, False, True]


def test_require_grad_mode_names_the_caller() -> None:
    require_grad_mode("x")
    with torch.no_grad():
        require_grad_mode("x")  # enable_grad can undo no_grad: not refused
    with torch.inference_mode(), pytest.raises(RuntimeError, match="`my_fn` needs gradients"):
        require_grad_mode("my_fn")


@pytest.mark.parametrize(
    "n, size, expected",
    [
        (5, 2, [(0, 2), (2, 4), (4, 5)]),
        (5, None, [(0, 5)]),
        (0, None, []),
        (3, 7, [(0, 3)]),
    ],
)
def test_row_chunks(n, size, expected) -> None:
    assert list(row_chunks(n, size)) == expected


@pytest.mark.parametrize("size, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError)])
def test_row_chunks_refuses_bad_sizes(size, error) -> None:
    with pytest.raises(error, match="internal_batch_size"):
        list(row_chunks(4, size))


def test_make_generator() -> None:
    assert make_generator(None, None, "cpu") is None
    g = torch.Generator()
    assert make_generator(g, None, "cpu") is g
    a, b = make_generator(None, 5, "cpu"), make_generator(None, 5, "cpu")
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
    with pytest.raises(ValueError, match="either `generator` or `seed`"):
        make_generator(g, 1, "cpu")
    with pytest.raises(TypeError, match="`seed` must be an int"):
        make_generator(None, True, "cpu")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`generator` must be a torch.Generator"):
        make_generator(3, None, "cpu")  # type: ignore[arg-type]


def test_predict_matches_one_forward_and_keeps_no_graph() -> None:
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    x = torch.rand(7, 1, 2, 2)
    out = predict(net, x, batch_size=3)
    assert torch.equal(out, net(x).argmax(1)) and not out.requires_grad
    assert predict(net, x[:0]).shape == (0,)


def test_check_optional_positive() -> None:
    check_optional_positive(None, "eps")
    check_optional_positive(0.5, "eps")
    with pytest.raises(ValueError, match="`eps` must be > 0, got 0"):
        check_optional_positive(0, "eps")
    with pytest.raises(TypeError, match="`k` must be an int"):
        check_optional_positive(2.0, "k", integer=True)


def test_resolve_explainer_names_callables_and_errors() -> None:
    assert resolve_explainer("saliency", differentiable=True) == (saliency, "saliency")
    bound = get_explainer("smoothgrad", n_samples=2)
    assert resolve_explainer(bound, differentiable=True) == (bound, "smoothgrad")
    partial = functools.partial(smoothgrad, n_samples=2)
    assert resolve_explainer(partial, differentiable=False)[1] == "smoothgrad"
    fn, name = resolve_explainer("meaningful_perturbation", differentiable=False)
    assert fn is meaningful_perturbation and name == "meaningful_perturbation"
    with pytest.raises(ValueError, match="`explainers` 'meaningful_perturbation' is not diff"):
        resolve_explainer("meaningful_perturbation", differentiable=True, name="explainers")
    with pytest.raises(ValueError, match="not differentiable"):  # wrapped inside smoothgrad
        resolve_explainer(
            get_explainer("smoothgrad", explainer=meaningful_perturbation), differentiable=True
        )
    with pytest.raises(ValueError, match="Unknown `explainer` 'gradcam'.*saliency"):
        resolve_explainer("gradcam", differentiable=False)
    with pytest.raises(TypeError, match="`explainer` must be a name or a callable"):
        resolve_explainer(3, differentiable=False)


def test_every_registered_explainer_follows_the_protocol() -> None:
    from robust_train.explain import EXPLAINERS

    for name in EXPLAINERS:
        assert isinstance(resolve_explainer(name, differentiable=False)[0], Explainer)


def test_auto_chunk_follows_the_image_size_and_budget() -> None:
    from robust_train.core.runtime import CHUNK_ELEMENTS, auto_chunk

    cpu = CHUNK_ELEMENTS["cpu"]
    assert auto_chunk((1, 8, 8)) == cpu // 64
    assert auto_chunk((1, 28, 28)) == cpu // 784
    assert auto_chunk((1, 28, 28), create_graph=True) == cpu // 2 // 784
    assert auto_chunk((3, 224, 224)) == 4  # at least MIN_CHUNK_ROWS, never 0
    assert auto_chunk((3, 224, 224), device="cuda") == CHUNK_ELEMENTS["cuda"] // (3 * 224 * 224)
    assert auto_chunk((1, 10, 10), budget=2500) == 25
    with pytest.raises(ValueError, match="`budget` must be > 0, got 0"):
        auto_chunk((1, 2, 2), budget=0)
    with pytest.raises(ValueError, match="`row_shape` must have positive sizes"):
        auto_chunk((1, 0, 2))


def test_default_chunks_do_not_change_results() -> None:
    """The size-aware defaults equal an explicit single batch (up to float rounding)."""
    from robust_train.explain import integrated_gradients, smoothgrad
    from robust_train.metrics.functional import fidelity_curves, local_lipschitz_estimate

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1), nn.Softplus(), nn.Flatten(), nn.Linear(2 * 28 * 28, 3)
    ).eval()
    x, y = torch.rand(30, 1, 28, 28), torch.randint(0, 3, (30,))
    whole = 10_000
    for create_graph in (False, True):  # 30 images x 8 points: chunks of whole steps, or not
        xv = x.clone().requires_grad_(create_graph)
        a = integrated_gradients(net, xv, y, n_steps=8, create_graph=create_graph)
        b = integrated_gradients(net, xv, y, n_steps=8, internal_batch_size=whole)
        assert torch.allclose(a, b, atol=1e-6)
    a = smoothgrad(net, x, y, n_samples=5, seed=0)
    assert torch.allclose(a, smoothgrad(net, x, y, n_samples=5, seed=0, internal_batch_size=whole))
    maps = torch.rand(30, 28, 28)
    a = fidelity_curves(net, x, y, maps, n_steps=4)
    b = fidelity_curves(net, x, y, maps, n_steps=4, internal_batch_size=whole)
    assert torch.allclose(a.mif, b.mif, atol=1e-6) and torch.allclose(a.lif, b.lif, atol=1e-6)
    kw = dict(explainer="saliency", radius=0.1, n_samples=4, seed=0)
    a = local_lipschitz_estimate(net, x, y, **kw)
    assert torch.allclose(a, local_lipschitz_estimate(net, x, y, internal_batch_size=whole, **kw))
