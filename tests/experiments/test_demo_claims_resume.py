"""The demo_claims experiment resumes: a seed whose run already wrote results.json is read, not
run again, unless `--rerun`."""

from __future__ import annotations

import json

from experiments import demo_claims
from robust_train.app import demo


def test_finished_seeds_are_read_and_only_the_others_run(tmp_path, monkeypatch):
    runs = []

    def fake_demo(argv):
        seed, out = int(argv[1]), tmp_path / "runs" / f"seed_{argv[1]}"
        runs.append(seed)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({"seed": seed}))
        return 0

    monkeypatch.setattr(demo, "main", fake_demo)
    monkeypatch.setattr(demo, "gain", lambda r: {"saliency": 0.1 * r["seed"], "accuracy": 0.0})
    args = ["--out", str(tmp_path / "runs"), "--results", str(tmp_path / "claims.json")]
    fake_demo(["--seed", "1"])  # a run an interruption left behind
    runs.clear()
    demo_claims.main(["--seeds", "0", "1", "2", *args])
    assert runs == [0, 2]
    claims = json.loads((tmp_path / "claims.json").read_text())
    assert claims["seeds"] == [0, 1, 2] and claims["gains"]["saliency"]["max"] == 0.2
    demo_claims.main(["--seeds", "0", "1", *args, "--rerun"])
    assert runs == [0, 2, 0, 1]
