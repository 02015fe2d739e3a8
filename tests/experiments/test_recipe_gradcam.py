"""The Grad-CAM diagnosis of the recipe search (experiments/recipe_gradcam.py) and the front's
figure (experiments/recipe_search_figure.py): the signed map equals Grad-CAM without its ReLU,
the description's limiting case (the attacked input is the clean one), and collect's table and
figure."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from experiments import recipe_gradcam as rg
from experiments import recipe_search as rs
from experiments import recipe_search_figure as rf
from robust_train.explain import grad_cam
from robust_train.models import MNISTConvNet


def _model() -> MNISTConvNet:
    torch.manual_seed(0)
    return MNISTConvNet(channels=(4, 8), hidden=16).eval()


def test_the_signed_cam_is_grad_cam_without_its_relu_before_upsampling():
    net, x, y = _model(), torch.rand(3, 1, 28, 28), torch.tensor([0, 3, 7])
    cam = rg.signed_cam(net, x, y)
    assert cam.shape == (3, 7, 7)  # the default layer: the last block's pooled output
    up = F.interpolate(cam[:, None], size=(28, 28), mode="bilinear", align_corners=False)
    torch.testing.assert_close(up, grad_cam(net, x, y, relu=False), rtol=1e-4, atol=1e-6)


def test_an_unmoved_input_keeps_everything():
    net, x, y = _model(), torch.rand(2, 1, 28, 28), torch.tensor([1, 2])
    same = rg.describe(net, x, x.clone(), y)
    assert same["mass_ratio"] == [1.0, 1.0] and same["top_cells_kept"] == [1.0, 1.0]
    assert same["signed_topk"] == [1.0, 1.0] and max(same["l1"] + same["l1_power4"]) < 1e-6
    assert same["floor_clean"] == same["floor_attacked"]
    assert all(1 <= c <= 49 for c in same["cells_under_topk"])
    moved = rg.describe(net, x, (x + 0.3 * torch.randn_like(x)).clamp(0, 1), y)
    assert min(moved["l1"]) > 0 and min(moved["top_cells_kept"]) <= 1.0


def test_collect_adds_the_diagnosis_table_and_draws_the_front(tmp_path):
    row = {"name": "corner", "seed": 0, "changes": {"start": "corner"}, "val_acc": 0.97,
           "test_acc": 0.968, "index": [1], "proxy": {"saliency": 0.6, "grad_cam": 0.2,
                                                       "deeplift": 0.62}}  # fmt: skip
    (tmp_path / "corner_s0.json").write_text(json.dumps(row))
    shipped = {**row, "name": "shipped_before", "changes": {"checkpoint": "x"}, "test_acc": 0.966}
    (tmp_path / "shipped_before_s0.json").write_text(json.dumps(shipped))
    diag = tmp_path / "diag.json"
    diag.write_text(json.dumps({"worst_member": ["search", "search", "beta1"],
                                "mass_ratio": [0.8, 0.9, 1.0]}))  # fmt: skip
    png = tmp_path / "front.png"
    data = rs.collect(tmp_path, tmp_path / "out.json", None, diag, png)
    rows = data["tables"]["gradcam"]["rows"]
    assert rows[0][1:] == ["0.900", "0.800", "1.000"] and rows[-1][1] == "search 2, beta1 1"
    assert png.read_bytes()[:4] == b"\x89PNG"
    panels = rf.points(rs.load_search(tmp_path), rs.PROXY_MAPS)
    assert panels["mean"]["corner s0"] == (0.968, (0.6 + 0.2 + 0.62) / 3)
    assert set(panels) == {"saliency", "grad_cam", "deeplift", "mean"}
