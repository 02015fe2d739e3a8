"""A config listing BatchNormRecalibration builds it through the CLI; a bad value is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from robust_train.app.lightning_cli import lightning_main
from robust_train.callbacks import BatchNormRecalibration

CONFIG = """
seed_everything: 0
trainer:
  max_epochs: 1
  limit_train_batches: 2
  limit_val_batches: 1
  num_sanity_val_steps: 0
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
  callbacks:
    - class_path: robust_train.callbacks.BatchNormRecalibration
      init_args: {{n_batches: {n_batches}, every_n_steps: 1}}
model:
  model:
    class_path: robust_train.models.SmallCNN
    init_args: {{in_channels: 1, num_classes: 10, input_size: 8, batchnorm: true}}
data:
  class_path: robust_train.data.SyntheticDataModule
  init_args: {{num_samples: 32, image_size: 8, in_channels: 1, num_classes: 10, batch_size: 8}}
"""


def _config(tmp_path: Path, n_batches: int) -> list[str]:
    path = tmp_path / "bn.yaml"
    path.write_text(CONFIG.format(n_batches=n_batches))
    return ["--config", str(path), "--checkpoint_root", str(tmp_path)]


def test_the_cli_builds_the_callback_and_it_runs_in_the_fit(tmp_path):
    cli = lightning_main(_config(tmp_path, 3), run=False)
    (callback,) = [c for c in cli.trainer.callbacks if isinstance(c, BatchNormRecalibration)]
    assert (callback.n_batches, callback.every_n_steps, callback.before_validation) == (3, 1, True)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert callback.count == 2  # after steps 1 and 2; validation and the epoch end find no new step
    assert int(cli.model.model.features[1].num_batches_tracked) == 3


def test_a_bad_value_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match="`n_batches` must be > 0, got 0"):
        lightning_main(_config(tmp_path, 0), run=False)
