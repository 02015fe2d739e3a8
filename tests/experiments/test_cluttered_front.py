"""The cluttered page's trade-off front and per-seed verdicts, from tiny stored jobs: the front is
the non-dominated set, each architecture and seed gets its best fine-tune, the figure is written."""

from __future__ import annotations

import json
import random

import pytest

from experiments import cluttered, cluttered_front
from experiments.cluttered import EXPLAINERS


def job(label: str, accuracy: float, sal: float, cam: float, images: int = 40, **stamp) -> dict:
    """A stored `eval` job of the default pair; every localisation and fidelity value equal, so
    only accuracy, cost and the top-k values decide the verdicts."""
    return {
        "label": label,
        "stamp": {"explainers": list(EXPLAINERS), "protocol": "fast", "images": images, **stamp},
        "accuracy": accuracy,
        "n_attacked": images,
        "mask_area": 0.1,
        "attack/saliency/topk/topk_intersection": sal,
        "attack/grad_cam/topk/topk_intersection": cam,
        "attack/input_reference/topk/topk_intersection": 0.3,
        **{f"localisation/{e}/relevance_mass": 0.2 for e in EXPLAINERS},
        **{f"attack/{e}/topk/relevance_mass": 0.2 for e in EXPLAINERS},
        "fidelity/grad_cam/fidelity": 0.5,
    }


def write_jobs(folder, jobs: list[dict]) -> None:
    (folder / "jobs").mkdir(parents=True)
    for i, r in enumerate(jobs):
        (folder / "jobs" / f"{i}.json").write_text(json.dumps(r))


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """The tables and results `cluttered table` stores from a small run folder (and a second
    folder of 10-image rows), under tmp_path."""
    out, fast10 = tmp_path / "out", tmp_path / "fast10"
    write_jobs(out, [
        job("cnn/natural", 0.90, 0.2, 0.1),
        job("cnn/a", 0.89, 0.5, 0.4),  # 10/10, 1.0 point lost
        job("cnn/b", 0.895, 0.5, 0.4),  # 10/10, 0.5 point lost: the best of seed 0
        job("cnn/c", 0.91, 0.3, 0.4),  # 8/10 (saliency's gain, above map = input), a point won
        job("cnn/b", 0.895, 0.2, 0.1, epsilon=16 / 255),  # another budget: never the front's
        job("cnn/natural_s1", 0.80, 0.1, 0.1),
        job("cnn/a_s1", 0.70, 0.6, 0.2),  # 6/10 (accuracy, cost, Grad-CAM's gain and > input)
        job("vgg_bn/gp_natural_s0", 0.5, 0.1, 0.1),  # a variant left out of the families
        job("vgg_bn/gp_em_s0", 0.5, 0.9, 0.9),
        job("vgg_bn/max_natural_s0", 0.95, 0.1, 0.1),
        job("vgg_bn/max_em_s0", 0.92, 0.5, 0.2),
    ])  # fmt: skip
    write_jobs(fast10, [job("cnn/natural", 0.90, 0.1, 0.1, 10), job("cnn/c", 0.91, 0.9, 0.9, 10)])
    fits = {"cnn/natural": 400, "cnn/a": 100, "cnn/b": 200, "cnn/c": 300, "cnn/natural_s1": 400,
            "cnn/a_s1": 500, "vgg_bn/max_natural_s0": 200, "vgg_bn/max_em_s0": 100}  # fmt: skip
    times = tmp_path / "times.json"
    times.write_text(json.dumps(fits))
    monkeypatch.setattr(cluttered, "RESULTS", tmp_path)
    argv = ["table", "--out", str(out), "--fit-times", str(times), "--ensemble-out", str(fast10)]
    cluttered.main(argv)
    return tmp_path / "cluttered.json"


def reference_front(points: list[dict], e: str, x: str) -> set[str]:
    """The non-dominated labels, straight from the definition: no other point with an `x` as
    small and a gain as large, better in one of them."""
    known = [p for p in points if p[x] is not None and p["gain"][e] is not None]
    return {
        p["label"]
        for p in known
        if not any(
            q[x] <= p[x] and q["gain"][e] >= p["gain"][e]
            and (q[x], q["gain"][e]) != (p[x], p["gain"][e])
            for q in known
        )
    }  # fmt: skip


