"""The `robust-train` console script: the dispatcher (`cli`), the LightningCLI runner
(`lightning_cli`), the plain commands (`commands`: evaluate, compare, export; `certify_command`;
`check_data`; `demo`), their shared flags and error wording (`settings_flags`, `parse_errors`),
how a model and a checkpoint are read (`model_source`, `checkpoint_io`) and the report they write
(`report`). The held-out images and the evaluation on a split are the engine's
(`robust_train.evaluation.heldout`, `robust_train.evaluation.split`), a fit's run folder is
training's (`robust_train.training.run_folder`).

Nothing here is imported by the lower layers; `robust-train --help` loads no PyTorch.
"""
