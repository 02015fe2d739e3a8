"""Typos in option names and bad values through the console script (one case in a process of
its own, the warm console's, tests/support/warm_console.py; the others through its entry point
`robust_train.app.cli.main` in-process; tests/cli/test_errors.py runs the script itself):
one line with the full key, the class that refused it and a "did you mean", exit code 2, before
any work; options are never abbreviated (`--trainer.max_epoch 1` is refused, not taken as
`--trainer.max_epochs 1`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robust_train.app.parse_errors import close_key, describe_parse_error, init_arguments

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BASE = ["fit", "--config", str(CONFIGS / "digits_smoothness.yaml"), "--trainer.logger=false"]


def _error_line(result) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("robust-train: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "Epoch" not in result.stderr + result.stdout  # refused before any training
    return errors[0]


@pytest.mark.slow
def test_typos_and_bad_values_get_one_line_naming_the_key(tmp_path: Path, console, cli):
    text = (CONFIGS / "digits_smoothness.yaml").read_text()
    assert "max_epochs:" in text and "weight: 1.0" in text
    (tmp_path / "epocs.yaml").write_text(text.replace("max_epochs:", "max_epocs:"))
    (tmp_path / "heavy.yaml").write_text(text.replace("weight: 1.0", 'weight: "heavy"'))
    (tmp_path / "optimizr.yaml").write_text("model:\n  optimizr:\n    init_args: {lr: 0.1}\n")
    cases = {
        "yaml_trainer": (
            ["fit", "--config", str(tmp_path / "epocs.yaml"), "--trainer.logger=false"],
            "does not accept option 'trainer.max_epocs' (did you mean 'trainer.max_epochs'?)",
        ),
        "yaml_nested": (
            [*BASE, "--config", str(tmp_path / "optimizr.yaml")],
            "(did you mean 'model.optimizer.init_args.lr'?)",
        ),
        "flag_nested": (
            [*BASE, "--model.optimizr.init_args.lr", "0.1"],
            "--model.optimizr.init_args.lr 0.1 (did you mean --model.optimizer.init_args.lr?)",
        ),
        "flag_init_args": (
            [*BASE, "--data.init_args.batchsize", "8"],
            "data.init_args.batchsize (robust_train.data.DigitsDataModule): "
            "Option 'batchsize' is not accepted (did you mean 'batch_size'?)",
        ),
        "value": (
            ["fit", "--config", str(tmp_path / "heavy.yaml"), "--trainer.logger=false"],
            "model.penalties.init_args.weight (robust_train.regularizers.ExplanationSmoothness): "
            "Expected a float. Got value: heavy",
        ),
        "abbreviation": (
            [*BASE, "--trainer.max_epoch", "1"],
            "unrecognized arguments: --trainer.max_epoch 1 (did you mean --trainer.max_epochs?)",
        ),
    }
    out = {  # a process of its own once (the warm console's); the other cases in-process
        name: (console if name == "abbreviation" else cli)(*args, cwd=tmp_path)
        for name, (args, _) in cases.items()
    }
    for name, (_, fragment) in cases.items():
        line = _error_line(out[name])
        assert fragment in line, (name, line)
    assert not (tmp_path / "checkpoints").exists()


def test_close_key_corrects_the_first_unknown_segment_and_keeps_the_rest():
    known = ["trainer.max_epochs", "trainer.max_steps", "model.optimizer", "model.penalties"]
    assert close_key("trainer.max_epoch", known) == "trainer.max_epochs"
    assert close_key("trainr.max_epochs", known) == "trainer.max_epochs"
    assert close_key("model.penalty.init_args.weight", known) == "model.penalties.init_args.weight"
    assert close_key("model.optimizer.init_args.lr", known) is None  # known up to a leaf
    assert close_key("data.root", known) is None


def test_tree_messages_become_one_line_and_nested_rewrites_are_kept():
    tree = (
        'Parser key "model.model":\n'
        "  Problem with given class_path 'robust_train.models.SmallCNN':\n"
        "    Option 'num_clases' is not accepted"
    )
    line = describe_parse_error(tree, None, None)
    assert line == (
        "model.model.init_args.num_clases (robust_train.models.SmallCNN): "
        "Option 'num_clases' is not accepted (did you mean 'num_classes'?)"
    )
    assert describe_parse_error(line, None, None) == line  # idempotent (error() runs again)
    assert "num_classes" in init_arguments("robust_train.models.SmallCNN")
    assert init_arguments("robust_train.models.NoSuchNet") == []