def test_the_front_is_the_non_dominated_set():
    rng = random.Random(0)
    for trial in range(40):
        points = [
            {"label": f"p{i}", "lost": rng.choice([0.0, 0.5, 1.0, rng.uniform(-1, 3)]),
             "cost": rng.choice([None, 1.5, rng.uniform(1, 3)]),
             "gain": {"saliency": rng.choice([0.25, rng.uniform(0, 0.6)]),
                      "grad_cam": rng.choice([None, rng.uniform(0, 0.6)])}}
            for i in range(rng.randint(1, 12))
        ]  # fmt: skip
        for e in EXPLAINERS:
            for x in ("lost", "cost"):
                found = cluttered_front.front(points, e, x)
                assert set(found) == reference_front(points, e, x), (trial, e, x)
                by = {p["label"]: p for p in points}
                assert [by[t][x] for t in found] == sorted(by[t][x] for t in found)


def test_each_architecture_and_seed_gets_its_best_fine_tune(stored):
    tables = json.loads(stored.read_text())["tables"]
    table, targets = tables["verdict"], tables["targets"]
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]
    for row in rows:  # the targets table's verdicts, from the same row
        same = [
            t for t in targets["rows"] if t[0] == row["best fine-tune"] and t[2] == row["protocol"]
        ]
        assert len(same) == 1 and same[0][-1] == row["met"]
    assert [(r["architecture"], r["seed"]) for r in rows] == [
        ("small CNN", "0"),
        ("small CNN", "1"),
        ("VGG-BN, max head", "0"),
    ]  # the average-head VGG-BN is no family of the figure: left out
    cnn, s1, vgg = rows
    # a and b meet every target; b loses less accuracy; c (more accuracy) meets fewer
    assert (cnn["best fine-tune"], cnn["met"], cnn["fine-tunes"]) == ("cnn/b", "10/10", "3")
    assert cnn["accuracy lost (points)"] == "0.5" and cnn["targets missed"] == "none"
    assert cnn["protocol"] == "fast, first 40 images" and cnn["against"] == "cnn/natural"
    assert (s1["best fine-tune"], s1["met"], s1["accuracy lost (points)"]) == (
        "cnn/a_s1",
        "6/10",
        "10.0",
    )
    missed = s1["targets missed"].split("; ")
    assert missed == ["accuracy within 1 point", "cost <= 2x", "Grad-CAM top-k >= natural + 0.25",
                      "Grad-CAM top-k > map = input"]  # fmt: skip
    assert vgg["best fine-tune"] == "vgg_bn/max_em_s0" and vgg["against"] == "vgg_bn/max_natural_s0"


def test_the_front_points_and_figure_come_from_the_stored_results(stored, tmp_path):
    results = json.loads(stored.read_text())["results"]
    points = {p["label"]: p for p in cluttered_front.front_points(results)}
    assert set(points) == {"cnn/a", "cnn/b", "cnn/c", "cnn/a_s1", "vgg_bn/max_em_s0"}
    c = points["cnn/c"]  # its 40-image row, not the 10-image one
    assert c["lost"] == pytest.approx(-1.0) and c["gain"]["saliency"] == pytest.approx(0.1)
    assert c["cost"] == pytest.approx(1.75)
    assert points["cnn/b"]["gain"]["grad_cam"] == pytest.approx(0.3)
    seed0 = [points[t] for t in ("cnn/a", "cnn/b", "cnn/c")]  # b loses less than a, same gain
    assert cluttered_front.front(seed0, "saliency") == ["cnn/c", "cnn/b"]
    assert cluttered_front.front(seed0, "saliency", "cost") == ["cnn/a"]  # 1.25x, b 1.5x
    png = tmp_path / "images" / "front.png"
    cluttered_front.main(["--results", str(stored), "--png", str(png)])
    written = png.read_bytes()
    assert written[:8] == b"\x89PNG\r\n\x1a\n" and len(written) > 10_000


def test_a_missing_results_file_is_refused_with_its_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cluttered_front.main(["--results", str(tmp_path / "none.json")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "`--results`" in err and "none.json" in err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"tables": {}}))  # no stored results
    with pytest.raises(SystemExit) as stop:
        cluttered_front.main(["--results", str(other)])
    assert stop.value.code == 2 and "other.json" in capsys.readouterr().err
