"""The bare loop that benchmarks/bench_eval.py measures the attack against
(benchmarks/eval_peers.bare_attack) does the attack's work: its maps are the package's
explainers' maps, its labels a forward of the iterate, and chunking the IG paths changes nothing.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.explain import importance_map, integrated_gradients, saliency


@pytest.fixture(scope="module")
def peers():
    from benchmarks import eval_peers

    return eval_peers


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)
    ).eval()


@pytest.mark.parametrize("chunk_steps", [None, 1, 2, 3])
def test_bare_ig_map_is_integrated_gradients_and_its_logits_a_forward(peers, chunk_steps) -> None:
    model, x = _model(), torch.rand(5, 1, 4, 4)
    y = torch.tensor([0, 1, 2, 0, 1])
    maps, logits = peers._map(model, x, y, create_graph=False, ig_steps=7, chunk_steps=chunk_steps)
    expected = importance_map(integrated_gradients(model, x, y, n_steps=7, baseline=0.0))
    assert torch.allclose(maps, expected.flatten(1), atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(logits, model(x), atol=1e-6)


def test_bare_saliency_map_and_logits(peers) -> None:
    model, x = _model(), torch.rand(5, 1, 4, 4)
    y = torch.tensor([2, 1, 0, 0, 1])
    maps, logits = peers._map(model, x, y, create_graph=False)
    assert torch.allclose(maps, importance_map(saliency(model, x, y)).flatten(1), atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(logits, model(x), atol=1e-6)


def test_bare_loop_iterates_do_not_depend_on_chunks_or_ranking(peers) -> None:
    model, x = _model(), torch.rand(5, 1, 4, 4)
    y = model(x).argmax(1)
    kw = dict(epsilon=0.2, n_steps=3, k=4, ig_steps=4, step_size=0.05)
    reference = peers.bare_attack(model, x, y, **kw)
    assert (reference - x).abs().max() <= 0.2 + 1e-6 and not torch.equal(reference, x)
    for extra in (
        dict(ig_chunk_steps=1),
        dict(ranking=True),
        dict(ranking=True, ig_chunk_steps=3, rank_chunk_steps=2),
    ):
        assert torch.allclose(peers.bare_attack(model, x, y, **kw, **extra), reference, atol=1e-6)
