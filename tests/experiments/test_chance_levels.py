"""Chance levels beside every attacked top-k number: the baselines page's random-map row and its
share above "map = input" (experiments/baselines.py), and the generated pages' tables checked
from their results data."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from experiments import baselines as bl

RANDOM = "fragility/{ex}/random_topk"
RANDOM_LENS = "fragility/{ex}/random_lens"


def _write(out: Path, row: str, ex: str, topk: list, chance: list | None, ref: list | None = None):
    per_image = {f"attack/{ex}/{a}/{m}": topk for a, m, _ in bl.COLUMNS}
    if chance is not None:
        per_image[RANDOM.format(ex=ex)] = chance
        per_image[RANDOM_LENS.format(ex=ex)] = [None if c is None else c + 0.2 for c in chance]
    if ref is not None:
        per_image.update({f"attack/input_reference/{a}/{m}": ref for a, m, _ in bl.COLUMNS})
    job = {"row": row, "explainer": ex, "indices": [5, 6, 7], "n_images": 3, "cpu_s": 6.0,
           "accuracy": 0.97, "measures": {}, "per_image": per_image}  # fmt: skip
    (out / "jobs" / f"{bl._job_id(row, ex)}.json").write_text(json.dumps(job))


def test_the_baselines_table_has_a_random_map_row_and_the_share_above_map_input(tmp_path):
    (tmp_path / "jobs").mkdir()
    meta = {"chosen": {"natural": None, "adversarial": 0.05, "gaussian_noise": 0.12},
            "indices": [5, 6, 7]}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    ref = [0.6, 0.6, 0.6]
    _write(tmp_path, "natural/s0", "saliency", [0.1, 0.7, 0.3], [0.12, 0.14, 0.13], ref)
    _write(tmp_path, "natural/s1", "saliency", [0.6, 0.9, None], [0.10, 0.11, None])
    _write(tmp_path, "shipped robust", "saliency", [0.8, 0.7, 0.5], [0.2, 0.2, 0.2])
    _write(tmp_path, "natural/s0", "grad_cam", [0.0, 0.0, 0.0], None)  # kept none
    t = bl.tables(tmp_path)
    rows = {r[0]: r for r in t["main"]["rows"]}
    random, cols = rows["random map (every model)"], t["main"]["columns"]
    per_model = [statistics.mean([0.12, 0.14]), statistics.mean([0.10, 0.11]), 0.2]  # images 5, 6
    want = f"{statistics.mean(per_model):.3f} ± {statistics.stdev(per_model):.3f}"
    assert random[cols.index("saliency top-k ∩ ensemble")] == want
    lens = [v + 0.2 for v in per_model]
    assert random[cols.index("saliency LENS ensemble")].startswith(f"{statistics.mean(lens):.3f}")
    assert random[cols.index("saliency top-k ∩ noise")] == "-"
    assert random[cols.index("grad_cam top-k ∩ ensemble")] == "not run"  # a job without it
    above = {r[0]: r[1:] for r in t["above"]["rows"]}
    assert above["natural"] == ["0.50 (2/4)", "0.00 (0/3)"]  # 0.7 and 0.9 > 0.6; equal is not
    assert above["shipped robust"] == ["1.00 (2/2)", "not run"]
    assert above["adversarial"] == ["not run", "not run"]
