"""python -m experiments.leaderboard --quick: equal grids, CV selection that never reads the test
split, three seeds, every explainer's eval group, the full preset for the best, resume, report."""

from __future__ import annotations

import inspect
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from experiments import leaderboard as lb
from experiments import leaderboard_methods as methods
from experiments import leaderboard_report as report
from experiments.leaderboard_run import Scheduler


def test_every_method_gets_the_same_grid_size_spaced_around_its_paper_value():
    tuned = {n: m for n, m in methods.METHODS.items() if n != "natural"}
    assert methods.GRID_SIZE >= 4
    assert {len(m.values) for m in tuned.values()} == {methods.GRID_SIZE}
    for name, m in tuned.items():
        v = m.values
        assert list(v) == sorted(set(v)), name
        assert v[0] <= m.paper_value <= v[-1], name
        if m.swept == "epsilon":  # a range of eps inside the attack's budget
            assert 0 < v[0] and v[-1] <= 0.3
        else:  # log-spaced weights
            assert all(b / a >= 1.9 for a, b in zip(v, v[1:], strict=False)), name
    explainers = {m.target for m in tuned.values() if m.finetuned}
    assert explainers == {"saliency", "grad_cam", "lrp", "deeplift"}
    assert {"ig_sum_norm", "igr", "lga"} <= set(tuned)


def test_cv_folds_cover_the_pool_once_and_the_pool_holds_no_test_image():
    folds = methods.cv_folds(k=2)
    assert sorted(i for f in folds for i in f) == list(range(methods.POOL_IMAGES))
    assert abs(len(folds[0]) - len(folds[1])) <= 1
    with pytest.raises(ValueError, match="`k`"):
        methods.cv_folds(k=1)
    from robust_train.data import MNIST5kDataModule

    idx = MNIST5kDataModule(seed=0).split_indices()
    pool = set(idx["train"].tolist()) | set(idx["val"].tolist())
    assert len(pool) == methods.POOL_IMAGES and not pool & set(idx["test"].tolist())
    x, y = lb.pool_split()
    assert x.shape[0] == methods.POOL_IMAGES == y.shape[0]


def _cv(acc: float, rob: float, n: int = 100) -> dict:
    correct = [1] * round(acc * n) + [0] * (n - round(acc * n))
    return {"accuracy": sum(correct) / n, "correct": correct, "saliency": rob, "lrp": 1 - rob}


def test_the_rule_takes_the_most_robust_within_one_point_and_reads_cv_only():
    assert list(inspect.signature(methods.choose).parameters) == ["settings", "natural", "target"]
    natural = _cv(0.98, 0.2)
    grid = {0.3: _cv(0.98, 0.3), 1.0: _cv(0.97, 0.5), 3.0: _cv(0.96, 0.9), 10.0: _cv(0.5, 1.0)}
    assert methods.choose(grid, natural, "saliency") == 1.0  # 3.0 loses 2 points
    assert methods.choose(grid, natural, "lrp") == 0.3  # the target explainer decides
    assert methods.choose({1.0: _cv(0.9, 0.5), 3.0: _cv(0.8, 0.9)}, natural, "saliency") == 1.0
    tie = {1.0: _cv(0.98, 0.5), 3.0: _cv(0.98, 0.5)}
    assert methods.choose(tie, natural, "saliency") == 1.0
    nan = {1.0: _cv(0.98, math.nan), 3.0: _cv(0.98, 0.1)}
    assert methods.choose(nan, natural, "saliency") == 3.0
    with pytest.raises(ValueError, match="CV records only"):
        methods.cv_summary([{"kind": "eval", "fold": 0, "cv": {}, "seconds": 0.0}])


def test_the_rule_resolves_one_point_on_4000_held_out_images():
    """3 % of 4,000 paired predictions differ (both models about 97 % right): the standard
    error of the accuracy difference is under 0.3 points, so 1 point is 3.5 standard errors."""
    n = methods.POOL_IMAGES
    a = [1] * n
    b = [0] * 60 + [1] * (n - 60)
    a[-60:] = [0] * 60
    se = methods.paired_se(a, b)
    d = [x - y for x, y in zip(a, b, strict=True)]
    assert se == pytest.approx(statistics.stdev(d) / math.sqrt(n))
    assert se < 0.003 and methods.ACCURACY_MARGIN / se > 3


TUNED = "finetune_smoothness"  # a fine-tune: each CV fold and seed starts from natural's model


def _sentinel():
    raise AssertionError("the test split was read during selection")


