"""experiments/independent_attacks.py: its hand-written maps equal Captum's and Zennit's at the
clean point, its attack never returns a label-changing or out-of-budget input, and its metric
and counts behave as defined in the limiting cases (a map that cannot move, a map that is the
input)."""

from __future__ import annotations

import json

import captum.attr  # noqa: F401  (imported here, at collection: the checks use it lazily)
import numpy as np
import pytest
import torch
import zennit.attribution  # noqa: F401
from torch import nn

from experiments import independent_attacks as ia


class TinyNet(nn.Module):
    """MNISTConvNet's layout at toy widths, with a non-identity normalisation inside."""

    def __init__(self) -> None:
        super().__init__()
        self.normalize = _Normalize(0.1307, 0.3081)
        self.features = nn.Sequential(
            nn.Conv2d(1, 3, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(3, 4, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.hidden = nn.Sequential(nn.Linear(4 * 7 * 7, 12), nn.ReLU(), nn.Dropout(0.0))
        self.classifier = nn.Linear(12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.hidden(self.features(self.normalize(x))))


class _Normalize(nn.Module):
    def __init__(self, mean: float, std: float) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([mean]))
        self.register_buffer("std", torch.tensor([std]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.view(1, -1, 1, 1)) / self.std.view(1, -1, 1, 1)


def _setup(seed: int = 0, n: int = 2) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = TinyNet().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.zeros(n, 1, 28, 28)
    x[:, :, 6:22, 10:18] = torch.rand(n, 1, 16, 8)  # a digit-like blob on a zero background
    with torch.no_grad():
        y = model(x).argmax(1)  # "correctly classified" by construction
    return model, x, y


def test_hand_written_maps_equal_captum_and_zennit_at_the_clean_point():
    model, x, y = _setup()
    checks = ia.reference_checks(model, x, y, ia.Settings(ig_points=4, k_attack=50))
    for key in ("saliency", "ig", "gradcam", "gradcam_relu"):
        assert checks[f"{key}_vs_captum"] <= 1e-5, (key, checks)
    for comp in ia.LRP_COMPOSITES:
        assert checks[f"lrp_{comp}_vs_zennit_gradient"] <= 1e-6, (comp, checks)
        scale = checks[f"max_abs_lrp_{comp}"]
        assert scale > 0 and checks[f"lrp_{comp}_by_hand_vs_zennit"] <= 1e-4 * scale, checks
        # the gradient of the attack objective through Zennit equals the one by hand
        assert checks[f"lrp_{comp}_second_order_max"] > 0
        assert checks[f"lrp_{comp}_second_order_rel"] <= 1e-3, (comp, checks)


def test_the_zbox_rule_sees_the_normalised_pixel_box():
    model, _, _ = _setup()
    low, high = ia.input_bounds(model)
    assert torch.allclose(low, torch.tensor(-0.1307 / 0.3081))
    assert torch.allclose(high, torch.tensor((1 - 0.1307) / 0.3081))
    assert [float(v) for v in ia.input_bounds(nn.Linear(2, 2))[1].flatten()] == [1.0]


@pytest.mark.parametrize("name", ["saliency", "lrp_epsilon_plus"])
def test_the_attack_never_returns_a_label_changing_or_out_of_budget_input(name):
    model, x, y = _setup(seed=1)
    with torch.no_grad():  # image 0's runner-up logit 0.01 below its label's: a fragile label
        top2 = model(x[:1]).topk(2, dim=1)
        model.classifier.bias[top2.indices[0, 1]] += float(top2.values[0, 0] - top2.values[0, 1])
        model.classifier.bias[top2.indices[0, 1]] -= 0.01
        y = model(x).argmax(1)
    assert int(y[0]) == int(top2.indices[0, 0])
    settings = ia.Settings(eps=0.5, alpha=0.2, steps=4, restarts=2, k_attack=50, k_report=30)
    surrogate = ia.softplus_copy(model, 10.0)
    assert surrogate.swapped_relus == 3 and not any(
        isinstance(m, nn.ReLU) for m in surrogate.modules()
    )
    generator = torch.Generator().manual_seed(0)
    result = ia.topk_attack(model, surrogate, name, x, y, settings, generator)
    assert int(result.label_changes.sum()) > 0  # the walk went through label-changing iterates
    with torch.no_grad():
        assert torch.equal(model(result.x).argmax(1), y)  # none of them was returned
    assert float((result.x - x).abs().max()) <= settings.eps + 1e-6
    assert float(result.x.min()) >= 0 and float(result.x.max()) <= 1
    assert bool(result.moved.all())
    assert ((result.intersection >= 0) & (result.intersection <= 1)).all()


def test_metric_limiting_cases():
    a = torch.arange(20.0).repeat(2, 1)
    assert ia.topk_intersection(a, a, 5).tolist() == [1.0, 1.0]
    assert ia.topk_intersection(a, -a, 5).tolist() == [0.0, 0.0]
    assert np.allclose(ia.spearman(a, a), 1.0) and np.allclose(ia.spearman(a, -a), -1.0)
    assert np.isnan(ia.spearman(a, torch.ones_like(a))).all()
    stat = ia.mean_ci([0.5, 0.5, 0.5])
    assert stat["mean"] == stat["lo"] == stat["hi"] == 0.5 and stat["n"] == 3


def test_a_map_that_cannot_move_is_counted_never_reported_as_robustness():
    """A linear model: its saliency is the same at every input, so the attack direction is zero
    at every step; the intersection is 1 and every image is counted as "could not move"."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10)).eval()
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        y = model(x).argmax(1)
    settings = ia.Settings(steps=3, restarts=1, noise_draws=2, k_attack=50, k_report=30)
    record = ia.run_one(model, "saliency", x, y, settings)
    assert record["n_could_not_move"] == 2
    assert record["attack"]["topk"]["mean"] == 1.0 and record["noise"]["topk"]["mean"] == 1.0


def test_the_map_that_is_the_input_overlaps_the_input_and_moves():
    model, x, y = _setup(seed=2)
    settings = ia.Settings(steps=3, restarts=1, noise_draws=2, k_attack=50, k_report=30)
    record = ia.run_one(model, "input", x, y, settings)
    assert record["clean_overlap_with_input"] == 1.0
    assert record["n_could_not_move"] == 0 and record["attack"]["topk"]["mean"] < 1.0


@pytest.mark.slow
def test_quick_run_on_the_shipped_natural_model(tmp_path):
    out = tmp_path / "ia.jsonl"
    records = ia.main(["--quick", "--models", "natural=mnist5k_baseline", "--out", str(out)])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kind"] for r in lines[:2]] == ["run", "checks"]
    assert all(v <= 1e-4 for k, v in lines[1].items() if k.endswith(("_captum", "_rel")))
    assert {r["explainer"] for r in records} == set(ia.EXPLAINERS)
    assert all(r["n_images"] == 4 for r in records)
