"""Where a Grad-CAM map's mass falls (experiments.cluttered_mass): the shares on the mask, on the
ring around it and further away match a pixel-by-pixel reference (a pixel is on the ring when
some mask pixel lies within `ring` pixels of it in both directions) and sum to 1; the top-k and
floor shares match sorting and thresholding, the squared map's share on the mask its sum of
squares; results become one table row each."""

from __future__ import annotations

import json

import pytest
import torch

from experiments.cluttered import mass_table
from experiments.cluttered_mass import FLOOR, main, mass_regions


def reference(map_: torch.Tensor, mask: torch.Tensor, ring: int, k: int) -> dict[str, float]:
    h, w = map_.shape
    total = float(map_.sum())
    on = [(i, j) for i in range(h) for j in range(w) if mask[i, j]]
    shares = {"mask": 0.0, "ring": 0.0, "far": 0.0}
    for i in range(h):
        for j in range(w):
            near = any(abs(i - a) <= ring and abs(j - b) <= ring for a, b in on)
            where = "mask" if mask[i, j] else "ring" if near else "far"
            shares[where] += float(map_[i, j]) / total
    values = sorted(map_.flatten().tolist(), reverse=True)
    shares["top_k"] = sum(values[:k]) / total
    shares["floor"] = sum(v for v in values if v < FLOOR * values[0]) / total
    squares = sum(float(v) ** 2 for v in map_.flatten())
    shares["squared"] = sum(float(map_[i, j]) ** 2 for i, j in on) / squares
    return shares


def test_mass_regions_match_the_pixel_by_pixel_reference():
    torch.manual_seed(0)
    maps = torch.rand(3, 12, 10) ** 3  # some pixels below a tenth of the maximum
    masks = torch.zeros(3, 12, 10, dtype=torch.bool)
    masks[0, 2:4, 3:6] = True
    masks[1, 0, 0] = masks[1, 11, 9] = True  # corners: the ring is cut by the border
    masks[2, 5:9, 1:3] = True
    got = mass_regions(maps, masks, ring=2, k=7)
    for b in range(3):
        want = reference(maps[b], masks[b], ring=2, k=7)
        for key, value in want.items():
            assert float(got[key][b]) == pytest.approx(value, abs=1e-5), (b, key)
    torch.testing.assert_close(got["mask"] + got["ring"] + got["far"], torch.ones(3))
    assert 0 < float(got["floor"].min()) and float(got["ring"][1]) > 0


def test_mass_rows_and_bad_images(tmp_path):
    result = {"label": "cnn/x_s1", "images": 33, "mask": 0.192, "ring": 0.396, "far": 0.4123}
    (tmp_path / "x.json").write_text(json.dumps(result))
    table = mass_table(tmp_path)
    assert table["rows"] == [["cnn/x_s1", "33", "0.192", "0.396", "0.412", "-", "-", "-"]]
    assert len(table["columns"]) == len(table["rows"][0])
    with pytest.raises(SystemExit) as stop:
        main(["--model", "cnn/x=none.ckpt", "--images", "0"])
    assert stop.value.code == 2