@pytest.fixture(scope="module")
def selection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A quick CV selection of `TUNED` run once for the module, with a sentinel test split that
    raises if read; the full run below starts from its folder (a resumed run)."""
    out = tmp_path_factory.mktemp("selection")
    argv = ["--quick", "--workers", "1", "--methods", TUNED, "--select-only"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lb, "test_split", _sentinel)
        assert lb.main([*argv, "--out", str(out)]) == 0
    return out


@pytest.mark.heavy  # the study's quick run
def test_selection_never_reads_the_test_split(selection: Path, tmp_path: Path, monkeypatch):
    """The selection ran to its picks under the sentinel; an eval job under it does not."""
    results = json.loads((selection / "results.json").read_text())
    assert results["failed"] == [] and {r["kind"] for r in results["jobs"]} == {"cv"}
    assert set(results["chosen"]) == {"natural", TUNED}
    assert results["chosen"][TUNED] in methods.METHODS[TUNED].values
    assert len(results["summaries"][TUNED]) == methods.GRID_SIZE
    natural_folds = {r["fold"]: r["ckpt"] for r in results["jobs"] if r["method"] == "natural"}
    for r in results["jobs"]:  # a fine-tune's fold starts from natural's model of that fold
        if r["method"] == TUNED:
            assert r["init"] == natural_folds[r["fold"]]
    monkeypatch.setattr(lb, "test_split", _sentinel)
    with pytest.raises(AssertionError, match="test split was read"):
        lb.run_job(
            methods.Job("eval", "e", "natural", group="saliency", ckpt="x"),
            methods.quick_plan(),
            str(tmp_path),
        )


@pytest.mark.heavy  # the study's quick run
def test_quick_leaderboard_three_seeds_every_explainer_full_preset_and_resume(
    selection: Path, tmp_path: Path
):
    """The run continues the selection's folder: it reuses every CV result and runs the rest.
    Exported and restored without checkpoints, a fine-tune's eval trains natural's model, then
    the fine-tune, again."""
    shutil.copytree(selection, tmp_path, dirs_exist_ok=True)
    n_cv = len(list((tmp_path / "jobs").glob("cv_*.json")))
    argv = ["--quick", "--workers", "1", "--methods", TUNED, "--out", str(tmp_path)]
    assert lb.main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["failed"] == [] and results["skipped"] == []
    assert results["reused"] == n_cv == 2 + 2 * methods.GRID_SIZE  # natural's 2 folds, the grid's
    plan = results["plan"]
    fits = {(r["method"], r["seed"]) for r in results["jobs"] if r["kind"] == "fit"}
    assert fits == {(m, s) for m in ("natural", TUNED) for s in plan["seeds"]}
    assert len(plan["seeds"]) == 3
    evals = {(r["method"], r["seed"], r["group"]) for r in results["jobs"] if r["kind"] == "eval"}
    for group in methods.EXPLAINERS + ("fidelity",):
        for m, s in fits:
            assert (m, s, group) in evals
    rar = [r for r in results["jobs"] if r.get("group") == "rar"]
    assert {r["method"] for r in rar} == {"natural", *results["best"]}
    assert sum(r["test"]["n_images"] for r in rar if r["method"] == "natural") == plan["rar_images"]
    text = (tmp_path / "LEADERBOARD.md").read_text()
    assert "QUICK SMOKE RUN" in text and "PARTIAL" not in text
    assert f"| {TUNED} | weight=" in text and "LRP top-k ∩ attack" in text
    assert (tmp_path / "leaderboard_pareto.png").stat().st_size > 1000
    assert (tmp_path / "leaderboard_pareto_ig.png").stat().st_size > 1000
    # A restart reuses every finished job and runs none.
    n_jobs = len(list((tmp_path / "jobs").glob("*.json")))
    assert lb.main(argv) == 0
    again = json.loads((tmp_path / "results.json").read_text())
    assert again["reused"] == n_jobs == len(list((tmp_path / "jobs").glob("*.json")))
    assert again["chosen"] == results["chosen"]
    # Exported results restored into a new folder (no checkpoints there): only the jobs left
    # run, and a model they read is trained again first.
    assert lb.main([*argv, "--export", str(tmp_path / "run.jsonl")]) == 0
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    assert len(lines) == n_jobs
    redo = f"eval_saliency_{TUNED}_s1"
    kept = [line for line in lines if json.loads(line)["id"] != redo]
    (tmp_path / "cut.jsonl").write_text("\n".join(kept) + "\n")
    (tmp_path / "ckpt" / f"fit_{TUNED}_s1.ckpt").unlink()  # not on the new machine
    other = tmp_path / "restored"
    assert lb.main([*argv[:-1], str(other), "--restore", str(tmp_path / "cut.jsonl")]) == 0
    third = json.loads((other / "results.json").read_text())
    assert third["reused"] == n_jobs - 1 and third["failed"] == []
    retrained = sorted(p.name for p in (other / "ckpt").glob("*.ckpt"))
    assert retrained == [f"fit_{TUNED}_s1.ckpt", "fit_natural_s1.ckpt"]
    redone = next(r for r in third["jobs"] if r["id"] == redo)
    first = next(r for r in again["jobs"] if r["id"] == redo)
    assert redone["test"]["accuracy"] == pytest.approx(first["test"]["accuracy"], abs=0.02)
    _check_report(tmp_path, again)


def _check_report(folder: Path, results: dict) -> None:
    """Cells are mean ± standard deviation over seeds; a missing job makes the page PARTIAL and
    its cells `not run`; hand-written notes survive a rewrite of the same run's report."""
    rows = {r["method"]: r for r in report.table_rows(results)}
    accs = [
        r["test"]["accuracy"]
        for r in results["jobs"]
        if r["kind"] == "eval" and r["group"] == "saliency" and r["method"] == "natural"
    ]
    assert (
        rows["natural"]["cells"][0] == f"{statistics.mean(accs):.3f} ± {statistics.stdev(accs):.3f}"
    )
    page = folder / "LEADERBOARD.md"
    marker = report.hand_written_marker(results)
    page.write_text(page.read_text() + "\n## Findings\n\n- seen by hand\n")
    cut = [
        r
        for r in results["jobs"]
        if not (r["kind"] == "eval" and r["method"] == TUNED and r["seed"] > 0)
    ]
    cut = [r for r in cut if r["id"] != "eval_lrp_natural_s0"]
    report.write_report({**results, "jobs": cut}, folder)
    text = page.read_text()
    assert "PARTIAL" in text and f"{TUNED} (seed 1: " in text and "natural (seed 0: LRP)" in text
    assert "(1 of 3)" in text and text.count(marker) == 1 and text.endswith("- seen by hand\n")
    report.write_report({**results, "out": "elsewhere"}, folder)
    assert "seen by hand" not in page.read_text()


