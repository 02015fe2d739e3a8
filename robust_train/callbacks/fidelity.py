"""FidelityMonitor: the engine's "fidelity" part, logged while the model trains."""

from __future__ import annotations

from robust_train.callbacks.robustness import RobustnessMonitor

__all__ = ["FidelityMonitor"]


class FidelityMonitor(RobustnessMonitor):
    """MIF and LIF perturbation curves of explainers on held-out images (Brocki & Chung 2022).

    Pixels are removed in order of importance, most important first (MIF: the score of the
    predicted class should fall fast) and least important first (LIF: it should stay high);
    the fidelity estimate AUC_LIF - AUC_MIF separates faithfulness from perturbation artifacts.
    Logs `robustness/fidelity/<explainer>/{mif_auc,lif_auc,fidelity}` and
    `robustness/seconds/fidelity`; with figures on, the mean curves go to W&B as a line chart
    `robustness/fidelity/<explainer>`, or to a PNG file for other loggers. 10 steps by default
    (Brocki & Chung used 20: twice the cost for a similar area).

    Args:
        **options: the evaluation settings and the callback's schedule, subset and logging
            options, as for `RobustnessMonitor`.

    Examples:
        >>> monitor = FidelityMonitor(explainers=["saliency"], fidelity_steps=10, every_n_epochs=5)
        >>> monitor.settings.explainers, monitor.settings.fidelity_steps
        (('saliency',), 10)
    """

    name = "fidelity"
    preset_parts = ("fidelity",)
