"""The shipped recipe as a leaderboard row (`finetune_multi_map`): its penalty, learning rate and
epochs are the shipped config's, the ensemble scores it at the config's weight, and a resumed
ensemble run that gains the row keeps its images and records those the new models get wrong."""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from experiments import leaderboard_ensemble as ens
from experiments import leaderboard_ensemble_report as report
from experiments import leaderboard_methods as methods
from experiments import recipe_search as rs
from robust_train.regularizers import MultiMapSmoothness

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "mnist5k_finetune_every_map.yaml"


def test_the_row_is_the_shipped_config_on_the_leaderboards_pool() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    (term,) = config["model"]["penalties"]
    method = methods.METHODS["finetune_multi_map"]
    args = dict(term["init_args"])
    weight = args.pop("weight")
    args.pop("seed")  # the leaderboard seeds every fit with its own seed
    assert term["class_path"].endswith("MultiMapSmoothness") and method.penalty == "multi_map"
    # The row is the recipe as first shipped: the config with the options the recipe search
    # changed since set back to `SEARCH_BASE`, whose start and map powers are the penalty's
    # defaults (so the row's options leave them out).
    defaults = inspect.signature(MultiMapSmoothness).parameters
    assert {k: defaults[k].default for k in ("start", "map_powers")} == {
        k: rs.SEARCH_BASE[k] for k in ("start", "map_powers")
    }
    args = {**args, **rs.SEARCH_BASE}
    args = {k: v for k, v in args.items() if k not in ("start", "map_powers")}
    assert dict(method.fixed) == args
    assert method.lr == config["model"]["optimizer"]["init_args"]["lr"] != methods.FINETUNE_LR
    assert method.finetuned and methods.Plan().finetune_epochs == config["trainer"]["max_epochs"]
    assert ens.chosen_settings()["finetune_multi_map"] == weight and weight in method.values
    job = methods.Job("fit", "fit_finetune_multi_map_s1", "finetune_multi_map", seed=1, value=3.0)
    assert job.kwargs() == {**args, "weight": 3.0}
    from robust_train.regularizers import get_penalty

    assert type(get_penalty("multi_map", seed=1, **job.kwargs())).__name__ == "MultiMapSmoothness"
    note = report.row_notes(list(report.ROWS), {"finetune_multi_map": weight})
    assert f"weight {weight:g}, not a CV choice" in note and f"lr {method.lr:g}" in note
    assert report.row_notes(["natural", "adversarial"], {}) == ""


class Thresholds(torch.nn.Module):
    """Predicts 1 where the image's mean is above `cut`, else 0."""

    def __init__(self, cut: float) -> None:
        super().__init__()
        self.cut = cut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = (x.mean((1, 2, 3)) > self.cut).float()
        return torch.stack([1 - up, up], 1)


def test_a_resumed_run_gains_a_row_on_its_own_images(tmp_path: Path, monkeypatch) -> None:
    x = torch.linspace(0, 1, 6).view(6, 1, 1, 1).expand(6, 1, 2, 2).contiguous()
    y = (torch.arange(6) >= 3).long()  # means 0, .2, .4 | .6, .8, 1
    meta = {"rows": ["natural", "adversarial"], "seeds": [0, 1], "indices": [0, 2, 3, 5],
            "chosen": {"natural": None, "adversarial": 0.05}, "protocol": "ensemble"}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    cuts = {0: 0.5, 1: 0.3}  # seed 1's model calls image 2 (mean .4) a 1
    trained: list[str] = []
    monkeypatch.setattr(ens, "_train", lambda args, chosen, rows: trained.extend(rows))
    monkeypatch.setattr(ens, "model_path", lambda row, seed, *a: f"{row}/{seed}")
    monkeypatch.setattr("experiments.leaderboard.test_split", lambda: (x, y))
    monkeypatch.setattr(
        "robust_train.models.load_classifier", lambda path: Thresholds(cuts[int(path[-1])])
    )
    args = argparse.Namespace(out=str(tmp_path), lb="lb", quick=False, workers=1,
                              rows=["finetune_multi_map", "natural"], seeds=[0, 1])  # fmt: skip
    got = ens.add_rows(json.loads((tmp_path / "meta.json").read_text()), args)
    assert trained == ["finetune_multi_map"]
    assert got["rows"] == ["natural", "finetune_multi_map", "adversarial"]  # the page's order
    assert got["indices"] == meta["indices"] and got["chosen"]["adversarial"] == 0.05
    assert got["chosen"]["finetune_multi_map"] == ens.chosen_settings()["finetune_multi_map"]
    assert got["misclassified"] == {"finetune_multi_map/s1": [2]}
    assert json.loads((tmp_path / "meta.json").read_text()) == got
    assert ens.add_rows(got, args) is got  # nothing new: untouched
    assert "finetune_multi_map" in report.ROWS and report.SETTING["finetune_multi_map"] == "weight"


def test_chance_levels_measured_apart_are_the_clean_maps_against_seeded_random_maps(
    tmp_path: Path, monkeypatch
) -> None:
    from experiments.leaderboard import test_split
    from robust_train.evaluation import PROTOCOLS
    from robust_train.evaluation.parts.fragility import random_map_level
    from robust_train.explain import importance_map, saliency
    from robust_train.models import load_classifier

    shipped = ROOT / "robust_train" / "assets" / "checkpoints" / "mnist5k_baseline.ckpt"
    monkeypatch.setattr(ens, "model_path", lambda *a: str(shipped))
    indices = [0, 1, 3]
    job = {"id": "ens_natural_s0__saliency", "method": "natural", "seed": 0, "value": None,
           "explainer": "saliency", "indices": indices, "protocol": "ensemble",
           "per_image": {report.TOPK.format(m="saliency"): [0.1, 0.2, 0.3]}}  # fmt: skip
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / f"{job['id']}.json").write_text(json.dumps(job))
    done = {
        **job,
        "id": "ens_natural_s1__saliency",
        "per_image": {report.RANDOM.format(m="saliency"): [0.5] * 3},
    }
    (tmp_path / "jobs" / f"{done['id']}.json").write_text(json.dumps(done))
    assert ens.add_chance(tmp_path, "lb") == [job["id"]]  # the other has its level
    got = json.loads((tmp_path / "jobs" / f"{job['id']}.json").read_text())
    x, y = test_split()
    model = load_classifier(str(shipped))
    maps = importance_map(saliency(model, x[indices], y[indices]))
    protocol = PROTOCOLS["ensemble"]
    for measure, key in (("random_topk", report.RANDOM), ("random_lens", report.RANDOM_LENS)):
        want = random_map_level(maps, protocol.measure_k, measure, protocol.seed)
        values = got["per_image"][key.format(m="saliency")]
        assert values == pytest.approx(want.tolist(), abs=1e-6)
    assert 0.1 < statistics.mean(values) < 0.5 and got["chance"]
    assert got["per_image"][report.TOPK.format(m="saliency")] == [0.1, 0.2, 0.3]  # kept
    assert ens.add_chance(tmp_path, "lb") == []  # once