def test_a_fine_tune_whose_natural_model_is_gone_trains_it_first(tmp_path: Path):
    plan = methods.quick_plan()
    job = methods.Job("fit", "fit_finetune_smoothness_s1", "finetune_smoothness", seed=1, value=10)
    path = lb.ensure_model(str(tmp_path / "elsewhere.ckpt"), job, plan, tmp_path)
    assert path == str(tmp_path / "ckpt" / "fit_finetune_smoothness_s1.ckpt")
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["fit_finetune_smoothness_s1.ckpt", "fit_natural_s1.ckpt"]  # no partial file
    stamp = Path(path).stat().st_mtime_ns
    assert lb.ensure_model(None, job, plan, tmp_path) == path  # there now: not trained again
    assert Path(path).stat().st_mtime_ns == stamp


def test_two_workers_that_need_the_same_missing_model_train_it_once(tmp_path: Path, monkeypatch):
    import threading
    import time

    calls = []

    def slow_train(job, plan, out):
        calls.append(job.id)
        time.sleep(0.3)  # the second caller arrives while the first trains
        (out / "ckpt" / f"{job.id}.ckpt").parent.mkdir(parents=True, exist_ok=True)
        (out / "ckpt" / f"{job.id}.ckpt").write_text("model")

    monkeypatch.setattr(lb, "train", slow_train)
    job = methods.Job("fit", "fit_natural_s2", "natural", seed=2)
    paths = []
    threads = [
        threading.Thread(
            target=lambda: paths.append(lb.ensure_model(None, job, methods.quick_plan(), tmp_path))
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["fit_natural_s2"]
    assert paths == [str(tmp_path / "ckpt" / "fit_natural_s2.ckpt")] * 2


def test_a_missing_restore_file_is_one_line(tmp_path: Path):
    with pytest.raises(SystemExit, match="--restore: no such file .*nothing.jsonl"):
        lb.main(["--quick", "--out", str(tmp_path), "--restore", str(tmp_path / "nothing.jsonl")])


def test_cost_is_the_final_fits_cpu_time_over_naturals_else_the_step_profile():
    from experiments.leaderboard_plots import method_cost

    plan = {"epochs": 5, "finetune_epochs": 2}
    fits = [
        {"kind": "fit", "method": "natural", "cpu_s": 10.0},
        {"kind": "fit", "method": "natural", "cpu_s": 14.0},
        {"kind": "fit", "method": "smoothness", "cpu_s": 48.0},
        {"kind": "fit", "method": "finetune_smoothness", "cpu_s": 18.0},
        {"kind": "fit", "method": "finetune_smoothness", "failed": "boom", "cpu_s": 1e6},
    ]
    step = {"natural": 40.0, "smoothness": 100.0, "finetune_smoothness": 200.0, "ssr": 80.0}
    results = {"plan": plan, "jobs": fits, "step_ms": step}
    assert method_cost(results, "natural") == 1.0
    assert method_cost(results, "smoothness") == pytest.approx(4.0)  # 48 / 12
    assert method_cost(results, "finetune_smoothness") == pytest.approx(2.5)  # 1 + 18 / 12
    assert method_cost(results, "ssr") == pytest.approx(2.0)  # no fit: 80 / 40
    assert method_cost({**results, "jobs": fits[2:]}, "finetune_smoothness") == pytest.approx(
        1 + 2 / 5 * 200 / 40
    )
    assert math.isnan(method_cost({"plan": plan, "jobs": []}, "ssr"))


def _recording_worker():
    """A scheduler worker that records the ids it ran and marks its results fresh."""
    ran: list[str] = []

    def worker(job, plan, out):
        ran.append(job.id)
        return {**job.record(), "fresh": True}

    return ran, worker


def test_a_result_stored_for_another_setting_is_moved_aside_and_run_again(tmp_path: Path):
    ran, worker = _recording_worker()
    sched = Scheduler(worker, methods.quick_plan(), tmp_path, workers=1, budget_s=60)
    same = methods.Job("fit", "fit_gradnorm_s0", "gradnorm", value=3.0)
    other = methods.Job("fit", "fit_lga_s0", "lga", value=1.0)
    for job, stored_value in ((same, 3.0), (other, 0.3)):  # lga's CV now chooses 1, not 0.3
        (tmp_path / "jobs" / f"{job.id}.json").write_text(
            json.dumps({**job.record(), "value": stored_value, "fresh": False})
        )
        sched.add(job, 0)
    seen = []
    sched.run(seen.append)
    assert ran == ["fit_lga_s0"] and sched.reused == 1
    assert [(r["id"], r["value"], r["fresh"]) for r in seen] == [
        ("fit_gradnorm_s0", 3.0, False),
        ("fit_lga_s0", 1.0, True),
    ]
    stale = json.loads((tmp_path / "jobs" / "fit_lga_s0.json.stale").read_text())
    assert stale["value"] == 0.3
    assert json.loads((tmp_path / "jobs" / "fit_lga_s0.json").read_text())["value"] == 1.0
    lb.export_jobs(tmp_path, tmp_path / "export.jsonl")  # the stale result is not exported
    exported = [json.loads(line) for line in (tmp_path / "export.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["value"]) for r in exported) == [
        ("fit_gradnorm_s0", 3.0),
        ("fit_lga_s0", 1.0),
    ]


def test_a_result_made_with_other_fixed_options_or_measures_is_run_again(tmp_path: Path):
    """The swept value alone does not identify a result: a method whose fixed options changed
    (finetune_grad_cam's penalty, 2026-12-03) or a measure that changed (MEASURE_VERSION) makes
    the stored result stale. A result stored before results recorded their settings is compared
    by its value only."""
    ran, worker = _recording_worker()
    sched = Scheduler(worker, methods.quick_plan(), tmp_path, workers=1, budget_s=60)
    fit = methods.Job("fit", "fit_gradnorm_s0", "gradnorm", value=3.0)
    ev = methods.Job("eval", "eval_saliency_gradnorm_s0", "gradnorm", value=3.0, group="saliency")
    legacy = methods.Job("fit", "fit_lga_s0", "lga", value=1.0)
    old_options = {**fit.settings(), "kwargs": {**fit.kwargs(), "probe": "other"}}
    old_measure = {**ev.settings(), "measure_version": methods.MEASURE_VERSION - 1}
    for job, settings in ((fit, old_options), (ev, old_measure), (legacy, None)):
        stored = {**job.record(), "fresh": False}
        if settings is not None:
            stored["settings"] = settings
        (tmp_path / "jobs" / f"{job.id}.json").write_text(json.dumps(stored))
        sched.add(job, 0)
    seen = []
    sched.run(seen.append)
    assert sorted(ran) == ["eval_saliency_gradnorm_s0", "fit_gradnorm_s0"] and sched.reused == 1
    assert {r["id"]: r["fresh"] for r in seen} == {
        "fit_gradnorm_s0": True, "eval_saliency_gradnorm_s0": True, "fit_lga_s0": False,
    }  # fmt: skip
    for job in (fit, ev):
        assert (tmp_path / "jobs" / f"{job.id}.json.stale").is_file()
        rewritten = json.loads((tmp_path / "jobs" / f"{job.id}.json").read_text())
        assert rewritten["settings"] == job.settings()
    assert "measure_version" in ev.settings() and "measure_version" not in fit.settings()
    sched = Scheduler(worker, methods.quick_plan(), tmp_path, workers=1, budget_s=60)
    for job in (fit, ev, legacy):
        sched.add(job, 0)
    sched.run(lambda r: None)
    assert sched.reused == 3  # the rewritten results match their jobs


def test_a_profile_of_other_methods_is_run_again(tmp_path: Path):
    """The step profile times a list of methods; adding rows to the table makes it stale."""
    ran, worker = _recording_worker()
    sched = Scheduler(worker, methods.quick_plan(), tmp_path, workers=1, budget_s=60)
    job = methods.Job("profile", "profile", "natural", names=("natural", "gradnorm"))
    older = {**methods.Job("profile", "profile", "natural", names=("natural",)).record()}
    (tmp_path / "jobs" / "profile.json").write_text(json.dumps(older))
    sched.add(job, 0)
    sched.run(lambda r: None)
    assert ran == ["profile"] and sched.reused == 0


def test_beta_smoothing_rows_train_and_are_measured_as_softplus_networks():
    """beta_smoothing sweeps the Softplus beta of a cross-entropy fine-tune (no penalty);
    finetune_smoothness_softplus is finetune_smoothness on a Softplus(1) network. The ReLU
    methods' recorded settings do not change (their stored results stay valid)."""
    import torch

    from robust_train.models import count_relus

    beta = methods.Job("fit", "fit_beta_smoothing_s0", "beta_smoothing", value=2.0)
    combo = methods.Job("cv", "x", "finetune_smoothness_softplus", value=10.0, fold=0)
    relu = methods.Job("fit", "fit_finetune_smoothness_s0", "finetune_smoothness", value=10.0)
    assert beta.kwargs() == {} and beta.softplus_beta() == 2.0
    assert combo.kwargs() == {**methods.METHODS["finetune_smoothness"].fixed, "weight": 10.0}
    assert combo.softplus_beta() == 1.0 and relu.softplus_beta() is None
    assert beta.settings() == {"kwargs": {}, "softplus_beta": 2.0}
    assert set(relu.settings()) == {"kwargs"} and set(combo.settings()) == {
        "kwargs", "softplus_beta", "measure_version"
    }  # fmt: skip
    for job, penalties in ((beta, 0), (combo, 1), (relu, 1)):
        module = lb._classifier(job, steps=10)
        softplus = [m for m in module.model.modules() if isinstance(m, torch.nn.Softplus)]
        assert len(module.penalties) == penalties
        if job.softplus_beta() is None:
            assert not softplus and count_relus(module.model) > 0
        else:
            assert count_relus(module.model) == 0 and softplus
            assert {m.beta for m in softplus} == {job.softplus_beta()}


def test_a_fine_tunes_cost_leaves_out_the_natural_model_it_had_to_train_again(tmp_path: Path):
    """A run restored from exported results trains a fine-tune's natural model again inside the
    fine-tune's job; that CPU time is the natural fit's, not the method's cost."""
    import time

    plan = methods.quick_plan()
    job = methods.Job("fit", "fit_beta_smoothing_s0", "beta_smoothing", seed=0, value=2.0)
    cpu = time.process_time()
    first = lb.run_job(job, plan, str(tmp_path))  # trains fit_natural_s0 first
    total = time.process_time() - cpu
    assert (tmp_path / "ckpt" / "fit_natural_s0.ckpt").is_file()
    assert first["retrain_cpu_s"] > 0.05
    assert first["cpu_s"] + first["retrain_cpu_s"] == pytest.approx(total, abs=0.05)
    again = lb.run_job(job, plan, str(tmp_path))  # the natural model is there now
    assert again["retrain_cpu_s"] < 0.05
