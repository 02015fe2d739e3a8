"""Training with a penalty on LRP maps: double backprop through `robust_train.explain.lrp` inside
`RobustClassifier` and a real Lightning fit, beside the task loss and another penalty."""

from __future__ import annotations

import torch

from tests.support.helpers import TinyCNN


def _terms(seed: int = 0) -> list:
    from robust_train.regularizers import ExplanationSmoothness, get_penalty

    smooth = ExplanationSmoothness(
        weight=2.0, explainer="lrp", radius=0.2, distance="cosine", seed=seed
    )
    return [smooth, get_penalty("gradnorm", weight=0.5)]


def test_penalty_gradients_add_up_with_the_task_loss_and_other_penalties():
    """The training loss's gradient is the sum of the gradients of its parts computed alone: the
    lrp call's hooks do not touch the task loss's backward nor the other penalty's."""
    import torch.nn.functional as F

    from robust_train import RobustClassifier

    model = TinyCNN(batchnorm=True).eval()
    x, y = torch.rand(6, 1, 8, 8), torch.randint(0, 10, (6,))
    params = [p for p in model.parameters()]
    total = RobustClassifier(model, _terms()).training_step((x, y), 0)
    g_total = torch.autograd.grad(total, params)
    smooth, gradnorm = _terms()
    xr = x.clone().requires_grad_(True)
    logits = model(xr)
    parts = [
        F.cross_entropy(logits, y),
        smooth.weight * smooth(model, xr, y, logits).mean(),
        gradnorm.weight * gradnorm(model, xr, y, logits).mean(),
    ]
    g_parts = [torch.autograd.grad(part, params, retain_graph=True) for part in parts]
    for got, *alone in zip(g_total, *g_parts, strict=True):
        torch.testing.assert_close(got, sum(alone), rtol=1e-4, atol=1e-6)


def test_a_lightning_fit_with_the_lrp_penalty():
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from robust_train import RobustClassifier

    model = TinyCNN(batchnorm=True)
    before = [p.detach().clone() for p in model.parameters()]
    data = TensorDataset(torch.rand(24, 1, 8, 8), torch.randint(0, 10, (24,)))
    trainer = pl.Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = RobustClassifier(model, _terms())
    trainer.fit(module, DataLoader(data, batch_size=8))
    assert trainer.global_step == 3
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
