"""A smoothed map that does not depend on the input (the saliency of a linear model is its weight
row): the certificate is exact (every overlap 1), and the attack side reports that it had nothing
to follow instead of raising."""

from __future__ import annotations

import torch

from robust_train.certify import certify_explanations
from robust_train.certify.attack import attack_certificate
from robust_train.certify.report import certificate_summary_markdown
from robust_train.certify.run import CertifySettings, certify_model

NOTE = "does not depend on the input"


def _linear() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)).eval()
    x = torch.rand(4, 1, 8, 8)
    return model, x, model(x).argmax(1)


def test_attack_certificate_measures_x_itself_and_says_why() -> None:
    model, x, target = _linear()
    cert = certify_explanations(model, x, target, k=8, n_samples=60, sigma=0.1, seed=0)
    found = attack_certificate(model, x, cert, radius=0.2, n_steps=2, attack_samples=2)
    assert NOTE in (getattr(found, "note", None) or "") and found.attack is None
    assert torch.equal(found.points, x) and float(found.distance.max()) == 0.0
    assert torch.equal(found.overlap, torch.ones(4, dtype=found.overlap.dtype))
    assert bool(found.label_kept.all())


def test_certify_model_on_a_linear_model_reports_overlap_one(capsys) -> None:
    model, x, target = _linear()
    settings = CertifySettings(
        sigma=0.1, n_samples=60, k=8, attack_steps=2, attack_samples=2, random_points=1,
        attack_radii=(0.05, 0.1),
    )  # fmt: skip
    result = certify_model(model, x, target, settings)
    assert result["certified_overlap"][0] == 1.0
    for record in result["attack"]:
        assert record["attack"] == 1.0 and record["random"] == 1.0 and record["empirical"] == 1.0
        assert record["certified"] <= record["empirical"]
        assert NOTE in record["attack_note"]
        note = record["attack_note"]
    results = {
        "models": {"linear": result}, "settings": settings.as_dict(), "split": "test",
        "images": [0, 1, 2, 3],
    }  # fmt: skip
    assert f"Attack not run: linear: {note}." in certificate_summary_markdown(results)


def test_a_map_that_depends_on_the_input_is_still_attacked() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    ).eval()
    x = torch.rand(3, 1, 8, 8)
    target = model(x).argmax(1)
    cert = certify_explanations(model, x, target, k=8, n_samples=60, sigma=0.1, seed=0)
    found = attack_certificate(model, x, cert, radius=0.5, n_steps=3, attack_samples=2)
    assert found.note is None and found.attack is not None
    assert float(found.distance.max()) > 0
