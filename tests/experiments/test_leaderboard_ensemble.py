"""The leaderboard's columns under the attack ensemble (experiments.leaderboard_ensemble): the same
images for every row, chance levels beside every column, the share above "map = input", a
PARTIAL banner naming the missing cells, and a run that resumes from its stored job results."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from experiments import leaderboard_ensemble as ens
from experiments import leaderboard_ensemble_report as report
from experiments.leaderboard import export_jobs

ROOT = Path(__file__).resolve().parents[2]
N = 4  # images of the synthetic run


def job(method: str, seed: int, m: str, topk: list, ref: list | None = None) -> dict:
    """A stored job result as `run_job` writes it (values chosen by hand)."""
    per_image = {
        report.TOPK.format(m=m): topk,
        report.LENS.format(m=m): [None if v is None else min(1.0, v + 0.1) for v in topk],
        report.RANDOM.format(m=m): [0.1, 0.2, 0.1, 0.2],
        report.RANDOM_LENS.format(m=m): [0.3, 0.4, 0.3, 0.4],
    }
    if ref is not None:
        per_image[report.REFERENCE] = ref
        per_image[report.REFERENCE_LENS] = ref
    members = [{"name": "k100_beta3", "worst_on": 3}, {"name": "search", "worst_on": 1}]
    return {
        "id": ens.EnsembleJob(method, seed, m).id, "kind": "ensemble", "method": method,
        "seed": seed, "value": None if method == "natural" else 0.05, "explainer": m,
        "indices": [0, 1, 2, 3], "protocol": "ensemble", "cpu_s": 8.0,
        "accuracy": 0.97 + seed / 100,
        "attack_cost": {f"{m}/topk": {"members": members}}, "per_image": per_image,
    }  # fmt: skip


def synthetic() -> list[dict]:
    ref = [0.6, 0.6, 0.6, 0.6]
    return [
        job("natural", 0, "saliency", [0.2, 0.3, 0.7, 0.4], ref),
        job("natural", 1, "saliency", [0.4, 0.5, 0.3, 0.9], ref),
        job("adversarial", 0, "saliency", [0.7, 0.8, 0.5, None], ref),  # image 3: blank map
        job("adversarial", 1, "saliency", [0.9, 0.6, 0.7, 0.8], [0.5, 0.7, 0.6, 0.6]),
        job("natural", 0, "grad_cam", [0.1, 0.2, 0.3, 0.4]),
    ]


META = {"rows": ["natural", "adversarial"], "seeds": [0, 1], "chosen": {"adversarial": 0.05}}


def test_every_row_is_scored_on_the_images_every_model_measured() -> None:
    jobs = synthetic()
    assert report.common(jobs, "saliency") == [0, 1, 2]  # image 3 blank for one model
    t = report.tables(jobs, META)
    natural = {r[0]: r for r in t["topk"]}["natural"]
    per_seed = [statistics.mean([0.2, 0.3, 0.7]), statistics.mean([0.4, 0.5, 0.3])]
    assert natural[3] == f"{statistics.mean(per_seed):.3f} ± {statistics.stdev(per_seed):.3f}"
    assert natural[2] == f"{0.975:.3f} ± {statistics.stdev([0.97, 0.98]):.3f}"
    assert t["topk"][-1] == ["images (every row)", "", "all 1,000", "3", "4"]
    # Grad-CAM has seed 0 of natural only: the cell says so, the other row is "not run".
    assert natural[4] == "0.250 (1 of 2)"
    assert {r[0]: r for r in t["topk"]}["adversarial"][4] == "not run"


def test_chance_levels_sit_beside_every_column_on_the_same_images() -> None:
    t = report.tables(synthetic(), META)
    rows = {r[0]: r for r in t["topk"]}
    # "map = input": each model's own reference, mean over the 3 shared images, then over models.
    refs = [0.6, 0.6, 0.6, statistics.mean([0.5, 0.7, 0.6])]
    assert rows["map = input (same ensemble)"][3] == (
        f"{statistics.mean(refs):.3f} ± {statistics.stdev(refs):.3f}"
    )
    randoms = [statistics.mean([0.1, 0.2, 0.1])] * 4
    assert rows["random map"][3] == f"{randoms[0]:.3f} ± 0.000"
    # The LENS table has its own random-map row, from the random map's LENS, not its top-k.
    lens_random = [statistics.mean([0.3, 0.4, 0.3])] * 4
    assert {r[0]: r for r in t["lens"]}["random map"][3] == f"{lens_random[0]:.3f} ± 0.000"
    assert {r[0]: r for r in t["lens"]}["map = input (same ensemble)"][3].startswith("0.6")


def test_the_share_above_map_input_compares_each_model_with_its_own_reference() -> None:
    above = {r[0]: r for r in report.tables(synthetic(), META)["above"]}
    # natural: seed 0 [0.2, 0.3, 0.7] vs 0.6 -> 1; seed 1 [0.4, 0.5, 0.3] -> 0.
    assert above["natural"][1] == "0.17 (1/6)"
    # adversarial: seed 0 [0.7, 0.8, 0.5] vs 0.6 -> 2; seed 1 [0.9, 0.6, 0.7] vs [0.5, 0.7, 0.6]
    # -> 2 (0.6 < 0.7 is not above).
    assert above["adversarial"][1] == "0.67 (4/6)"
    # Grad-CAM: natural seed 0 against its reference from its saliency job; no adversarial job.
    assert above["natural"][2] == "0.00 (0/4)" and above["adversarial"][2] == "not run"


def test_missing_cells_make_the_section_partial_and_it_names_protocol_and_members() -> None:
    lines = report.section_lines(synthetic(), META, "results/x.jsonl.gz")
    text = "\n".join(lines)
    assert "**PARTIAL" in text
    assert "LRP, DeepLIFT, IG: no row; natural (seed 1: Grad-CAM); adversarial (seed 0: " in text
    assert "`ensemble` protocol" in text and "`k100_beta3`; `search`" in text
    assert "first 4 MNIST-5k test images" in text
    cost = {r[0]: r for r in report.tables(synthetic(), META)["cost"]}
    assert cost["saliency"] == ["saliency", "4", "2.0", "2", "k100_beta3 12, search 4"]
    full = [job(r, s, m, [0.5] * N, [0.6] * N) for r in ("natural",) for s in (0,)
            for m in report.MAPS]  # fmt: skip
    done = report.section_lines(full, {**META, "rows": ["natural"], "seeds": [0]}, "f")
    assert "PARTIAL" not in "\n".join(done)


def test_exported_results_restore_into_a_new_folder_with_their_images(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "jobs").mkdir(parents=True)
    for j in synthetic():
        (run / "jobs" / f"{j['id']}.json").write_text(json.dumps(j))
    assert export_jobs(run, tmp_path / "e.jsonl.gz") == 5
    assert report.load_jobs(tmp_path / "e.jsonl.gz") == report.load_jobs(run)
    other = tmp_path / "other"
    assert ens.restore(tmp_path / "e.jsonl.gz", other) == 5
    meta = json.loads((other / "meta.json").read_text())
    assert meta["indices"] == [0, 1, 2, 3] and meta["protocol"] == "ensemble"
    assert meta["chosen"]["adversarial"] == 0.05 and meta["rows"] == ["natural", "adversarial"]
    jobs = ens.plan(("natural", "adversarial"), (0, 1), ("saliency", "grad_cam"))
    assert [j.id for j in ens.pending(other, jobs)] == [  # seed 0 of every row first
        "ens_adversarial_s0__grad_cam", "ens_natural_s1__grad_cam", "ens_adversarial_s1__grad_cam"
    ]  # fmt: skip


def test_bad_arguments_are_one_line_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--images must be >= 1, got 0"):
        ens.main(["--out", str(tmp_path), "--images", "0"])
    with pytest.raises(SystemExit, match="--protocol must be one of .*got 'strong'"):
        ens.main(["--out", str(tmp_path), "--protocol", "strong"])
    with pytest.raises(SystemExit, match="--restore: no such file"):
        ens.main(["--out", str(tmp_path), "--restore", str(tmp_path / "none.jsonl")])
    assert not (tmp_path / "jobs").exists()


@pytest.mark.heavy  # the study's quick run
def test_a_tiny_run_measures_resumes_and_restores(tmp_path: Path) -> None:
    """Two rows, one seed, saliency, 2 images, the cheap ensemble; the models are the shipped
    natural checkpoint under the fit names (nothing trains)."""
    lb = tmp_path / "lb"
    (lb / "ckpt").mkdir(parents=True)
    shipped = ROOT / "robust_train" / "assets" / "checkpoints" / "mnist5k_baseline.ckpt"
    for name in ("natural", "adversarial"):
        shutil.copy(shipped, lb / "ckpt" / f"fit_{name}_s0.ckpt")
    out = tmp_path / "run"
    argv = ["--out", str(out), "--lb", str(lb), "--rows", "natural", "adversarial",
            "--seeds", "0", "--maps", "saliency", "--images", "2",
            "--protocol", "demo_ensemble"]  # fmt: skip
    assert ens.main(argv) == 0
    jobs = report.load_jobs(out)
    assert len(jobs) == 2 and all(j["indices"] == jobs[0]["indices"] for j in jobs)
    first = jobs[0]
    assert len(first["indices"]) == 2 and first["protocol"] == "demo_ensemble"
    values = first["per_image"][report.TOPK.format(m="saliency")]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert len(first["per_image"][report.REFERENCE]) == 2  # "map = input" in the saliency job
    assert first["attack_cost"]["saliency/topk"]["members"]
    stamp = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()}
    assert ens.main(argv) == 0  # resumed: every job stored, none runs again
    assert {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()} == stamp
    # exported, one job cut, restored elsewhere: only that job runs.
    assert ens.main([*argv, "--export", str(tmp_path / "e.jsonl")]) == 0
    lines = (tmp_path / "e.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["id"] != "ens_adversarial_s0__saliency"]
    (tmp_path / "cut.jsonl").write_text("\n".join(kept) + "\n")
    other = [
        *argv[:1],
        str(tmp_path / "other"),
        *argv[2:],
        "--restore",
        str(tmp_path / "cut.jsonl"),
    ]
    assert ens.main(other) == 0
    again = {j["id"]: j for j in report.load_jobs(tmp_path / "other")}
    assert len(again) == 2 and again["ens_adversarial_s0__saliency"]["indices"] == first["indices"]
    assert again["ens_natural_s0__saliency"] == json.loads(kept[0])  # restored, not run again


def test_a_model_measured_without_map_input_gets_a_reference_job_after_the_saliency_jobs(
    tmp_path: Path,
) -> None:
    (tmp_path / "jobs").mkdir()
    for j in synthetic()[:3]:  # natural s0, s1 with the reference; adversarial s0 without
        if j["method"] == "adversarial":
            j["per_image"].pop(report.REFERENCE)
        (tmp_path / "jobs" / f"{j['id']}.json").write_text(json.dumps(j))
    jobs = ens.plan(("natural", "adversarial"), (0, 1), ("saliency", "grad_cam"))
    todo = [j.id for j in ens.pending(tmp_path, jobs)]
    assert todo[:2] == ["ens_adversarial_s1__saliency", "ens_adversarial_s0__input_reference"]
    assert len(todo) == 2 + 4  # the reference once, then every Grad-CAM job
    s = ens.settings(ens.REFERENCE, 3, False)
    assert s.parts == (ens.REFERENCE,) and s.n_samples == 3
    # A reference job's members (no surrogate for the input) never stand for the map's.
    ref = {**job("adversarial", 0, ens.REFERENCE, [0.5] * N, [0.6] * N), "attack_cost": {
        "input_reference/topk": {"members": [{"name": "k100", "worst_on": 4}]}}}  # fmt: skip
    assert report.members_text([ref, *synthetic()]) == "`k100_beta3`; `search`"
    assert report.tables([ref, *synthetic()], META)["maps"] == ["saliency", "grad_cam"]


def test_jobs_of_a_baselines_run_on_the_same_images_are_adopted_once(tmp_path: Path) -> None:
    out, source = tmp_path / "run", tmp_path / "baselines"
    (out / "jobs").mkdir(parents=True)
    (source / "jobs").mkdir(parents=True)
    chosen = {"natural": None, "adversarial": 0.05}
    meta = {"rows": ["natural", "adversarial"], "chosen": chosen, "protocol": "ensemble"}
    (out / "meta.json").write_text(json.dumps({**meta, "indices": [0, 1, 2, 3]}))
    (source / "meta.json").write_text(json.dumps({"chosen": chosen, "indices": [0, 1, 2, 3]}))
    key = report.TOPK.format(m="saliency")
    noise = "attack/saliency/random_sign/topk_intersection"  # not the ensemble's: left out
    theirs = {"indices": [0, 1, 2, 3], "cpu_s": 30.0, "accuracy": 0.97, "explainer": "saliency",
              "per_image": {key: [0.5] * N, noise: [1.0] * N}}  # fmt: skip
    for row in ("adversarial/s1", "shipped robust", "natural/s0"):
        (source / "jobs" / f"{row.replace('/', '_')}.json").write_text(
            json.dumps({**theirs, "row": row})
        )
    mine = job("natural", 0, "saliency", [0.1] * N, [0.6] * N)
    (out / "jobs" / f"{mine['id']}.json").write_text(json.dumps(mine))
    assert ens.adopt(source, out) == 1  # the shipped row is not a leaderboard row; natural s0 kept
    adopted = json.loads((out / "jobs" / "ens_adversarial_s1__saliency.json").read_text())
    assert adopted["per_image"] == {key: [0.5] * N} and adopted["value"] == 0.05
    assert adopted["source"].startswith("experiments.baselines")
    assert json.loads((out / "jobs" / f"{mine['id']}.json").read_text()) == mine
    assert ens.adopt(source, out) == 0
    text = "\n".join(report.section_lines(report.load_jobs(out), {**meta, "seeds": [0, 1]}, "f"))
    assert "1 of the 2 map jobs were measured by the baselines run" in text
    assert "(`--adopt`): adversarial s1 saliency;" in text
    assert report.cost_rows(report.load_jobs(out), ["saliency"])[0][1] == "1"  # its own job only
    (source / "meta.json").write_text(json.dumps({"chosen": chosen, "indices": [0, 1, 2, 5]}))
    with pytest.raises(SystemExit, match="other images"):
        ens.adopt(source, out)
