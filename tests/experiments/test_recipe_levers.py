"""The levers study (experiments/recipe_levers.py): each lever is the shipped penalty with its
stated changes, its table reads the per-image jobs it is given beside the front's shipped rows,
and bad flags exit 2 before any work."""

from __future__ import annotations

import json

import pytest
import yaml

from experiments import recipe_front, recipe_levers
from robust_train.core.resources import shipped_config
from tests.experiments.test_recipe_front import _job


def _shipped() -> dict:
    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = config["model"]["penalties"]
    return penalty["init_args"]


def test_each_lever_is_the_shipped_penalty_with_its_changes():
    shipped = _shipped()
    (plain,) = recipe_levers.terms("shipped", 4)
    assert plain.weight == shipped["weight"] and plain.generator.initial_seed() == 4
    assert plain.options.map_powers == tuple(shipped["map_powers"])
    assert plain.options.radius == shipped["radius"] and plain.options.start == shipped["start"]
    assert not plain.options.gradient_factor and plain.options.n_starts == 1
    (alone,) = recipe_levers.terms("factor_alone", 0)
    assert alone.options.gradient_factor and alone.options.explainers == plain.options.explainers
    first, second = recipe_levers.terms("factor_added", 2)
    assert first.options == plain.options and second.name == "factor"
    assert second.generator.initial_seed() == 2 + recipe_levers.SECOND_SEED
    assert second.options.explainers == ("input_x_gradient",) and second.options.gradient_factor
    assert second.options.radius == plain.options.radius and second.weight == 3.0
    (starts,) = recipe_levers.terms("starts8", 0)
    assert starts.options.n_starts == 8 and starts.options.start == "corner"
    (topk,) = recipe_levers.terms("l1tm_w4", 0)
    assert topk.options.distance == "l1_topk_mass" and topk.weight == 4.0
    with pytest.raises(ValueError, match="`lever` must be one of"):
        recipe_levers.terms("nope", 0)


