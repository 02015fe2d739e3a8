"""`robust-train evaluate`'s path (`evaluate_on_split`) on a datamodule with ground-truth masks:
the localisation of the clean and attacked maps joins the measures, on the held-out subset's
images in its order; a datamodule without masks gets none; bad masks are refused."""

from __future__ import annotations

import pytest
import torch

from robust_train.app.checkpoint_io import DataSettingsError, evaluate_on_split, heldout_subset
from robust_train.app.evaluate_output import evaluate_table
from robust_train.data.base import ImageDataModule, ImageTensorDataset
from robust_train.evaluation import (
    EvaluationSettings,
    build_parts,
    localisation_values,
    measure_of,
    run_parts,
)
from tests.support.helpers import TinyCNN

MEASURES = ("relevance_mass", "relevance_rank", "pointing_game")
SETTINGS = dict(
    parts=("fragility",), explainers=("saliency",), attacks=("topk",), n_steps=2, epsilon=0.1,
    k=8, seed=3, n_samples=6, ensemble=False,
)  # fmt: skip


class ObjectsDataModule(ImageDataModule):
    """Black 8 x 8 RGB images with one 3 x 3 object each (random place), three classes; its
    masks are the objects (`bad_masks`: one row too few)."""

    def __init__(self, n: int = 12, bad_masks: bool = False) -> None:
        super().__init__(batch_size=4, num_workers=0)
        g = torch.Generator().manual_seed(0)
        self.images = torch.zeros(n, 3, 8, 8)
        self.object_masks = torch.zeros(n, 8, 8, dtype=torch.bool)
        for i in range(n):
            top, left = torch.randint(0, 6, (2,), generator=g).tolist()
            self.object_masks[i, top : top + 3, left : left + 3] = True
            self.images[i][:, self.object_masks[i]] = torch.rand(3, 9, generator=g) * 0.5 + 0.5
        self.labels = torch.arange(n) % 3
        self.bad_masks = bad_masks

    @property
    def class_names(self) -> list[str]:
        return ["a", "b", "c"]

    @property
    def in_channels(self) -> int:
        return 3

    @property
    def image_size(self) -> tuple[int, int]:
        return (8, 8)

    def setup(self, stage: str | None = None) -> None:
        self.test_set = ImageTensorDataset(self.images, self.labels)

    def masks(self, split: str) -> torch.Tensor:
        return self.object_masks[1:] if self.bad_masks else self.object_masks


class NoMasks(ObjectsDataModule):
    masks = None  # type: ignore[assignment]


def _model() -> torch.nn.Module:
    return TinyCNN(in_channels=3, num_classes=3, seed=1).eval()


def _evaluate(dm: ImageDataModule, **overrides) -> dict:
    settings = EvaluationSettings(**{**SETTINGS, **overrides})
    return evaluate_on_split(_model(), dm, settings, "test", progress=False, threads=1)


def test_evaluate_reports_localisation_of_the_heldout_images_in_their_order():
    dm = ObjectsDataModule()
    result = _evaluate(dm, correct_only=False)
    keys = [f"localisation/{e}/{m}" for e in ("saliency", "input_reference") for m in MEASURES]
    keys += [f"attack/{e}/topk/{m}" for e in ("saliency", "input_reference") for m in MEASURES]
    assert set(keys) <= set(result["measures"])
    assert all(measure_of(key).higher_is_better for key in keys)
    # "map = input" is all on the object only where each image gets its own mask
    assert result["per_image"]["localisation/input_reference/relevance_mass"] == [1.0] * 6
    assert result["subset"]["selection"] == "seeded class-stratified subset"
    held = heldout_subset(dm, 6, model=_model(), seed=3)
    assert held.indices != list(range(6))  # the subset is reordered: the masks must follow
    direct = localisation_values(
        _model(), held.images, held.labels, dm.object_masks[held.indices],
        EvaluationSettings(**SETTINGS, correct_only=False),
    )  # fmt: skip
    for key in ("localisation/saliency/relevance_rank", "attack/saliency/topk/pointing_game"):
        assert result["per_image"][key] == direct[key].tolist(), key
    table = evaluate_table(result)
    assert "| `localisation/saliency/relevance_mass` ↑ |" in table
    assert "| `attack/saliency/topk/pointing_game` ↑ |" in table


def test_part_keys_name_every_localisation_value_it_reports():
    dm = ObjectsDataModule()
    settings = EvaluationSettings(**SETTINGS, correct_only=False)
    parts = build_parts(settings, 8, 8)
    without = {key for part in parts for key in part.keys()}
    evaluation = run_parts(_model(), dm.images, dm.labels, parts=parts, masks=dm.object_masks)
    with_masks = {key for part in parts for key in part.keys()}
    reported = set(evaluation.values) - {"accuracy", "attack/saliency/topk/beats_input"}
    assert reported == with_masks
    assert with_masks - without == {k for k in reported if k.rsplit("/", 1)[-1] in MEASURES}


def test_without_masks_nothing_changes():
    result = _evaluate(NoMasks(), input_reference=False)
    assert not [k for k in result["measures"] if k.rsplit("/", 1)[-1] in MEASURES]
    assert "attack/saliency/topk/topk_intersection" in result["measures"]


def test_masks_that_do_not_fit_the_split_are_refused():
    with pytest.raises(DataSettingsError, match=r"masks\('test'\) must be \(12, 8, 8\)"):
        _evaluate(ObjectsDataModule(bad_masks=True), input_reference=False)
