"""`SoftSmoothedExplainer` is an `Explainer`: create_graph (default False) and the options reach
the wrapped explainer unchanged."""

from __future__ import annotations

import torch

from robust_train.certify import SoftSmoothedExplainer
from robust_train.explain import saliency
from robust_train.explain.protocol import Explainer


def test_create_graph_and_options_reach_the_wrapped_explainer():
    seen = []

    def recording(model, inputs, target, *, create_graph=False, **options):
        seen.append((create_graph, options))
        return saliency(model, inputs, target, create_graph=create_graph)

    soft = SoftSmoothedExplainer(recording, sigma=0.1, n_samples=2, kappa=3)
    assert isinstance(soft, Explainer)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2), torch.nn.Softplus(),
                              torch.nn.Linear(2, 2))  # fmt: skip
    x, y = torch.rand(2, 1, 4, 4, requires_grad=True), torch.tensor([0, 1])
    plain = soft(net, x, y)
    graph = soft(net, x, y, create_graph=True, extra=3)
    assert seen == [(False, {}), (True, {"extra": 3})]
    assert not plain.requires_grad and graph.requires_grad
    torch.testing.assert_close(plain, graph.detach())