def test_collect_reads_the_jobs_beside_the_fronts_shipped_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe_levers, "IMAGES", 4)
    monkeypatch.setattr("experiments.recipe_front_report.IMAGES", 4)
    runs = tmp_path / "runs"
    (runs / "fits").mkdir(parents=True)
    fit = {"tag": "starts8_s0", "lever": "starts8", "seed": 0, "test_acc": 0.9725,
           "fit_cpu_s": 9.0}  # fmt: skip
    (runs / "fits" / "starts8_s0.json").write_text(json.dumps(fit))
    folder = runs / "full" / "starts8_s0"
    for c in (0, 1):
        _job(folder, "robust", "saliency", c, [0.5, 0.7], [0.1, 0.2], [0.6, 0.8])
    _job(folder, "robust", "lrp", 0, [0.9, 0.9], [0.1, 0.1])  # one chunk of two: not counted
    front = {"models": {"shipped_s1": {"fit": {"test_acc": 0.968}, "maps": {
        "saliency": {"values": [0.4, 0.5], "random": [0.125, 0.125]},
        "input": {"values": [0.6, 0.7]}}}}}  # fmt: skip
    stored = tmp_path / "front.json"
    stored.write_text(json.dumps(front))
    monkeypatch.setattr(recipe_front, "RESULTS", stored)
    (runs / "cost.json").write_text(json.dumps({"cost": {"starts8": 2.5, "shipped": 2.0}}))
    data = recipe_levers.collect(runs, tmp_path / "levers.json")
    rows = {r[0]: r for r in data["tables"]["levers"]["rows"]}
    assert list(rows) == ["shipped_s1", "starts8_s0"]  # the front's rows first
    columns = data["tables"]["levers"]["columns"]
    sal, lrp = columns.index("saliency"), columns.index("LRP")
    assert rows["starts8_s0"][2] == "0.973" and rows["starts8_s0"][sal] == "0.600"
    assert rows["starts8_s0"][3] == "2.50x" and rows["shipped_s1"][3] == "2.00x"
    assert rows["starts8_s0"][lrp] == "-" and rows["starts8_s0"][-2] == "0.700"
    assert rows["starts8_s0"][-1] == "0.150-0.150" and rows["shipped_s1"][sal] == "0.450"
    assert json.loads((tmp_path / "levers.json").read_text())["tables"] == data["tables"]
    with pytest.raises(FileNotFoundError, match="`--runs`"):
        recipe_levers.collect(tmp_path / "none", tmp_path / "x.json")


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["run", "--runs", "r", "--levers", "nope"], "`--levers` must be some of"),
     (["run", "--runs", "r", "--seeds", "-1"], "`--seeds` must be >= 0, got [-1]"),
     (["collect", "--runs", "/no/such/folder"], "`--runs` must be an existing folder")],
)  # fmt: skip
def test_bad_arguments_exit_2_before_any_work(argv, said, capsys, monkeypatch):
    monkeypatch.setattr(recipe_levers, "run", lambda *a: pytest.fail("ran"))
    monkeypatch.setattr(recipe_levers, "collect", lambda *a: pytest.fail("collected"))
    with pytest.raises(SystemExit) as exit_:
        recipe_levers.main(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


def test_the_fit_takes_the_shipped_epochs_unless_the_lever_changes_them(tmp_path, monkeypatch):
    """`fit_job` fits with the shipped config's epochs and learning rate, `e6` with 6 epochs, and
    skips a fit whose file is there."""
    import experiments.every_map as every_map
    from experiments import explainer_recipes

    calls = []

    def fake_tune(terms, epochs, beta, seed, ckpt, lr):
        calls.append((len(terms), epochs, seed, lr))
        return None, [1.0] * epochs, float(epochs)

    monkeypatch.setattr(every_map, "tune", fake_tune)
    monkeypatch.setattr(explainer_recipes, "accuracy", lambda *a: 0.5)
    monkeypatch.setattr(explainer_recipes, "split", lambda name: (name,))
    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    epochs, lr = config["trainer"]["max_epochs"], config["model"]["optimizer"]["init_args"]["lr"]
    rows = [json.loads(recipe_levers.fit_job(lever, 1, tmp_path).read_text())
            for lever in ("factor_added", "e6")]  # fmt: skip
    assert calls == [(2, epochs, 1, lr), (1, 6, 1, lr)]
    assert [r["epochs"] for r in rows] == [epochs, 6] and rows[1]["tag"] == "e6_s1"
    recipe_levers.fit_job("e6", 1, tmp_path)
    assert len(calls) == 2  # the fit file was there: not fitted again


def test_the_cost_is_one_epoch_of_each_fit_side_by_side(tmp_path, monkeypatch):
    """Each lever's recipe cost is (6 + its epochs x its epoch / the natural epoch) / 6, each
    epoch the mean of two epochs of its fit (the natural fine-tune without terms), measured
    once."""
    import experiments.every_map as every_map

    seconds = {0: 2.0, 1: 5.0, 2: 3.0}  # natural, shipped, e6: by the number of terms and order
    calls = []

    def fake_tune(terms, epochs, beta, seed, ckpt, lr):
        calls.append((len(terms), epochs, ckpt))
        first = seconds[len(calls) - 1]
        return None, [first, first + 1.0][:epochs], 0.0  # the mean: first + 0.5

    monkeypatch.setattr(every_map, "tune", fake_tune)
    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    epochs = config["trainer"]["max_epochs"]
    path = recipe_levers.cost_job(tmp_path, ["shipped", "e6"])
    cost = json.loads(path.read_text())
    assert [c[:2] for c in calls] == [(0, 2), (1, 2), (1, 2)] and {c[2] for c in calls} == {None}
    assert cost["cost"]["shipped"] == pytest.approx((6 + epochs * 5.5 / 2.5) / 6)
    assert cost["cost"]["e6"] == pytest.approx((6 + 6 * 3.5 / 2.5) / 6)
    recipe_levers.cost_job(tmp_path, ["shipped", "e6"])
    assert len(calls) == 3  # measured once
