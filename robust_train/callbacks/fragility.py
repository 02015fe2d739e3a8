"""FragilityMonitor: the engine's "fragility" part, logged while the model trains."""

from __future__ import annotations

from robust_train.callbacks.robustness import RobustnessMonitor

__all__ = ["FragilityMonitor"]


class FragilityMonitor(RobustnessMonitor):
    """Fragility attacks on the explanations of held-out images (Ghorbani, Abid & Zou, AAAI 2019).

    At each scheduled evaluation, every attack in `attacks` perturbs the correctly classified
    images of the held-out subset within an L_inf ball of `epsilon` (label kept, see
    `robust_train.attacks.fragility_attack`) and logs the means over images of
    `robustness/attack/<explainer>/<attack>/<measure>` (top-k intersection, Spearman, Kendall,
    center shift, ..., `n_unmeasured`, `improved`), `robustness/n_attacked` and
    `robustness/seconds/fragility`: the keys of `robust-train evaluate` under `robustness/`.
    Images the attack could not move are left out of the means and counted in `n_unmeasured`;
    with none measured the means are NaN, never a perfect score. With figures on,
    `robustness/attack/<explainer>/topk/examples` shows the first `n_images` attacked images.
    Defaults: `robust_train.evaluation.MONITOR_DEFAULTS` (3 steps of 2 epsilon / 3 on 16
    images: a cheap preset for use during training, not a substitute for the evaluation's
    attack).

    Args:
        **options: the evaluation settings and the callback's schedule, subset and logging
            options, as for `RobustnessMonitor`.

    Examples:
        >>> monitor = FragilityMonitor(attacks=("topk",), n_samples=16, every_n_epochs=2)
        >>> monitor.settings.attacks, monitor.every_n_epochs
        (('topk',), 2)
    """

    name = "fragility"
    preset_parts = ("fragility",)
