"""The VGG-BN head diagnosis of the cluttered page: its variants are the configs' VGG-BN with each
head (and the small CNN), its table lists them in a fixed order with the loss curve, and bad
arguments stop it before any work."""

from __future__ import annotations

import json

import pytest
import torch

from experiments.cluttered_head import VARIANTS, build, head_table, main, mean_chunks


def test_variants_differ_only_in_the_head_or_the_depth():
    x = torch.rand(1, 3, 64, 64)
    avg, top = build("vgg_avg"), build("vgg_max")
    assert isinstance(avg.hidden[0], torch.nn.AdaptiveAvgPool2d)
    assert isinstance(top.hidden[0], torch.nn.MaxPool2d) and top.hidden[0].kernel_size == 8
    # the same seed, the same parameters: only the pooling differs
    for a, b in zip(avg.state_dict().values(), top.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    features = avg.eval().features(avg.normalize(x))
    top.eval()
    by_hand = top.classifier(top.hidden[1:](features.amax(dim=(2, 3))))
    torch.testing.assert_close(top(x), by_hand)
    deeper = build("vgg_avg_4stages")
    assert sum(isinstance(m, torch.nn.MaxPool2d) for m in deeper.features) == 4
    assert type(build("cnn")).__name__ == "MNISTConvNet"
    with pytest.raises(ValueError, match="variant.*'vgg'"):
        build("vgg")


def test_mean_chunks_against_a_loop():
    values = [float(v) for v in torch.rand(53)]
    expected = []
    for start in range(0, 53, 25):
        chunk = values[start : start + 25]
        expected.append(sum(chunk) / len(chunk))
    assert mean_chunks(values, 25) == pytest.approx(expected)


def test_table_in_the_variants_order_with_the_curve(tmp_path):
    base = {"steps": 250, "loss_first50": 2.3, "loss_last50": 1.7, "train_accuracy_last50": 0.3,
            "val_accuracy_eval": 0.35, "val_accuracy_batch_statistics": 0.43,
            "cpu_seconds": 90.4}  # fmt: skip
    (tmp_path / "vgg_max.json").write_text(json.dumps({**base, "curve": [2.31, 0.275]}))
    (tmp_path / "vgg_avg.json").write_text(json.dumps({**base, "curve": [2.306]}))
    table = head_table(tmp_path)
    assert [row[0] for row in table["rows"]] == ["vgg_avg", "vgg_max"]  # VARIANTS' order
    assert list(VARIANTS).index("vgg_avg") < list(VARIANTS).index("vgg_max")
    assert table["rows"][1][1:] == ["250", "2.300", "1.700", "0.300", "0.350", "0.430", "90",
                                    "2.31 0.28"]  # fmt: skip
    assert len(table["columns"]) == len(table["rows"][0])


@pytest.mark.parametrize("argv", [["--steps", "0", "--variant", "cnn"], [], ["--variant", "x"]])
def test_bad_arguments_stop_before_any_work(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--out", str(tmp_path)])
    assert stop.value.code == 2
    assert not (tmp_path / "head").exists()
